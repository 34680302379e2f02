"""What a batch reads once (issue 23): the game, its open round, the referee key, and, read
ahead for all its senders, their seats, names and dice (``snl_pbem.app.txcache``,
``snl_pbem.app.ahead``), and the Message-IDs already processed. Each message must still
see what it would see alone: a round the referee closes in the middle of the batch, a key
used from another address, a Message-ID twice in one batch (R1: every order counts once,
for the round open when it came)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from mailhelpers import T0, orders_of
from mailhelpers import one_batch as batch
from sqlalchemy import event, insert, select

from snl_pbem.app import txcache
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import process_batch
from snl_pbem.app.intake.store import store_many
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.replies import _recent, redact
from snl_pbem.config import Config, load_config
from snl_pbem.store import Database, InboundMessage, OrderRecord, OutboxMessage, Player, Round

HANG = 120.0
"""A hang detector, never a speed requirement."""
REFEREE_KEY = "referee-key-0123456789"

CONFIG = """
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{key}"
replies_per_hour = 20
[[games]]
id = "g1"
board = {{ snakes = {{ "47" = 26 }}, ladders = {{ "4" = 14 }} }}
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-123" }},
]
"""


def started(db: Database, folder: Path, replies_per_hour: int = 20, at: datetime = T0) -> Config:
    path = folder / "config.toml"
    text = CONFIG.format(url=db.url, key=REFEREE_KEY)
    path.write_text(text.replace("replies_per_hour = 20", f"replies_per_hour = {replies_per_hour}"))
    config = load_config(path)
    sync_games(db, config, at)
    start_game(db, config, "g1", at)
    return config


@pytest.fixture
def game(db: Database, tmp_path: Path) -> Config:
    return started(db, tmp_path)


def mail(sender: str, body: str, tag: str, extra: str = "") -> bytes:
    return (
        f"{extra}From: {sender}\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()


def order_rounds(db: Database) -> list[tuple[str, int, str]]:
    with db.transaction() as s:
        rows = s.execute(
            select(Player.name, Round.number, OrderRecord.dice)
            .join(Player, Player.id == OrderRecord.player_id)
            .join(Round, Round.id == OrderRecord.round_id)
            .order_by(OrderRecord.id)
        ).all()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def test_a_round_the_referee_closes_mid_batch_is_seen_by_the_messages_after_it(
    db: Database, game: Config
) -> None:
    """ann's orders go to round 1; the referee closes it in the next message of the same
    batch; bob's orders, after it, go to round 2 and his answer says so (R1). Read once for
    the batch, the open round would have been round 1's, closed."""
    statuses = batch(
        db,
        game,
        mail("ann@example.org", "KEY ann-key-123\nDICE 3", "r-ann"),
        mail("ref@example.org", f"KEY {REFEREE_KEY}\nCLOSE ROUND g1", "r-ref"),
        mail("bob@example.org", "KEY bob-key-123\nDICE 4", "r-bob"),
    )
    assert statuses == ["processed", "processed", "processed"]
    assert order_rounds(db) == [("ann", 1, "3"), ("bob", 2, "4")]
    with db.transaction() as s:
        subjects = [
            m.split(b"\r\n\r\n", 1)[0]
            for m in s.scalars(
                select(OutboxMessage.message).where(OutboxMessage.kind == "ack")
            ).all()
        ]
    assert [b"round 1" in h for h in subjects] == [True, False]
    assert b"round 2" in subjects[1]


def test_a_key_from_another_address_and_a_wrong_key_in_a_batch(db: Database, game: Config) -> None:
    """The batch reads its senders' seats ahead; a key used from another address (ann's key
    from cy's address) is not among them and is still found (and noted), a wrong key from a
    player's own address is still refused, and the others' orders are applied."""
    statuses = batch(
        db,
        game,
        mail("bob@example.org", "KEY bob-key-123\nDICE 2", "k-bob"),
        mail("cy@example.org", "KEY ann-key-123\nDICE 5", "k-ann-from-cy"),
        mail("cy@example.org", "KEY not-cys-key\nDICE 6", "k-wrong"),
        mail("cy@example.org", "KEY cy-key-123\nDICE 4", "k-cy"),
    )
    assert statuses == ["processed", "processed", "rejected", "processed"]
    assert [(o.player, o.dice) for o in orders_of(db)] == [("bob", "2"), ("ann", "5"), ("cy", "4")]


