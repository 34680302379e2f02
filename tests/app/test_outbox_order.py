"""Mail to one recipient arrives in the order it was written (issue 21), over several
SMTP connections at once, on SQLite and PostgreSQL, through a real SMTP peer (aiosmtpd).

The outbox claims a recipient's next message only once the one before it is marked sent,
so parallel connections cannot overtake one another; a message that fails for the time
being holds the later ones back while its retries come often (``ORDER_WAIT``), and not
for days; and a sender whose batch outlasts half its claim hands the rest back rather
than send on a claim that may have lapsed (another sender could have sent that message,
and the next one, by then).
"""

from __future__ import annotations

import asyncio
import email
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from mailhelpers import OPENED as T0  # the fixtures' game opened then: mail is that old
from smtpsink import SinkHandler, SmtpSink
from sqlalchemy import select, update

import snl_pbem.app.outbox as outbox
from snl_pbem.app.outbox import (
    CLAIM,
    ORDER_WAIT,
    claim_due,
    drain_outbox,
    drain_parallel,
    enqueue_mail,
)
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.store import Database, Game, OutboxMessage


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start
        self.lock = threading.Lock()

    def __call__(self) -> datetime:
        with self.lock:
            return self.now

    def advance(self, **kwargs: float) -> None:
        with self.lock:
            self.now += timedelta(**kwargs)


@dataclass
class SlowHandler(SinkHandler):
    """The sink, taking ``pause(message)`` seconds over some messages' DATA (the other
    connections go on meanwhile), then calling ``then(message)``."""

    pause: Callable[[bytes], float] = lambda raw: 0.0
    then: Callable[[bytes], None] = lambda raw: None
    seen: list[str] = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.pause(envelope.original_content))
        self.then(envelope.original_content)
        return await super().handle_DATA(server, session, envelope)


@pytest.fixture
def slow_sink():
    sink = SmtpSink()
    sink.handler = SlowHandler()
    sink.start()
    yield sink
    sink.stop()


def sender_for(sink: SmtpSink) -> SmtpSender:
    return SmtpSender(SmtpConfig(sink.host, sink.port, "none", timeout=30), "snl@example.org")


def queue(db: Database, config, messages: list[tuple[str, str]]) -> None:
    """Queue ``(recipient, text)`` messages in one transaction, in this order."""
    with db.transaction() as s:
        game = s.scalar(select(Game))
        for to, text in messages:
            enqueue_mail(
                s,
                config,
                game=game,
                kind="notice",
                to=to,
                now=T0,
                template="player/notice.txt.j2",
                subject=text,
                player=None,
                message=text,
                line_problems=(),
            )


def queued(db: Database) -> dict[str, list[str]]:
    """Each recipient's Message-IDs in the order they were written."""
    by_to: dict[str, list[str]] = {}
    with db.transaction() as s:
        for to, message_id in s.execute(
            select(OutboxMessage.recipient, OutboxMessage.message_id).order_by(OutboxMessage.id)
        ):
            by_to.setdefault(to, []).append(message_id)
    return by_to


def arrived(sink: SmtpSink) -> dict[str, list[str]]:
    """Each recipient's Message-IDs in the order the sink took them."""
    by_to: dict[str, list[str]] = {}
    for delivered in sink.delivered:
        by_to.setdefault(delivered.recipient, []).append(delivered.message_id)
    return by_to


def number(raw: bytes) -> int:
    subject = str(email.message_from_bytes(raw)["Subject"])
    found = re.search(r"number (\d+)", subject)
    return int(found.group(1)) if found else -1


