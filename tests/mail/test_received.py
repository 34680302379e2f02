"""LMTP mail is timed by the referee's MTA's own (topmost) Received header, never by one a
sender could write; and no round closes before the MTA's redelivery grace after start-up."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mailhelpers import T0, game_config, orders_of
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.config import load_config
from snl_pbem.mail.received import mta_receipt_time, received_by, topmost_received
from snl_pbem.runners.mailboxes import lmtp_receipt_time, lmtp_receiver
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.store import Database, InboundMessage, Round
from snl_pbem.store.migrate import upgrade

HOST = "mx.example.org"
NOW = datetime(2026, 11, 30, 2, 50, 0, tzinfo=UTC)
DAY = timedelta(days=1)

# Received headers in the form Postfix 3.7 (Debian 12) writes them: for a client over TLS
# with reverse DNS, for one without (as the private Postfix of test_postfix.py writes it),
# and for local submission (sendmail/pickup).
POSTFIX_ESMTPS = (
    "Received: from mail-wr1-f41.google.com (mail-wr1-f41.google.com [209.85.221.41])\r\n"
    "\t(using TLSv1.3 with cipher TLS_AES_128_GCM_SHA256 (128/128 bits)\r\n"
    "\t key-exchange X25519 server-signature RSA-PSS (2048 bits) server-digest SHA256)\r\n"
    "\t(No client certificate requested)\r\n"
    "\tby mx.example.org (Postfix) with ESMTPS id 4Xyz1A2BcDz9vXH\r\n"
    "\tfor <snl@example.org>; Mon, 30 Nov 2026 02:43:07 +0000 (UTC)\r\n"
)
POSTFIX_UNKNOWN = (
    "Received: from client.test (unknown [127.0.0.2])\r\n"
    "\tby mx.example.org (Postfix) with ESMTP id 0C1D2E3F4A\r\n"
    "\tfor <snl@example.org>; Mon, 30 Nov 2026 03:43:07 +0100 (CET)\r\n"
)
POSTFIX_LOCAL = (
    "Received: by mx.example.org (Postfix, from userid 1000)\r\n"
    "\tid 5B6C7D8E9F; Mon, 30 Nov 2026 02:43:07 +0000 (UTC)\r\n"
)
AT = datetime(2026, 11, 30, 2, 43, 7, tzinfo=UTC)

BODY = (
    "From: Ann <ann@example.org>\r\nTo: snl@example.org\r\nSubject: [g1]\r\n"
    "Date: Mon, 30 Nov 2026 01:00:00 +0000\r\nMessage-ID: <{tag}@example.org>\r\n\r\n"
    "KEY ann-key-123\r\nDICE 3\r\n"
)


def message(*received: str, tag: str = "a") -> bytes:
    return ("".join(received) + BODY.format(tag=tag)).encode()


@pytest.mark.parametrize("header", [POSTFIX_ESMTPS, POSTFIX_UNKNOWN, POSTFIX_LOCAL])
def test_postfix_received_headers_give_its_receipt_time(header: str) -> None:
    assert mta_receipt_time(message(header), HOST, NOW, DAY) == AT
    assert mta_receipt_time(message(header), "MX.Example.ORG.", NOW, DAY) == AT


def test_only_the_topmost_received_counts() -> None:
    forged = (
        "Received: from x by mx.example.org (Postfix) with ESMTP id F;"
        " Sun, 29 Nov 2026 12:00:00 +0000\r\n"
    )
    # the sender wrote a Received "by" our host, dated before the deadline: ours is above
    assert mta_receipt_time(message(POSTFIX_UNKNOWN, forged), HOST, NOW, DAY) == AT
    # our MTA wrote no Received above it (mail not through it): the forged one is not ours
    relay = (
        "Received: from relay.example.net by other.example.net with ESMTP id R;"
        " Mon, 30 Nov 2026 02:49:00 +0000\r\n"
    )
    assert mta_receipt_time(message(relay, forged), HOST, NOW, DAY) is None
    # headers above ours (a milter's Authentication-Results) do not matter
    above = "Authentication-Results: mx.example.org; spf=pass\r\n"
    assert mta_receipt_time(message(above, POSTFIX_UNKNOWN, forged), HOST, NOW, DAY) == AT


def test_no_received_or_only_a_date_header_is_receipt_time() -> None:
    assert mta_receipt_time(message(), HOST, NOW, DAY) is None  # Date: is never used
    # a Received in the body is not a header
    raw = message() + b"\r\nReceived: by mx.example.org id X; Mon, 30 Nov 2026 01:00:00 +0000\r\n"
    assert mta_receipt_time(raw, HOST, NOW, DAY) is None


def test_a_helo_name_cannot_pass_for_the_by_clause() -> None:
    sneaky = (
        "Received: from by (unknown [127.0.0.2])\r\n\tby mx.example.org (Postfix) with ESMTP"
        " id 1; Mon, 30 Nov 2026 02:43:07 +0000\r\n"
    )
    assert mta_receipt_time(message(sneaky), HOST, NOW, DAY) == AT
    other = sneaky.replace("by mx.example.org", "by evil.example.net").replace(
        "from by", "from mx.example.org"
    )
    assert mta_receipt_time(message(other), HOST, NOW, DAY) is None
    assert received_by("from a by b by c; Mon, 30 Nov 2026 02:43:07 +0000") is None
    assert received_by("from a (unbalanced by mx.example.org; Mon, 30 Nov 2026") is None


@pytest.mark.parametrize(
    "date",
    [
        "Mon, 30 Nov 2026 02:51:00 +0000",  # in the future
        "Mon, 30 Nov 2026 03:51:00 +0100",  # the same, in another zone
        "Fri, 27 Nov 2026 02:43:07 +0000",  # older than max_queue_time
        "yesterday",  # not a date
        "",
    ],
)
def test_dates_outside_the_window_are_not_believed(date: str) -> None:
    header = f"Received: from a (a [127.0.0.2]) by mx.example.org (Postfix) id 1; {date}\r\n"
    assert mta_receipt_time(message(header), HOST, NOW, DAY) is None


def test_topmost_received_unfolds_and_stops_at_the_body() -> None:
    assert topmost_received(message(POSTFIX_LOCAL)) == (
        "by mx.example.org (Postfix, from userid 1000) id 5B6C7D8E9F;"
        " Mon, 30 Nov 2026 02:43:07 +0000 (UTC)"
    )
    assert topmost_received(b"Subject: x\r\n\r\nReceived: by a; date\r\n") is None


def lmtp_config(tmp_path: Path, db_url: str, lmtp: str):
    path = tmp_path / "config.toml"
    game_config(path, db_url)
    path.write_text(path.read_text() + "\n[mail.lmtp]\n" + lmtp)
    return load_config(path)


def test_the_receiver_stores_the_mta_receipt_time(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
    upgrade(db)
    config = lmtp_config(tmp_path, db.url, f'mta_hostname = "{HOST}"\nport = 1\n')
    sync_games(db, config, T0)
    start_game(db, config, "g1", AT - timedelta(hours=1))
    assert lmtp_receipt_time(config, message(POSTFIX_UNKNOWN), NOW) == AT
    assert lmtp_receipt_time(config, message(), NOW) == NOW
    # without mta_hostname: timed at receipt, as before
    plain = lmtp_config(tmp_path, db.url, "port = 1\n")
    assert lmtp_receipt_time(plain, message(POSTFIX_UNKNOWN), NOW) == NOW
    # the receiver passes it on to the store, and says so once it is committed
    controller = lmtp_receiver(db, config, clock=lambda: NOW)
    assert controller is not None and controller.handler.submit is not None
    told = threading.Event()
    controller.handler.submit(
        message(POSTFIX_UNKNOWN), "lmtp:127.0.0.1", lambda outcome: told.set()
    )
    assert told.wait(60)  # (a hang detector, not a speed)
    with db.transaction() as s:
        stored = s.scalars(select(InboundMessage.received_at)).all()
    assert [t.replace(tzinfo=UTC) if t.tzinfo is None else t for t in stored] == [AT]
    # answered once stored; the readers read it just after (a hang detector, not a speed)
    until = time.monotonic() + 60
    while not orders_of(db) and time.monotonic() < until:
        time.sleep(0.02)
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "3")]
    db.dispose()


# -- the redelivery grace -------------------------------------------------------------------

DEADLINE = datetime(2030, 1, 4, 18, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def grace_setup(tmp_path: Path, lmtp: str | None):
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    game_config(path, db.url)
    if lmtp is not None:
        path.write_text(path.read_text() + "\n[mail.lmtp]\n" + lmtp)
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    return db, config


def state_of_round_1(db: Database) -> str:
    with db.transaction() as s:
        return s.scalar(select(Round.state).where(Round.number == 1))


def test_a_deadline_missed_while_down_waits_for_the_mta(tmp_path: Path) -> None:
    db, config = grace_setup(tmp_path, 'mta_hostname = "mx.example.org"\n')
    started = DEADLINE + timedelta(seconds=17)  # serve was stopped over the deadline
    clock = Clock(started)
    rs = RoundScheduler(db, config, clock=clock)
    assert rs.catch_up() == []  # not closed at start-up
    assert state_of_round_1(db) == "open"
    until = started + timedelta(minutes=11)  # the default grace
    assert [(p.job_id, p.run_at) for p in rs.plan()] == [("close:g1:1", until)]
    # Postfix retries 300 s later: the order it accepted before the deadline counts
    clock.now = started + timedelta(seconds=300)
    raw = message(
        "Received: from client.test (unknown [127.0.0.2])\r\n"
        "\tby mx.example.org (Postfix) with ESMTP id 0C1D2E3F4A\r\n"
        "\tfor <snl@example.org>; Fri,  4 Jan 2030 17:59:50 +0000 (UTC)\r\n"
    )
    ingest(db, config, raw, lmtp_receipt_time(config, raw, clock.now), "lmtp:127.0.0.1")
    assert rs.on_deadline("g1", 1) is None  # a job that fires early only re-plans
    assert state_of_round_1(db) == "open"
    clock.now = until
    outcome = rs.on_deadline("g1", 1)
    assert outcome is not None and outcome.next_round == 2
    assert [(o.player, o.dice, o.valid) for o in orders_of(db)] == [("ann", "3", True)]


def test_an_early_close_waits_for_the_grace_too(tmp_path: Path) -> None:
    db, config = grace_setup(tmp_path, 'redelivery_grace = "2m"\n')
    clock = Clock(DEADLINE - timedelta(hours=1))
    rs = RoundScheduler(db, config, clock=clock)
    assert rs.on_deadline("g1", 1, early=True) is None
    assert state_of_round_1(db) == "open"
    clock.now += timedelta(minutes=2)
    assert rs.on_deadline("g1", 1, early=True) is not None


@pytest.mark.parametrize("lmtp", [None, 'redelivery_grace = "0s"\n'])
def test_without_lmtp_or_grace_catch_up_closes_at_once(tmp_path: Path, lmtp: str | None) -> None:
    db, config = grace_setup(tmp_path, lmtp)
    rs = RoundScheduler(db, config, clock=Clock(DEADLINE + timedelta(seconds=17)))
    assert [o.round for o in rs.catch_up()] == [1]
