"""A real Postfix (Debian's package, run privately), set up as deploy/postfix-lmtp.md says,
delivering the game address to the LMTP receiver: mail from outside ``mynetworks`` is
accepted (the old guide's set-up answered 454 Relay access denied), and an order Postfix
accepted before the deadline while snl-pbem was down counts, timed by Postfix's own
Received header: ``serve`` asks Postfix for it at start-up (ETRN), with no ``postqueue -f``,
and the round closes as soon as it has come (issue 21)."""

from __future__ import annotations

import logging
import os
import smtplib
import socket
import threading
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
from snl_pbem.runners.server import Server
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
    tmp_path: Path, postfix: PostfixServer, deadline: datetime, address: str = GAME
) -> tuple[Database, Config]:
    """The game g1 with its [mail.lmtp] as the guide writes it, asking this Postfix (ETRN)."""
    db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
    upgrade(db)
    path = tmp_path / "config.toml"
    game_config(path, db.url)
    text = (
        path.read_text()
        .replace('timezone = "Europe/London"', 'timezone = "UTC"')
        .replace('"2030-01-04T18:00"', f'"{deadline.isoformat(timespec="seconds")}"')
        .replace(f'address = "{GAME}"', f'address = "{address}"')
    )
    path.write_text(
        text + f'\n[mail.lmtp]\nport = {postfix.lmtp_port}\nmta_hostname = "{postfix.hostname}"\n'
        f'etrn_server = "{postfix.host}:{postfix.port}"\n'
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


class Closes:
    """serve's on_close: the rounds it closed, and an event per close."""

    def __init__(self) -> None:
        self.outcomes: list = []
        self.event = threading.Event()

    def __call__(self, outcome) -> None:
        self.outcomes.append(outcome)
        self.event.set()


def test_an_order_queued_while_serve_was_down_counts(tmp_path: Path, postfix, caplog) -> None:
    """Issue 21: serve is stopped; ann's order, sent before the deadline, is accepted and
    deferred by Postfix; the deadline passes; serve starts, with the default grace (11
    minutes) and no postqueue -f. It asks Postfix (ETRN) for what it queued: the order
    comes at once, counts in its round by Postfix's receipt time, and the round closes
    long before the grace ends. Without the ETRN, Postfix's own retry comes no sooner than
    300 s later (minimal_backoff_time, then its queue run): the wait below (WAIT, 120 s)
    would end first."""
    caplog.set_level(logging.INFO)
    db, config = setup_game(tmp_path, postfix, datetime.now(UTC) + timedelta(days=1))
    path = tmp_path / "config.toml"
    assert config.settings.mail.lmtp.redelivery_grace == timedelta(minutes=11)  # type: ignore[union-attr]
    serve = Server(path)
    serve.start()
    serve.shutdown()  # serve is stopped
    # the deadline: 10 s after the set-up, however long that took on this machine (sending
    # one message to Postfix takes well under a second; 10 s is the margin for a busy one)
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
    with db.transaction() as s:
        s.scalar(select(Round).where(Round.number == 1)).deadline = deadline
    # Postfix accepts the order (250) and defers it (connection refused)
    send_from_outside(postfix, order("queued"))
    accepted = datetime.now(UTC)
    assert accepted < deadline, f"sending took until {accepted - deadline} after the deadline"
    wait_for(lambda: "Connection refused" in postfix.queue(), WAIT, postfix, "the deferral")
    while datetime.now(UTC) <= deadline + timedelta(seconds=1):  # the deadline passes
        time.sleep(0.2)
    assert stored(db) == []
    closes = Closes()
    serve = Server(path, on_close=closes)
    started = datetime.now(UTC)
    serve.start()  # serve starts again: nothing else is done, no postqueue -f
    try:
        closed = closes.event.wait(WAIT)
        grace_ended = serve.rounds.redelivered_at
    finally:
        serve.shutdown()
    assert closed, f"round 1 not closed within {WAIT} s\n{postfix.queue()}\n{postfix.log()}"
    assert grace_ended is not None and grace_ended - started < timedelta(seconds=WAIT)
    (row,) = stored(db)
    assert aware(row.received_at) <= deadline < started  # Postfix's time, not ours
    assert aware(row.received_at) >= accepted.replace(microsecond=0) - timedelta(seconds=1)
    (outcome,) = closes.outcomes
    assert (outcome.round, outcome.next_round) == (1, 2)
    assert "ann" not in {str(p) for p in outcome.result.nmr}
    with db.transaction() as s:
        records = s.execute(
            select(Round.number, OrderRecord.dice, OrderRecord.valid).join(
                Round, Round.id == OrderRecord.round_id
            )
        ).all()
    assert records == [(1, "3", True)]
    assert not [
        r for r in caplog.records if r.name == "snl_pbem.lmtp" and r.levelno >= logging.WARNING
    ]
    db.dispose()


def test_an_etrn_postfix_refuses_is_one_warning_and_the_grace_stays(
    tmp_path: Path, postfix, caplog
) -> None:
    """A domain Postfix does not flush (not a relay domain, not in fast_flush_domains):
    Postfix answers ETRN with 459. serve says so once, naming the fix, and a round past
    its deadline waits the whole grace."""
    caplog.set_level(logging.INFO)
    db, _ = setup_game(
        tmp_path, postfix, datetime.now(UTC) + timedelta(days=1), address="snl@other.example"
    )
    with db.transaction() as s:  # the deadline passed while serve was down
        s.scalar(select(Round).where(Round.number == 1)).deadline = datetime.now(UTC)
    serve = Server(tmp_path / "config.toml")
    serve.start()
    try:

        def warnings() -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.levelno >= logging.WARNING and "ETRN" in r.getMessage()
            ]

        wait_for(lambda: warnings(), WAIT, postfix, "the warning")
        limit = serve.rounds.started_at + timedelta(minutes=11)
        assert serve.rounds.redelivery_until == limit
        assert serve.scheduler.get_job("close:g1:1").trigger.run_date == limit
    finally:
        serve.shutdown()
    (warning,) = warnings()
    text = warning.getMessage()
    assert "459" in text and "other.example" in text
    assert "relay_domains" in text and "fast_flush_domains" in text and "etrn_server" in text
    assert serve.rounds.redelivered_at is None
    db.dispose()