def test_each_recipients_mail_arrives_in_order_over_parallel_connections(intake, slow_sink) -> None:
    """Many messages to few recipients, written in several transactions, sent over six
    connections at once while the sink holds one message in three for a moment: every
    recipient gets each of theirs once, in the order written. (Without the one-at-a-time
    claim, a connection with a later message passes one held up at the sink.)"""
    db, config = intake  # ann, bob and cy's welcomes come first
    people = ["ann@example.org", "bob@example.org", "cy@example.org", "dan@example.org"]
    n = 0
    for _ in range(6):  # six events, each writing to everyone, in mixed order
        batch = []
        for to in random.Random(n).sample(people * 4, 16):
            n += 1
            batch.append((to, f"number {n}"))
        queue(db, config, batch)
    slow_sink.handler.pause = lambda raw: 0.05 if number(raw) % 3 == 0 else 0.0
    report = drain_parallel(
        db, config, lambda: sender_for(slow_sink), Clock(), connections=6, worker="w", batch=4
    )
    assert report.sent == 3 + n and report.deferred == report.failed == 0
    assert arrived(slow_sink) == queued(db)
    with db.transaction() as s:
        assert set(s.scalars(select(OutboxMessage.status))) == {"sent"}


def test_a_message_failing_for_now_holds_the_later_ones_for_a_while(intake, slow_sink) -> None:
    """The first of two messages to dan is refused (451) again and again: the second waits
    for it while its retries come within ORDER_WAIT (1, 2, 4, 8, 16 minutes apart), then
    goes without it; the first goes when dan's server takes it. A message refused for good
    (550) holds nothing back."""
    db, config = intake
    clock = Clock()
    sender = sender_for(slow_sink)
    assert drain_outbox(db, config, sender, clock, worker="w").sent == 3  # the welcomes
    queue(db, config, [("dan@example.org", "number 1"), ("dan@example.org", "number 2")])
    queue(db, config, [("eve@example.org", "number 3"), ("eve@example.org", "number 4")])
    slow_sink.handler.script = {"dan@example.org": ["451"] * 6, "eve@example.org": ["550"]}
    first, second = queued(db)["dan@example.org"]
    waited = []
    while not any(d.message_id == second for d in slow_sink.delivered):
        drain_outbox(db, config, sender, clock, worker="w")
        with db.transaction() as s:
            head = s.scalar(select(OutboxMessage).where(OutboxMessage.message_id == first))
        waited.append((head.attempts, head.next_attempt_at - clock()))
        clock.advance(minutes=1)
        assert clock() < T0 + timedelta(hours=2), waited
    assert [attempts for attempts, _ in waited][-1] == 6 and len(waited) >= 31  # half an hour
    assert all(ahead <= ORDER_WAIT for _, ahead in waited[:-1]) and waited[-1][1] > ORDER_WAIT
    clock.advance(hours=1)
    drain_outbox(db, config, sender, clock, worker="w")
    sender.close()
    assert arrived(slow_sink)["dan@example.org"] == [second, first]  # first taken at last
    eve = queued(db)["eve@example.org"]
    assert arrived(slow_sink)["eve@example.org"] == [eve[1]]  # the 550 held nothing back


def test_a_long_failing_message_holds_nothing_back_even_when_its_retry_is_near(
    intake, slow_sink
) -> None:
    """dan's first message has failed for hours (eight tries, its retries now 6 hours
    apart) and is due again in ten minutes: his later mail goes now, without waiting for
    that retry. What counts is how long it has been failing, not how near its next try
    is (which would hold dan's reports for the half hour before each retry, for days).
    Due now, though (as after an outage), it is tried first and keeps its place."""
    db, config = intake
    clock = Clock()
    sender = sender_for(slow_sink)
    assert drain_outbox(db, config, sender, clock, worker="w").sent == 3  # the welcomes
    queue(db, config, [("dan@example.org", "number 1"), ("dan@example.org", "number 2")])
    queue(db, config, [("eve@example.org", "number 3"), ("eve@example.org", "number 4")])
    dan, eve = queued(db)["dan@example.org"], queued(db)["eve@example.org"]
    with db.transaction() as s:
        for message_id, due in ((dan[0], clock() + timedelta(minutes=10)), (eve[0], clock())):
            head = s.scalar(select(OutboxMessage).where(OutboxMessage.message_id == message_id))
            head.attempts, head.next_attempt_at = 8, due
    claimed = {c.id for c in claim_due(db, clock(), "look", 10)}  # what senders may take now
    with db.transaction() as s:
        ids = {m: i for m, i in s.execute(select(OutboxMessage.message_id, OutboxMessage.id))}
        s.execute(update(OutboxMessage).values(claimed_by=None, claim_until=None))
    assert claimed == {ids[dan[1]], ids[eve[0]], ids[eve[1]]}  # eve's: a run, in order
    assert drain_outbox(db, config, sender, clock, worker="w").sent == 3
    sender.close()
    assert arrived(slow_sink)["dan@example.org"] == [dan[1]]  # not held by the first
    assert arrived(slow_sink)["eve@example.org"] == eve  # due now: in order