def test_a_message_id_twice_in_one_batch_is_applied_once(db: Database, game: Config) -> None:
    """The same message by two routes (other bytes, one Message-ID) in one batch: the first
    is applied, the second is a copy; and a copy of one processed before the batch is a copy
    too (R1: an order counts once)."""
    assert batch(db, game, mail("cy@example.org", "KEY cy-key-123\nDICE 1", "early")) == [
        "processed"
    ]
    statuses = batch(
        db,
        game,
        mail("ann@example.org", "KEY ann-key-123\nDICE 3", "twice"),
        mail("ann@example.org", "KEY ann-key-123\nDICE 3", "twice", "Received: by b\r\n"),
        mail("cy@example.org", "KEY cy-key-123\nDICE 1", "early", "Received: by b\r\n"),
    )
    assert statuses == ["processed", "duplicate", "duplicate"]
    assert [(o.player, o.dice) for o in orders_of(db)] == [("cy", "1"), ("ann", "3")]


def test_a_batch_counts_its_senders_recent_replies_once_and_keeps_the_limit(
    db: Database, game: Config
) -> None:
    """A reply's rate limit (replies_per_hour = 20 here) is counted for all of a batch's
    senders in one query, not one a message, and kept up to date by the replies the batch
    writes: ann's 23 STATUS in one batch get 20 answers, bob's 2 and cy's order theirs;
    and in the next batch ann, already at her limit, gets none, while her order is still
    acknowledged (acknowledgements have their own bound)."""
    counts: list[str] = []

    def counted(_conn, _cursor, statement, *_args) -> None:
        if "FROM outbox" in statement and "outbox.created_at >" in statement:
            counts.append(statement)

    event.listen(db.engine, "before_cursor_execute", counted)
    raws = [mail("ann@example.org", "KEY ann-key-123\nSTATUS", f"st-{i}") for i in range(23)]
    raws += [mail("bob@example.org", "KEY bob-key-123\nSTATUS", f"sb-{i}") for i in range(2)]
    raws.append(mail("cy@example.org", "KEY cy-key-123\nDICE 4", "oc"))
    batch(db, game, *raws)
    assert len(counts) == 1  # the senders' recent mail, read once for the batch
    sent = replies(db)
    assert sent.count(("ann@example.org", "status")) == 20
    assert sent.count(("bob@example.org", "status")) == 2
    assert sent.count(("cy@example.org", "ack")) == 1
    batch(
        db,
        game,
        mail("ann@example.org", "KEY ann-key-123\nSTATUS", "st-late"),
        mail("ann@example.org", "KEY ann-key-123\nDICE 5", "o-ann"),
    )
    sent = replies(db)
    assert sent.count(("ann@example.org", "status")) == 20
    assert sent.count(("ann@example.org", "ack")) == 1


def test_mail_written_otherwise_is_counted_against_the_limit(db: Database, game: Config) -> None:
    """Mail written to the outbox other than as a reply (a notice the server sends of its
    own accord) makes a batch count its recent replies anew: it is not missed."""
    with db.transaction() as session:
        txcache.start(session)
        ctx = SimpleNamespace(session=session, now=datetime.now(UTC))  # what the count uses
        assert _recent(ctx, "ann@example.org", ("status",)) == 0
        enqueue_mail(
            session,
            game,
            game=None,
            kind="status",
            to="ann@example.org",
            now=ctx.now,
            template="player/notice.txt.j2",
            subject="x",
            message="y",
            line_problems=(),
        )
        assert _recent(ctx, "ann@example.org", ("status",)) == 1


def replies(db: Database) -> list[tuple[str, str]]:
    with db.transaction() as s:
        return [
            (to, kind)
            for to, kind in s.execute(
                select(OutboxMessage.recipient, OutboxMessage.kind).order_by(OutboxMessage.id)
            )
        ]


