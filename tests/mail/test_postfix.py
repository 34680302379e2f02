"""A real Postfix (Debian's package, run privately), set up as deploy/postfix-lmtp.md says,
delivering the game address to the LMTP receiver: mail from outside ``mynetworks`` is
accepted (the old guide's set-up answered 454 Relay access denied), and an order Postfix
accepted before the deadline while snl-pbem was down counts, timed by Postfix's own
Received header, once Postfix has redelivered it (``postqueue -f``)."""

from __future__ import annotations

import os
import smtplib
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
from mailhelpers import game_config
from postfixserver import PostfixServer, PostfixUnavailable
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import Config, load_config
from snl_pbem.mail.received import topmost_received
from snl_pbem.runners.mailboxes import lmtp_receiver
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.store import Database, InboundMessage, OrderRecord, Player, Round
from snl_pbem.store.migrate import upgrade

GAME = "snl@example.org"
WAIT = 120  # waits end on their event (a second or so); the limit only detects a hang
OUTSIDE = "127.0.0.2"  # not in the private Postfix's mynetworks (127.0.0.1/32)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postfix(lmtp_port: int, guide: bool = True) -> PostfixServer:
    try:
        return PostfixServer(GAME, lmtp_port).start(guide=guide)
    except PostfixUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Postfix is required under CI: {exc}")
        pytest.skip(f"Postfix not available: {exc}")


@pytest.fixture
def postfix() -> Iterator[PostfixServer]:
    server = _postfix(_free_port())
    yield server
    server.remove()


def setup_game(
    tmp_path: Path, postfix: PostfixServer, deadline: datetime
) -> tuple[Database, Config]:
    db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
    upgrade(db)
    path = tmp_path / "config.toml"
    game_config(path, db.url)
    text = (
        path.read_text()
        .replace('timezone = "Europe/London"', 'timezone = "UTC"')
        .replace('"2030-01-04T18:00"', f'"{deadline.isoformat(timespec="seconds")}"')
    )
    path.write_text(
        text + f'\n[mail.lmtp]\nport = {postfix.lmtp_port}\nmta_hostname = "{postfix.hostname}"\n'
    )
    config = load_config(path)
    sync_games(db, config, datetime.now(UTC))
    start_game(db, config, "g1", datetime.now(UTC) - timedelta(minutes=1))
    return db, config


def order(tag: str) -> bytes:
    return (
        f"From: ann@example.org\r\nTo: {GAME}\r\nSubject: [g1]\r\n"
        f"Date: Fri, 4 Jan 2030 12:00:00 +0000\r\nMessage-ID: <{tag}@example.org>\r\n\r\n"
        "KEY ann-key-123\r\nDICE 3\r\n"
    ).encode()


def send_from_outside(postfix: PostfixServer, raw: bytes) -> None:
    with smtplib.SMTP(postfix.host, postfix.port, source_address=(OUTSIDE, 0), timeout=20) as c:
        c.ehlo("client.test")
        assert c.sendmail("ann@example.org", [GAME], raw) == {}


def stored(db: Database) -> list[InboundMessage]:
    with db.transaction() as s:
        rows = list(s.scalars(select(InboundMessage).order_by(InboundMessage.id)))
        s.expunge_all()
        return rows


def handled(db: Database) -> int:
    return sum(row.status != "new" for row in stored(db))


def wait_for(what, seconds: float, postfix: PostfixServer, why: str) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if what():
            return
        time.sleep(0.2)
    raise AssertionError(f"{why}: not within {seconds}s\n{postfix.queue()}\n{postfix.log()}")


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def test_the_old_guide_refused_outside_mail_with_454(tmp_path: Path) -> None:
    server = _postfix(_free_port(), guide=False)  # transport_maps alone
    try:
        with smtplib.SMTP(server.host, server.port, source_address=(OUTSIDE, 0), timeout=20) as c:
            c.ehlo("client.test")
            c.mail("ann@example.org")
            code, text = c.rcpt(GAME)
        assert (code, b"Relay access denied" in text) == (454, True)
    finally:
        server.remove()


def test_outside_mail_reaches_the_receiver_timed_by_postfix(tmp_path: Path, postfix) -> None:
    db, config = setup_game(tmp_path, postfix, datetime.now(UTC) + timedelta(days=2))
    receiver = lmtp_receiver(db, config)
    assert receiver is not None
    receiver.start()
    try:
        before = datetime.now(UTC).replace(microsecond=0)
        send_from_outside(postfix, order("outside"))
        wait_for(lambda: handled(db) == 1, WAIT, postfix, "the order delivered over LMTP")
    finally:
        receiver.stop()
    (row,) = stored(db)
    received = topmost_received(row.raw)
    assert received is not None and f"by {postfix.hostname} (Postfix)" in received
    assert "[127.0.0.2]" in received
    assert aware(row.received_at) == parsedate_to_datetime(received.rpartition(";")[2])
    assert before <= aware(row.received_at) <= datetime.now(UTC)
    assert row.status == "processed"
    with db.transaction() as s:
        dice = s.execute(
            select(OrderRecord.dice, OrderRecord.valid).join(Player).where(Player.name == "ann")
        ).all()
    assert dice == [("3", True)]
    db.dispose()


def test_an_order_queued_while_serve_was_down_counts(tmp_path: Path, postfix) -> None:
    db, config = setup_game(tmp_path, postfix, datetime.now(UTC) + timedelta(days=1))
    # the deadline: 10 s after the set-up, however long that took on this machine (sending
    # one message to Postfix takes well under a second; 10 s is the margin for a busy one)
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
    with db.transaction() as s:
        s.scalar(select(Round).where(Round.number == 1)).deadline = deadline
    # snl-pbem is stopped: Postfix accepts the order (250) and defers it (connection refused)
    send_from_outside(postfix, order("queued"))
    accepted = datetime.now(UTC)
    assert accepted < deadline, f"sending took until {accepted - deadline} after the deadline"
    wait_for(lambda: "Connection refused" in postfix.queue(), WAIT, postfix, "the deferral")
    while datetime.now(UTC) <= deadline + timedelta(seconds=1):  # the deadline passes
        time.sleep(0.2)
    assert stored(db) == []
    # serve starts: the round past its deadline is not closed before the redelivery grace
    offset = timedelta(0)
    clock = lambda: datetime.now(UTC) + offset  # noqa: E731
    rounds = RoundScheduler(db, config, clock=clock)
    receiver = lmtp_receiver(db, config, clock=clock)
    assert receiver is not None
    receiver.start()
    try:
        assert rounds.catch_up() == []
        postfix.flush()  # as the guide's start-up step does (ExecStartPost=postqueue -f)
        wait_for(lambda: handled(db) == 1, WAIT, postfix, "the redelivery after postqueue -f")
    finally:
        receiver.stop()
    (row,) = stored(db)
    assert aware(row.received_at) <= deadline < datetime.now(UTC)  # Postfix's time, not ours
    assert aware(row.received_at) >= accepted.replace(microsecond=0) - timedelta(seconds=1)
    assert rounds.on_deadline("g1", 1) is None  # still in the grace
    offset = config.settings.mail.lmtp.redelivery_grace  # type: ignore[union-attr]
    outcome = rounds.on_deadline("g1", 1)
    assert outcome is not None and outcome.next_round == 2
    with db.transaction() as s:
        records = s.execute(
            select(Round.number, OrderRecord.dice, OrderRecord.valid).join(
                Round, Round.id == OrderRecord.round_id
            )
        ).all()
    assert records == [(1, "3", True)]
    assert "ann" not in {str(p) for p in outcome.result.nmr}
    db.dispose()