def test_a_run_to_one_recipient_stops_at_its_first_refusal(intake, slow_sink) -> None:
    """A claim with room takes a run of one recipient's mail (the referee's summary of each
    game, a storm's tail), sent in order on one connection. The third of five to dan is
    refused for now (451): the fourth and fifth are not tried after it but handed back
    untouched (no try counted against them), and wait behind it; when it goes, they follow
    in order. A 550 in a run fails that message alone: the rest go in the next claim."""
    db, config = intake
    clock = Clock()
    sender = sender_for(slow_sink)
    assert drain_outbox(db, config, sender, clock, worker="w").sent == 3  # the welcomes
    queue(db, config, [("dan@example.org", f"number {n}") for n in range(1, 6)])
    dan = queued(db)["dan@example.org"]
    assert [c.recipient for c in claim_due(db, clock(), "look", 10)] == ["dan@example.org"] * 5
    with db.transaction() as s:
        s.execute(update(OutboxMessage).values(claimed_by=None, claim_until=None))
    slow_sink.handler.script = {"dan@example.org": ["250", "250", "451"]}
    report = drain_outbox(db, config, sender, clock, worker="w")
    assert (report.sent, report.deferred) == (2, 1)
    assert arrived(slow_sink)["dan@example.org"] == dan[:2]
    with db.transaction() as s:
        tries = {
            m: n for m, n in s.execute(select(OutboxMessage.message_id, OutboxMessage.attempts))
        }
        claims = set(s.scalars(select(OutboxMessage.claimed_by)))
    assert [tries[m] for m in dan] == [1, 1, 1, 0, 0] and claims == {None}
    clock.advance(minutes=1)  # the 451's retry is due: the rest follow it
    assert drain_outbox(db, config, sender, clock, worker="w").sent == 3
    assert arrived(slow_sink)["dan@example.org"] == dan

    queue(db, config, [("dan@example.org", f"number {n}") for n in range(6, 9)])
    later = queued(db)["dan@example.org"][5:]
    slow_sink.handler.script = {"dan@example.org": ["550"]}
    report = drain_outbox(db, config, sender, clock, worker="w")
    sender.close()
    assert (report.sent, report.failed) == (2 + 1, 1)  # and the referee's alert of it
    assert arrived(slow_sink)["dan@example.org"] == dan + later[1:]


@pytest.mark.parametrize("parts", [25, 2])
def test_a_slow_batch_hands_back_what_its_claim_no_longer_covers(
    intake, slow_sink, monkeypatch, parts
) -> None:
    """Each message takes the sink four minutes (of the test's clock): a sender that
    claimed ten at once stops when half its claim has passed, hands the rest back and
    claims them again. No message is ever sent on a claim that may have lapsed: another
    sender could have taken it (and the next one to the same player) by then. The same
    when the batch goes out in parts of two (the parts after the time is up are handed
    back untried, not one message each). A batch claimed ahead, while the one before went
    out, may be half a claim old when its turn comes: it is handed back whole, not its
    first message sent (in parts of two, on PostgreSQL, that message outlived its claim,
    was claimed again beside it and went twice, in about half the runs)."""
    monkeypatch.setattr(outbox, "RECORDED_EVERY", parts)
    db, config = intake
    clock = Clock()
    queue(db, config, [(f"p{i}@example.org", f"number {i}") for i in range(10)])
    late: list[str] = []
    checker = Database(db.url)

    def check(raw: bytes) -> None:  # at the sink: is the sender's claim still good?
        message_id = str(email.message_from_bytes(raw)["Message-ID"])
        with checker.transaction() as s:
            row = s.scalar(select(OutboxMessage).where(OutboxMessage.message_id == message_id))
            if row.claim_until is None or row.claim_until <= clock():
                late.append(message_id)
        clock.advance(minutes=4)

    slow_sink.handler.then = check
    sender = sender_for(slow_sink)
    report = drain_outbox(db, config, sender, clock, worker="w", batch=20)
    sender.close()
    checker.dispose()
    assert report.sent == 13 and late == []  # with the welcomes
    assert sorted(arrived(slow_sink)) == sorted(queued(db))
    assert clock() - T0 == timedelta(minutes=4 * 13)  # the claim is 10: handed back 3 times
    assert timedelta(minutes=10) == CLAIM