def test_a_key_is_never_echoed_in_letters_the_pattern_folds() -> None:
    """A line is searched for a key before the (dearer) pattern runs, but only an ASCII line:
    in "ABC\u0131-KEY" (a dotless i) Python's case-blind pattern finds "abci-key", a plain
    search does not."""
    assert redact("KEY ABC\u0131-KEY", ("abci-key",)) == "KEY ****"
    assert redact("KEY Abc-Key", ("abc-key",)) == "KEY ****"
    assert redact("nothing here", ("abc-key",)) == "nothing here"


def test_a_reading_transaction_neither_waits_for_a_writer_nor_holds_it_up(
    db: Database, game: Config
) -> None:
    """SQLite: the intake's reads (what we sent a sender, the rows of a batch) take no write
    lock, so they go on while a close or a store writes. A write transaction holds the lock
    until this thread has read; read under the write lock, it would wait forever."""
    if not db.is_sqlite:
        pytest.skip("PostgreSQL reads never wait for writers")
    writing, read = threading.Event(), threading.Event()

    def writer() -> None:
        with db.transaction() as s:
            s.add(
                InboundMessage(
                    sha256="0" * 64, source="t", received_at=T0, raw=b"x", status="new", attempts=0
                )
            )
            s.flush()  # the write lock is held from here to the commit
            writing.set()
            read.wait(HANG)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert writing.wait(HANG)
        with db.reading() as s:
            count = len(s.scalars(select(InboundMessage.id)).all())
        read.set()
    finally:
        read.set()
        thread.join(HANG)
    assert count == 0  # the writer's row is not committed yet


def test_a_store_goes_before_a_batch_waiting_for_the_write_lock() -> None:
    """SQLite: the MTA waits for a message's store (its 250), nobody waits for a batch: a
    store (urgent) that comes while a batch waits for the lock gets it first. Without the
    priority the batch, waiting longer, would usually go first."""
    from snl_pbem.store.db import _Turns

    turns = _Turns()
    order: list[str] = []
    assert turns.acquire(False, HANG)  # a close, say, holds it

    def take(name: str, urgent: bool) -> None:
        assert turns.acquire(urgent, HANG)
        order.append(name)
        turns.release()

    batch_ = threading.Thread(target=take, args=("batch", False))
    batch_.start()
    batch_.join(0.2)  # the batch waits (a moment: on a slow machine it may come later, never
    # sooner, and then it waits behind the store all the same)
    store = threading.Thread(target=take, args=("store", True))
    store.start()
    while not turns._urgent:  # the store is waiting
        store.join(0.01)
    turns.release()
    batch_.join(HANG)
    store.join(HANG)
    assert order == ["store", "batch"]
    assert turns.acquire(False, HANG) and turns.acquire(True, HANG)  # reentrant
    turns.release()
    turns.release()


SEQUENCES = {
    "a new key, then the old key": ["KEY {p}-key-123\nNEW KEY", "KEY {p}-key-123\nDICE 5"],
    "a resignation confirmed, then orders": [
        "KEY {p}-key-123\nRESIGN g1",
        "KEY {p}-key-123\nRESIGN g1",
        "KEY {p}-key-123\nDICE 5",
    ],
    "a new address, then orders": [
        "KEY {p}-key-123\nADDRESS {p}2@example.org",
        "KEY {p}-key-123\nDICE 5",
    ],
    "an absence, then orders": [
        "KEY {p}-key-123\nABSENT UNTIL 2030-01-20",
        "KEY {p}-key-123\nDICE 5",
    ],
}