class Killed(BaseException):
    """The sender's process dying mid-batch (as SIGKILL would, but the test lives on)."""


def test_a_sender_killed_mid_batch_has_recorded_all_but_its_last_parts(intake, slow_sink) -> None:
    """60 reports claimed in one batch, sent in parts of 25: the sender dies at the 40th.
    The first part was recorded while the second went out, so only the second part's
    messages can go again; the third was never tried and is handed back at once; the
    second's claims lapse, and another sender sends them (again, for those that went)."""
    db, config = intake
    clock = Clock()
    assert drain_outbox(db, config, sender_for(slow_sink), clock, worker="w").sent == 3
    queue(db, config, [(f"p{i}@example.org", f"number {i}") for i in range(60)])
    real = sender_for(slow_sink)
    sent = 0

    class Dying:
        def send(self, to: str, raw: bytes) -> None:
            nonlocal sent
            if sent == 39:
                raise Killed
            real.send(to, raw)
            sent += 1

    with pytest.raises(Killed):
        drain_outbox(db, config, Dying(), clock, worker="w")  # type: ignore[arg-type]
    with db.transaction() as s:
        rows = s.execute(
            select(OutboxMessage.status, OutboxMessage.claimed_by).order_by(OutboxMessage.id)
        ).all()[3:]
    assert rows[:25] == [("sent", None)] * 25
    assert rows[25:50] == [("pending", "w")] * 25  # the part going out: its claim lapses
    assert rows[50:] == [("pending", None)] * 10  # never tried: handed back
    clock.advance(minutes=11)
    assert drain_outbox(db, config, real, clock, worker="other").sent == 35
    real.close()
    delivered = [d.message_id for d in slow_sink.delivered]
    assert sorted(set(delivered)) == sorted(m for ms in queued(db).values() for m in ms)
    assert len(delivered) - len(set(delivered)) == 14  # the 26th to the 39th, sent twice


JOIN_CONFIG = """
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "duo"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "{signup}"
max_players = 2
starts = "when_full"
"""


def joining(sender: str, body: str, tag: str) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: join\r\n"
        f"Message-ID: <{tag}@example.net>\r\n\r\n{body}\r\n"
    ).encode()


@pytest.mark.parametrize("signup", ["open", "approval"])
def test_the_last_joiner_hears_of_the_seat_before_the_welcome(
    db, tmp_path, slow_sink, signup
) -> None:
    """The player who fills a game is told of the seat ("your welcome message, with your
    order key, follows") and then gets the welcome, in that order, whether a code seated
    them or the referee's approval did."""
    from mailhelpers import code_in

    from snl_pbem.app.games import sync_games
    from snl_pbem.app.intake import ingest
    from snl_pbem.app.signup import approve_signup
    from snl_pbem.config import load_config

    path = tmp_path / "config.toml"
    path.write_text(JOIN_CONFIG.format(url=db.url, signup=signup))
    config = load_config(path)
    now = T0.replace(year=2029, month=12, day=1)
    sync_games(db, config, now)
    for n, who in enumerate(("x1", "x2")):
        address = f"{who}@example.net"
        ingest(db, config, joining(address, f"JOIN duo {who.upper()}", f"j{n}"), now, "t")
        with db.transaction() as s:
            code_mail = s.scalars(
                select(OutboxMessage.message).where(OutboxMessage.recipient == address)
            ).all()[-1]
        code = code_in(re.sub(r"=\r?\n", "", code_mail.decode()))
        ingest(db, config, joining(address, f"CONFIRM {code}", f"c{n}"), now, "t")
        if signup == "approval":
            with db.transaction() as s:
                game = s.scalar(select(Game).where(Game.name == "duo"))
                approve_signup(s, config, game, who.upper(), now, actor="ref", via=None)
    with db.transaction() as s:
        assert s.scalar(select(Game.state).where(Game.name == "duo")) == "running"
    drain_parallel(
        db, config, lambda: sender_for(slow_sink), Clock(now), connections=4, worker="w", batch=3
    )
    to_x2 = [d.raw for d in slow_sink.delivered if d.recipient == "x2@example.net"]
    subjects = [str(email.message_from_bytes(raw)["Subject"]) for raw in to_x2]
    seat = next(i for i, s in enumerate(subjects) if "You have a seat" in s)
    welcome = next(i for i, raw in enumerate(to_x2) if b"Your order key is" in raw)
    assert seat < welcome, subjects


def test_a_drain_told_to_stop_ends_with_the_part_it_is_sending(
    intake, slow_sink, monkeypatch
) -> None:
    """A sender told to stop (serve stopping, or a reload with new mail settings) ends its
    drain with the part going out, recorded, and hands the rest of its claims back: it is
    not sent through the backlog with the old settings, nor killed mid-send. Another drain
    then sends the rest, each message once."""
    monkeypatch.setattr(outbox, "RECORDED_EVERY", 2)
    db, config = intake
    clock = Clock()
    queue(db, config, [(f"p{i}@example.org", f"number {i}") for i in range(10)])
    total = len([m for ids in queued(db).values() for m in ids])
    told = threading.Event()
    slow_sink.handler.then = lambda raw: told.set()  # told as the first message goes out
    sender = sender_for(slow_sink)
    report = drain_outbox(db, config, sender, clock, worker="w", batch=20, stop=told.is_set)
    assert report.sent == 2 and len(slow_sink.delivered) == 2  # one part of two
    with db.transaction() as s:
        rows = s.execute(select(OutboxMessage.status, OutboxMessage.claimed_by)).all()
    assert sum(status == "sent" for status, _ in rows) == 2
    assert all(claimed is None for status, claimed in rows if status != "sent")  # handed back
    report = drain_outbox(db, config, sender, clock, worker="w2", batch=20)
    sender.close()
    assert report.sent == total - 2
    assert sorted(m for ids in arrived(slow_sink).values() for m in ids) == sorted(
        m for ids in queued(db).values() for m in ids
    )


def test_a_drain_told_to_stop_on_a_batchs_last_part_hands_back_the_batch_claimed_ahead(
    intake, slow_sink, monkeypatch
) -> None:
    """Batches of two, one part each: the next batch is claimed beside every part. Told to
    stop as its first part goes out, the drain records that part and hands back the batch
    it claimed ahead, untried: no row stays claimed."""
    monkeypatch.setattr(outbox, "RECORDED_EVERY", 2)
    db, config = intake
    queue(db, config, [(f"p{i}@example.org", f"number {i}") for i in range(6)])
    told = threading.Event()
    slow_sink.handler.then = lambda raw: told.set()
    sender = sender_for(slow_sink)
    report = drain_outbox(db, config, sender, Clock(), worker="w", batch=2, stop=told.is_set)
    sender.close()
    assert report.sent == 2
    with db.transaction() as s:
        rows = s.execute(select(OutboxMessage.status, OutboxMessage.claimed_by)).all()
    assert sum(status == "sent" for status, _ in rows) == 2 and len(rows) > 4
    assert all(claimed is None for status, claimed in rows if status != "sent")