@pytest.mark.parametrize("sequence", sorted(SEQUENCES))
def test_one_players_messages_in_one_batch_do_what_they_do_one_by_one(
    db: Database, game: Config, sequence: str
) -> None:
    """A batch is written without a savepoint a message (issue 23): a message that changes
    a seat (a new key, a resignation, an address, an absence) must still be seen by the
    next message of the batch exactly as one by one: ann's messages in one batch, bob's
    the same ones each alone, end alike (statuses, orders, the mail they were sent)."""

    def run(player: str, together: bool) -> tuple[list[str], list[str], list[str], bool]:
        raws = [
            mail(f"{player}@example.org", body.format(p=player), f"{player}-{sequence}-{i}")
            for i, body in enumerate(SEQUENCES[sequence])
        ]
        statuses = batch(db, game, *raws) if together else [batch(db, game, raw)[0] for raw in raws]
        with db.transaction() as s:
            seat = s.scalar(select(Player).where(Player.name == player))
            assert seat is not None
            kinds = s.scalars(
                select(OutboxMessage.kind)
                .where(OutboxMessage.recipient.like(f"{player}%"), OutboxMessage.kind != "welcome")
                .order_by(OutboxMessage.id)
            ).all()
            dice = s.scalars(select(OrderRecord.dice).where(OrderRecord.player_id == seat.id)).all()
            return statuses, list(dice), list(kinds), seat.active

    assert run("ann", together=True) == run("bob", together=False)


# A reply's rate limit in a batch: each message counts against the hour before it was
# received. A batch's messages may be received out of order (a close's go smallest first;
# IMAP gives each its mailbox's arrival time, LMTP the MTA's) or hours apart (a backlog
# after an outage): counts read for the first message's hour let a player past the limit,
# or held replies due. (Found by a hostile review of the batch's counts.)


@pytest.fixture
def strict(db: Database, tmp_path: Path) -> Config:
    """g1 with two replies an hour, started three hours before T0."""
    return started(db, tmp_path, replies_per_hour=2, at=T0 - timedelta(hours=3))


def stored_status(db: Database, config: Config, *sent: tuple[str, datetime]) -> list[int]:
    """STATUS from each (sender, received at), stored in one transaction, unprocessed."""
    raws = [
        (mail(who, f"KEY {who.split('@')[0]}-key-123\nSTATUS", f"st-{i}"), at)
        for i, (who, at) in enumerate(sent)
    ]
    stored = store_many(db, config, [(raw, at, "t", None, None, None) for raw, at in raws])
    return [result.inbound_id for result, _ in stored]  # type: ignore[misc]


def answered(db: Database, to: str) -> int:
    """STATUS answers to ``to`` written by the test's batches."""
    with db.transaction() as s:
        return len(
            s.scalars(
                select(OutboxMessage.id).where(
                    OutboxMessage.recipient == to,
                    OutboxMessage.kind == "status",
                    OutboxMessage.created_at >= T0 - timedelta(minutes=1),
                )
            ).all()
        )


def test_a_message_received_earlier_in_a_batch_counts_its_own_hour(
    db: Database, strict: Config
) -> None:
    """ann had two answers 55 minutes before her STATUS: she is at her limit (2). The
    batch's first message is bob's, received ten minutes after hers: the hour before his
    misses her two answers, and must not be what hers is counted against."""
    at = T0 - timedelta(minutes=55)
    earlier = {"kind": "status", "recipient": "ann@example.org", "message": b"x"}
    earlier |= {"status": "sent", "attempts": 1, "next_attempt_at": at, "created_at": at}
    with db.transaction() as s:
        s.execute(
            insert(OutboxMessage),
            [{**earlier, "message_id": f"<earlier-{i}@x.org>", "secret": False} for i in (1, 2)],
        )
    ids = stored_status(
        db, strict, ("bob@example.org", T0 + timedelta(minutes=10)), ("ann@example.org", T0)
    )
    process_batch(db, strict, ids)
    assert answered(db, "bob@example.org") == 1
    assert answered(db, "ann@example.org") == 0  # held: her limit, in the hour before hers


def test_a_backlog_of_hours_in_one_batch_is_answered_hour_by_hour(
    db: Database, strict: Config
) -> None:
    """Four STATUS of ann's over three hours, written in one batch (a backlog after an
    outage): two in each hour, so all four are answered, as they are one by one."""
    minutes = (0, 1, 150, 151)
    ids = stored_status(
        db, strict, *(("ann@example.org", T0 + timedelta(minutes=m)) for m in minutes)
    )
    process_batch(db, strict, ids)
    assert answered(db, "ann@example.org") == 4
