"""Batched intake (issue 23): stored messages processed in one transaction (written again
with a savepoint each should one fail). Per message nothing changes (R1: every order counts
once; R19: nothing secret leaks): one bad message sets only itself aside and the others are
applied; a crash mid-batch leaves every message stored, unprocessed, and the next start
applies each exactly once; an IMAP fetch (or what LMTP has queued) is stored in one commit
before any of it is acknowledged."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from mailhelpers import T0, orders_of, replies_since
from sqlalchemy import event, select

import snl_pbem.app.intake.pipeline as pipeline
import snl_pbem.app.intake.store as store_module
import snl_pbem.runners.mailboxes as mailboxes_module
from snl_pbem.app import sentprints
from snl_pbem.app.intake import ingest, process_batch, process_pending
from snl_pbem.app.intake.batch import _pending_beyond_messages, _update_messages_rows
from snl_pbem.app.intake.context import Message
from snl_pbem.app.intake.reading import _sent_to, _sent_to_many
from snl_pbem.app.intake.store import store_many
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.mail.sandbox import ParseFailed, Sandbox
from snl_pbem.runners.mailboxes import Intake, Readers
from snl_pbem.store import Database, Game, InboundMessage, OutboxMessage, Player
from snl_pbem.store.driver import Driver

HANG = 120.0
"""A hang detector, never a speed requirement."""


def mail(body: str, sender: str, tag: str) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()


def three(db, config) -> list[int]:
    """ann's, bob's and cy's orders, stored in one transaction, unprocessed."""
    messages = [
        (mail(f"KEY {name}-key-123\nDICE {n}", f"{name}@example.org", f"b-{name}"), T0, "t")
        for n, name in enumerate(("ann", "bob", "cy"), start=2)
    ]
    stored = store_many(db, config, [(raw, at, src, None, None, None) for raw, at, src in messages])
    assert [result.status for result, _ in stored] == ["new"] * 3
    return [result.inbound_id for result, _ in stored]


def status_of(db, ids: list[int]) -> list[str]:
    with db.transaction() as s:
        rows = dict(s.execute(select(InboundMessage.id, InboundMessage.status)).all())
    return [rows[i] for i in ids]


def after_bobs_orders(monkeypatch, then) -> None:
    """Have ``then(msg)`` run on bob's message once his order is written (and answered)."""
    original = dict(pipeline.STEPS)["commands: keyed"]

    def step(msg: Message):
        outcome = original(msg)
        if msg.ctx.mail.sender == "bob@example.org":
            then(msg)
        return outcome

    steps = tuple((n, step if n == "commands: keyed" else s) for n, s in pipeline.STEPS)
    monkeypatch.setattr(pipeline, "STEPS", steps)


def breaks(msg: Message) -> None:
    raise RuntimeError("bob's message breaks after its order")


def test_one_bad_message_in_a_batch_sets_only_itself_aside(intake, monkeypatch, caplog) -> None:
    """bob's message fails after its order and its answer were written: its savepoint is
    rolled back (no order of his, no answer), it is processed again alone and set aside with
    the reason; ann's and cy's orders are applied and answered in the batch's transaction."""
    db, config = intake
    ids = three(db, config)

    after_bobs_orders(monkeypatch, breaks)  # his order is written (and answered) first
    with caplog.at_level(logging.WARNING, logger="snl_pbem.intake"):
        results = process_batch(db, config, ids)
    assert [results[i].status for i in ids] == ["processed", "set-aside", "processed"]
    assert status_of(db, ids) == ["processed", "set-aside", "processed"]
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "2"), ("cy", "4")]
    assert [r.recipient for r in replies_since(db, T0)] == ["ann@example.org", "cy@example.org"]
    with db.transaction() as s:
        assert "bob's message breaks after its order" in s.get(InboundMessage, ids[1]).error
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("failed in a batch" in line for line in said) == 1  # bob's, alone after
    assert not any("could not be committed" in line for line in said)  # the others held


def test_the_batchs_messages_rows_are_written_by_one_statement(intake) -> None:
    """Their status, game, player and redacted bytes: on PostgreSQL one UPDATE of arrays
    for the rows that changed the same columns (``unnest.update_all``), not the ORM's
    flush's UPDATE a row; on SQLite the ORM's. Each row reads back with its own:
    processed, its player, its bytes with the key taken out and the dice left in."""
    db, config = intake
    ids = three(db, config)
    seen: list = []

    def note(_c, _cur, statement: str, _p, _ctx, many: bool) -> None:
        if statement.startswith("UPDATE inbound_messages"):
            seen.append((many, statement))

    event.listen(db.engine, "before_cursor_execute", note)
    try:
        process_batch(db, config, ids)
    finally:
        event.remove(db.engine, "before_cursor_execute", note)
    assert status_of(db, ids) == ["processed"] * 3
    # (all of them at the end, a statement for each set of columns changed; the game and
    # its senders' seats are read ahead at the batch's start, so no query mid-batch
    # flushes a row: until the twenty-ninth session of issue 23 the first one was written
    # alone, as the second's query of the game flushed the session)
    assert all("status" in st and "player_id" in st for _, st in seen), seen
    assert all(("unnest" in st) != db.is_sqlite for _, st in seen), seen
    assert len(seen) == 1 if db.is_sqlite else len(seen) <= 2, seen
    with db.transaction() as s:
        rows = [s.get(InboundMessage, i) for i in ids]
        names = {p.id: p.name for p in s.scalars(select(Player))}
        assert [names[r.player_id] for r in rows] == ["ann", "bob", "cy"]
        for row, (name, dice) in zip(rows, (("ann", 2), ("bob", 3), ("cy", 4)), strict=True):
            assert f"{name}-key-123".encode() not in row.raw and f"DICE {dice}".encode() in row.raw


def test_a_batch_is_written_without_savepoints_until_a_message_fails(
    intake, monkeypatch, caplog
) -> None:
    """A batch is first written with no savepoint (two statements a message saved). When
    bob's message fails there, the whole transaction is undone (his order and answer with
    it) and the batch is written again with a savepoint each: ann's and cy's orders count
    once, bob's is set aside, and nothing of the first attempt is left."""
    db, config = intake
    first = three(db, config)
    statements: list[str] = []
    event.listen(
        db.engine, "before_cursor_execute", lambda *a: statements.append(" ".join(a[2].split()[:3]))
    )
    results = process_batch(db, config, first)
    assert [r.status for r in results.values()] == ["processed"] * 3
    assert not any(s.startswith("SAVEPOINT") for s in statements)
    # three orders and three answers, written together (``deferred``): fewer statements
    # than rows (the first order goes alone, before the first reply's reads)
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert len(inserts) < 6, inserts
    assert len(orders_of(db)) == 3 and len(replies_since(db, T0)) == 3

    statements.clear()
    names = ("ann", "bob", "cy")
    raws = [mail(f"KEY {n}-key-123\nDICE 5", f"{n}@example.org", f"again-{n}") for n in names]
    stored = store_many(db, config, [(raw, T0, "t", None, None, None) for raw in raws])
    ids = [result.inbound_id for result, _ in stored]

    after_bobs_orders(monkeypatch, breaks)
    with caplog.at_level(logging.INFO, logger="snl_pbem.intake"):
        results = process_batch(db, config, ids)
    assert [results[i].status for i in ids] == ["processed", "set-aside", "processed"]
    assert sum(s.startswith("SAVEPOINT") for s in statements) >= 3  # a savepoint each
    said = [r.getMessage() for r in caplog.records]
    assert sum("written again, a savepoint each" in line for line in said) == 1
    latest = {o.player: o.dice for o in orders_of(db)}  # each one's latest order
    assert latest == {"ann": "5", "bob": "3", "cy": "5"}  # bob's earlier order holds
    assert len(orders_of(db)) == 5 and len(replies_since(db, T0)) == 5


def test_an_answer_the_database_refuses_is_its_own_messages_failure(
    intake, monkeypatch, caplog
) -> None:
    """bob's answer is a row the database refuses. Written without savepoints, the batch's
    answers wait and go together (``deferred``), so it fails after bob's message, where
    the rows are written; the batch is written again with a savepoint each, where his
    answer is written at once and fails as his: his message is set aside (no order of his),
    ann's and cy's orders count once and are answered."""
    import snl_pbem.app.replies as replies

    db, config = intake
    ids = three(db, config)
    original = replies.mail_row

    def bobs_refused(*args, **kwargs):
        found = original(*args, **kwargs)
        return {**found, "kind": None} if found["recipient"] == "bob@example.org" else found

    monkeypatch.setattr(replies, "mail_row", bobs_refused)
    with caplog.at_level(logging.INFO, logger="snl_pbem.intake"):
        results = process_batch(db, config, ids)
    assert [results[i].status for i in ids] == ["processed", "set-aside", "processed"]
    said = [r.getMessage() for r in caplog.records]
    assert sum("written again, a savepoint each" in line for line in said) == 1
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "2"), ("cy", "4")]
    assert [r.recipient for r in replies_since(db, T0)] == ["ann@example.org", "cy@example.org"]


def test_a_write_passed_over_never_leaves_a_batch_reported_but_not_committed(
    intake, monkeypatch
) -> None:
    """bob's message, the batch's last, leaves the session a row the database refuses; the
    game closes when all orders are in, so the message's last step opens a savepoint and
    passes its failure over ("are all orders in?": the deadline still closes the round).
    The flush before that savepoint fails and undoes the transaction: it must not end
    quietly, every message reported processed and nothing committed (the second review's
    worry; here what comes after the step fails on the undone session, and
    ``Database.transaction`` would say so if nothing did). The batch is written again with
    a savepoint each; bob's message is set aside with the refusal, ann's order counts,
    once."""
    db, config = intake
    ids = three(db, config)[:2]  # ann's and bob's: bob's last
    with db.transaction() as s:
        s.scalars(select(Game)).one().close_when_all_in = True

    def refused(msg: Message) -> None:
        msg.ctx.session.add(OutboxMessage(kind="ack", message_id="<x@example.org>"))

    after_bobs_orders(monkeypatch, refused)
    results = process_batch(db, config, ids)
    assert [results[i].status for i in ids] == ["processed", "set-aside"]
    assert status_of(db, ids) == ["processed", "set-aside"]
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "2")]
    with db.transaction() as s:
        assert "recipient" in s.get(InboundMessage, ids[1]).error  # the refused column


def test_a_change_that_fails_only_when_written_is_its_own_messages_failure(
    intake, monkeypatch, caplog
) -> None:
    """bob's message leaves a change to its own row that the database refuses (a game no
    game has): written without savepoints, the rows are written together, so it fails
    later (at the commit); the batch is then written again with a savepoint each, where it
    fails as bob's: his message is set aside, ann's and cy's orders count, in one batch,
    never each alone (the way a database that is away is met)."""
    db, config = intake
    ids = three(db, config)

    def refused(msg: Message) -> None:
        msg.ctx.row.game_id = 987654  # pending only: written when the session flushes

    after_bobs_orders(monkeypatch, refused)
    with caplog.at_level(logging.INFO, logger="snl_pbem.intake"):
        results = process_batch(db, config, ids)
    assert [results[i].status for i in ids] == ["processed", "set-aside", "processed"]
    said = [r.getMessage() for r in caplog.records]
    assert not any("could not be committed" in line for line in said)
    assert sum("written again, a savepoint each" in line for line in said) == 1


def test_a_crash_mid_batch_loses_nothing_and_applies_nothing_twice(intake, tmp_path) -> None:
    """The process is SIGKILLed while the batch's second message is processed (the first's
    order already written in the open transaction): nothing of the batch is committed, all
    three stay stored, unprocessed; the next start applies each once (one order, one reply)."""
    db, config = intake
    ids = three(db, config)
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal
            from pathlib import Path
            import snl_pbem.app.intake.pipeline as pipeline
            from snl_pbem.app.intake import process_batch
            from snl_pbem.config import load_config
            from snl_pbem.store import Database

            config = load_config(Path({str(config.path)!r}))
            db = Database(config.database_url)
            original = dict(pipeline.STEPS)["dedupe"]

            def dying(msg):
                if msg.ctx.mail.sender == "bob@example.org":
                    os.kill(os.getpid(), signal.SIGKILL)
                return original(msg)

            pipeline.STEPS = (("dedupe", dying),) + pipeline.STEPS[1:]
            process_batch(db, config, {ids!r})
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, str(script)], env=env, timeout=HANG, check=False)
    assert done.returncode == -signal.SIGKILL
    assert status_of(db, ids) == ["new"] * 3
    assert orders_of(db) == [] and replies_since(db, T0) == []
    results = process_pending(db, config)
    assert [r.status for r in results] == ["processed"] * 3
    applied = sorted((o.player, o.dice) for o in orders_of(db))  # read in parallel
    assert applied == [("ann", "2"), ("bob", "3"), ("cy", "4")]
    assert len(replies_since(db, T0)) == 3


def test_what_the_readers_have_queued_is_processed_in_few_transactions(intake, monkeypatch) -> None:
    """Thirty small messages queued at once (as a fetch or LMTP queues them) are stored in
    one commit and processed in batches: far fewer commits than messages, each applied.
    (The store commits on the driver's connection, ``Database.driver_transaction``; the
    rest through SQLAlchemy's.)"""
    db, config = intake
    commits: list[int] = []
    event.listen(db.engine, "commit", lambda conn: commits.append(1))
    driver_commit = Driver.commit
    monkeypatch.setattr(Driver, "commit", lambda d: (commits.append(1), driver_commit(d))[1])
    entry = Intake(db, config, readers=Readers(threads=1))
    names = ("ann", "bob", "cy")
    messages = [
        (mail(f"KEY {names[i % 3]}-key-123\nDICE {1 + i % 6}", f"{names[i % 3]}@x.org", f"q{i}"),)
        for i in range(30)
    ]
    stored = entry.store_many([(raw, T0, "t", None, None, None) for (raw,) in messages])
    assert len(commits) == 1  # the whole fetch, before any of it is acknowledged
    for _, future in stored:
        future.result(timeout=HANG)
    assert all(future.result().status in ("processed", "rejected") for _, future in stored)
    assert len(commits) < 1 + 30  # one commit a message before batches (and more reads)


def test_the_sandbox_reads_a_batch_and_one_failure_costs_only_that_message() -> None:
    """A batch in one round trip: a message past the memory limit (sent alone: it is
    large) fails alone, and those before and after it are read."""
    sandbox = Sandbox(memory=64 * 1024 * 1024)
    big = (
        b"From: a@example.org\r\nContent-Type: text/plain\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n" + b"QUFB\r\n" * 8_000_000
    )
    small = [f"From: p{i}@example.org\r\n\r\nDICE {i}\r\n".encode() for i in range(1, 4)]
    try:
        read = sandbox.parse_many([small[0], big, *small[1:]], "snl@example.org", [()] * 4)
    finally:
        sandbox.close()
    assert isinstance(read[1], ParseFailed) and "more memory" in str(read[1])
    assert [m.text.strip() for i, m in enumerate(read) if i != 1] == ["DICE 1", "DICE 2", "DICE 3"]


@pytest.mark.parametrize("memory_mb", [8, 44, 48, 52, 56, 64])
def test_a_message_too_big_to_receive_never_locks_the_pipe(memory_mb: int) -> None:
    """A 48 MB message a worker cannot read within its memory: however far it gets (the
    receive fails at once, or part way, with the rest of the message still in the pipe;
    or the parse fails), it says so and is replaced, and the messages after it are read.
    Before, a receive that failed part way (limits of 48 to 56 MB here) left the rest in
    the pipe; the worker read it as more messages, answered each 4 bytes of it until the
    pipe back was full, and both sides waited for good (seen in CI). The reading runs in
    a thread given 5 minutes, far more than the second or so it takes."""
    big = (
        b"From: a@example.org\r\nContent-Type: text/plain\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n" + b"QUFB\r\n" * 8_000_000
    )
    small = [f"From: p{i}@example.org\r\n\r\nDICE {i}\r\n".encode() for i in range(1, 4)]
    sandbox = Sandbox(memory=memory_mb * 1024 * 1024)
    read: list[object] = []
    reader = threading.Thread(
        target=lambda: read.extend(
            sandbox.parse_many([small[0], big, *small[1:]], "snl@example.org", [()] * 4)
        ),
        daemon=True,
    )
    try:
        reader.start()
        reader.join(300)
        assert not reader.is_alive(), "the sandbox and its worker wait on each other"
    finally:
        sandbox.close()
    assert isinstance(read[1], ParseFailed) and "more memory" in str(read[1])
    assert [m.text.strip() for i, m in enumerate(read) if i != 1] == ["DICE 1", "DICE 2", "DICE 3"]


def test_a_batch_compares_each_message_with_what_we_sent_its_sender(intake) -> None:
    """The fingerprints of our mail to each sender (lines of it pasted back are never
    orders), looked up for a whole batch in three queries, are those looked up one sender
    at a time: the same messages, newest first, welcomes (with keys) included."""
    db, config = intake
    for n in range(3):
        for name in ("ann", "bob"):
            raw = mail(f"KEY {name}-key-123\nDICE {n + 2}", f"{name}@example.org", f"f{name}{n}")
            ingest(db, config, raw, T0, "t")
    senders = ["ann@example.org", "bob@example.org", "cy@example.org", "nobody@x.org", None]
    batch = _sent_to_many(db, config, senders)
    assert batch == {sender: _sent_to(db, config, sender) for sender in senders}
    assert len(batch["ann@example.org"]) >= 4  # her welcome and three answers


def test_fingerprints_forgotten_meanwhile_are_still_compared(intake, monkeypatch) -> None:
    """Another thread's mail may make the fingerprint cache forget its older half while a
    reader looks fingerprints up (every reply written adds one): what the reader found or
    worked out is its own, and nothing we sent is left out of the comparison."""
    db, config = intake
    for n in range(3):
        ingest(
            db, config, mail(f"KEY ann-key-123\nDICE {n + 2}", "ann@example.org", f"e{n}"), T0, "t"
        )
    before = _sent_to(db, config, "ann@example.org")
    batch = _sent_to_many(db, config, ["ann@example.org"])["ann@example.org"]
    assert len(before) >= 4 and batch == before  # her welcome and three answers
    with db.transaction() as s:  # as mail written before fingerprints were kept with it
        s.execute(OutboxMessage.__table__.update().values(fingerprint=None))
    real = sentprints.remember

    def forgetful(message_id: str, value: str) -> None:  # a write that forgets the rest
        sentprints._prints.clear()
        real(message_id, value)

    monkeypatch.setattr(sentprints, "remember", forgetful)
    sentprints._prints.clear()
    assert _sent_to(db, config, "ann@example.org") == before
    sentprints._prints.clear()
    assert _sent_to_many(db, config, ["ann@example.org"])["ann@example.org"] == before


def test_a_message_id_too_long_for_the_index_costs_its_batch_nothing(intake) -> None:
    """A hostile Message-ID of 998 CJK characters (2,994 bytes) passed PostgreSQL's index row
    limit (2,704 bytes): the database refused the row, and with it the whole batch (every
    other message of the fetch, or of the LMTP group, answered "try again later")."""
    db, config = intake
    cjk = "\u6f22" * 998
    hostile = (
        "From: mallory@example.org\r\nTo: snl@example.org\r\nSubject: [g1]\r\n"
        f"Message-ID: <{cjk}@example.org>\r\n\r\nhello\r\n"
    ).encode()
    honest = mail("KEY ann-key-123\nDICE 4", "ann@example.org", "honest")
    stored = store_many(
        db, config, [(hostile, T0, "t", None, None, None), (honest, T0, "t", None, None, None)]
    )
    assert [result.status for result, _ in stored] == ["new", "new"]
    with db.transaction() as s:
        who = InboundMessage.sender.like("mall%")
        kept = s.scalar(select(InboundMessage.message_id).where(who))
    assert kept is not None and len(kept.encode()) <= 998


def test_a_batch_knows_what_is_stored_and_what_it_repeats(intake) -> None:
    """One fetch holds a message stored before (same bytes), one whose mailbox UID is
    stored (a changed copy of the same mail), the same bytes twice and the same UID twice:
    each repeat is a duplicate of the row stored first, with its id; the new ones get rows
    in the batch's order, and nothing is stored twice."""
    db, config = intake
    old = mail("DICE 2", "ann@example.org", "old")
    first = store_many(db, config, [(old, T0, "box", 7, 1, None), (b"x", T0, "box", 7, 2, None)])
    old_id, uid2_id = (result.inbound_id for result, _ in first)
    a, b, c = (mail(f"DICE {n}", "bob@example.org", f"n{n}") for n in (3, 4, 5))
    batch = [
        (a, T0, "box", 7, 10, None),
        (old, T0, "box", 7, 11, None),  # the same bytes as a stored one
        (b, T0, "box", 7, 2, None),  # a UID stored already (other bytes)
        (a, T0, "box", 7, 12, None),  # the batch's first, again
        (c, T0, "box", 7, 13, None),
        (b"y", T0, "box", 7, 13, None),  # the UID of the one before it
        (b"z", T0, "box", 8, 13, None),  # the same UID of another UIDVALIDITY: new
        (a, T0, "box", 7, 2, None),  # the batch's first bytes, a stored UID: bytes first
    ]
    got = [(r.status, r.inbound_id, kept is not None) for r, kept in store_many(db, config, batch)]
    assert [status for status, _, _ in got] == [
        "new",
        "duplicate",
        "duplicate",
        "duplicate",
        "new",
        "duplicate",
        "new",
        "duplicate",
    ]
    ids = [inbound_id for _, inbound_id, _ in got]
    assert ids[1] == old_id and ids[2] == uid2_id and ids[3] == ids[0] and ids[5] == ids[4]
    assert ids[7] == ids[0]  # its bytes are the batch's first (as when each was flushed)
    assert ids[0] < ids[4] < ids[6] and [kept for _, _, kept in got] == [
        True,
        False,
        False,
        False,
        True,
        False,
        True,
        False,
    ]
    with db.transaction() as s:
        rows = s.execute(select(InboundMessage.id, InboundMessage.uid)).all()
    assert sorted(rows) == sorted(
        [(old_id, 1), (uid2_id, 2), (ids[0], 10), (ids[4], 13), (ids[6], 13)]
    )


def test_a_mailbox_without_uidvalidity_knows_its_uids_apart_from_one_with(intake) -> None:
    """A UID stored without a UIDVALIDITY (None) is found again as such, and the same UID
    with a UIDVALIDITY, or of another mailbox, is not it."""
    db, config = intake
    [(first, _)] = store_many(db, config, [(b"one", T0, "box", None, 5, None)])
    batch = [
        (b"two", T0, "box", None, 5, None),  # the same UID, no UIDVALIDITY: a duplicate
        (b"three", T0, "box", 9, 5, None),  # with one: new
        (b"four", T0, "other", None, 5, None),  # another mailbox: new
    ]
    got = [(r.status, r.inbound_id) for r, _ in store_many(db, config, batch)]
    assert got[0] == ("duplicate", first.inbound_id)
    assert [status for status, _ in got[1:]] == ["new", "new"]
    assert first.inbound_id not in {inbound_id for _, inbound_id in got[1:]}


def test_the_next_batch_is_read_while_one_is_written_and_they_are_written_in_order(
    intake, monkeypatch
) -> None:
    """Reading a batch (the sandbox's parse, another process) and writing the one before it
    overlap; the transactions still go in the order the batches were taken, so a sender's
    later message is never applied before her earlier one (R1: the latest order counts)."""
    import snl_pbem.runners.mailboxes as mailboxes

    db, config = intake
    events: list[tuple[str, tuple[int, ...]]] = []
    second_read = threading.Event()
    real_read, real_apply = mailboxes.read_batch, mailboxes.apply_batch

    def reading(db, config, ids):
        events.append(("read", tuple(ids)))
        if sum(kind == "read" for kind, _ in events) == 2:
            second_read.set()
        return real_read(db, config, ids)

    def applying(db, config, batch):
        if not any(kind == "apply" for kind, _ in events):
            # the first batch's transaction waits until the next batch is being read: with
            # reading and writing one after the other, that never happens
            assert second_read.wait(30), "the next batch was not read while one was written"
        events.append(("apply", tuple(batch.ids)))
        return real_apply(db, config, batch)

    monkeypatch.setattr(mailboxes, "read_batch", reading)
    monkeypatch.setattr(mailboxes, "apply_batch", applying)
    entry = Intake(db, config, readers=Readers(threads=2, batch=4))
    names = ("ann", "bob", "cy")
    messages = [
        mail(f"KEY {name}-key-123\nDICE {1 + i % 6}", f"{name}@example.org", f"o{i}")
        for i, name in ((i, names[i % 3]) for i in range(12))
    ]
    stored = entry.store_many([(raw, T0, "t", None, None, None) for raw in messages])
    for _, future in stored:
        future.result(timeout=HANG)
    reads = [ids for kind, ids in events if kind == "read"]
    applies = [ids for kind, ids in events if kind == "apply"]
    assert len(reads) >= 2 and applies == reads  # written in the order they were taken
    assert sorted(i for ids in applies for i in ids) == [r.inbound_id for r, _ in stored]
    # applied in the order the messages came: each player's last order is her last message's
    assert [(o.player, o.dice) for o in orders_of(db)] == [
        (names[i % 3], str(1 + i % 6)) for i in range(12)
    ]


def test_a_message_stored_has_its_headers_read_once(intake, monkeypatch) -> None:
    """Its Message-ID and sender are read from its headers once, by IMAP's fetch and
    LMTP's delivery alike, for its row and for the readers (read twice, they were a tenth
    of the poller's time)."""
    db, config = intake
    read: list[bytes] = []
    for module in (store_module, mailboxes_module):
        real = module.envelope_of

        def counted(raw: bytes, real=real) -> tuple[str | None, str | None]:
            read.append(raw)
            return real(raw)

        monkeypatch.setattr(module, "envelope_of", counted)
    entry = Intake(db, config, readers=Readers(threads=1))
    fetch = [mail(f"KEY ann-key-123\nDICE {n}", "ann@example.org", f"e{n}") for n in (1, 2, 3)]
    stored = entry.store_many([(raw, T0, "t", None, None, None) for raw in fetch])
    alone = mail("KEY bob-key-123\nDICE 4", "bob@example.org", "e4")
    stored.append(entry.store(alone, T0, "t"))
    assert sorted(read) == sorted([*fetch, alone])
    for _, future in stored:
        assert future.result(timeout=HANG).status == "processed"
    with db.transaction() as s:
        senders = s.scalars(select(InboundMessage.sender).order_by(InboundMessage.id)).all()
    assert senders == ["ann@example.org"] * 3 + ["bob@example.org"]


def _hooked_futures(n: int) -> tuple[list[Future[int]], list[object], threading.Thread]:
    """``n`` futures, every hook hung on them (each waiter ``concurrent.futures.wait``
    hangs, each done-callback), and a thread that sets their results one by one, a
    millisecond or more apart (0.6 s at the least for 600), from the first hook on: none
    is done before the wait looks at them, however slow the machine."""
    hung: list[object] = []
    begin = threading.Event()

    class Waiters(list):  # type: ignore[type-arg]
        def append(self, item: object) -> None:
            hung.append(item)
            begin.set()
            super().append(item)

    class Counted(Future[int]):
        def __init__(self) -> None:
            super().__init__()
            self._waiters = Waiters()

        def add_done_callback(self, fn) -> None:  # type: ignore[no-untyped-def]
            hung.append(fn)
            begin.set()
            super().add_done_callback(fn)

    futures: list[Future[int]] = [Counted() for _ in range(n)]

    def finish() -> None:
        begin.wait(HANG)
        for n, future in enumerate(futures):
            time.sleep(0.001)
            future.set_result(n)

    worker = threading.Thread(target=finish)
    worker.start()
    return futures, hung, worker


def test_a_poll_waits_for_thousands_of_readings_hooking_each_once() -> None:
    """``settle`` waits for a poll's readings as a whole, looking for a deadline's
    interrupt between: each reading is hooked once, however long they take. Waiting on
    all of them at each look (``concurrent.futures.wait``) hung a waiter on every one
    still pending each time: a poll of 30,000 after an outage, read over 10 s, cost the
    poller 1.3 s of CPU. Waiting for the first done, again and again, cost the square.
    Here 600 are done one by one (three looks or more)."""
    futures, hung, worker = _hooked_futures(600)
    assert mailboxes_module.settle(futures, HANG)
    worker.join()
    assert 0 < len(hung) <= len(futures), len(hung)  # once each, at most
    # and it still gives up: at its time limit, or at once when interrupted
    assert not mailboxes_module.settle([Future()], 0.05)
    interrupt = threading.Event()
    interrupt.set()
    started = time.monotonic()
    assert not mailboxes_module.settle([Future()], HANG, interrupt)
    assert time.monotonic() - started < HANG / 2


def test_a_close_waits_for_thousands_of_readings_hooking_each_once() -> None:
    """A close's wait for its messages (``wait_for_close``) hooks each once too: it waited
    for the first done, again for each one, hanging a waiter on every one still pending
    each time (600 messages: 180,000 waiters; 5,000: 12 million)."""
    futures, hung, worker = _hooked_futures(600)
    unread = Readers().wait_for_close(Database("sqlite://"), dict(enumerate(futures)), HANG)
    worker.join()
    assert unread == []
    assert 0 < len(hung) <= len(futures), len(hung)


def _taken(readers: Readers) -> list[int] | None:
    """The next batch the readers would take (its ids), taken and done at once."""
    jobs, _ = readers._next()
    if jobs is None:
        return None
    readers._take(jobs)
    for job in jobs:
        del readers._running[(id(job.db), job.inbound_id)]
    return [job.inbound_id for job in jobs]


def test_batches_are_taken_in_stored_order_whatever_order_they_were_queued_in() -> None:
    """The queue's head and what follows it are found in stored order (the inbound ids),
    as submitted out of order, a close's messages first (the smallest first), and a
    message queued again after it was taken goes in its place once more."""
    db = Database("sqlite://")
    readers = Readers(threads=0, batch=3, pace=0.0)
    for inbound_id in (7, 3, 9, 1, 5, 8):
        readers.submit(db, None, inbound_id, size=500, sender=f"p{inbound_id}@example.org")
    urgent = {12: (900, "p12@x.example"), 8: (500, "p8@example.org"), 11: (400, "p11@x.example")}
    readers.submit_urgent(db, None, urgent)
    assert _taken(readers) == [11, 8, 12]  # a close's first: the smallest first
    assert _taken(readers) == [1, 3, 5]
    readers.submit(db, None, 3, size=500, sender="p3@example.org")
    readers.submit(db, None, 2, size=500, sender="p2@example.org")
    assert _taken(readers) == [2, 3, 7]
    assert _taken(readers) == [9]
    assert _taken(readers) is None and readers.idle()


def test_taking_a_batch_from_a_backlog_looks_at_the_batch_not_the_backlog() -> None:
    """A backlog (an IMAP poll after an outage) is taken a batch at a time, each looking at
    its own messages: the whole queue sorted for each batch cost the square of the backlog
    (30,000 queued: 37 us a message, against 3.5 at 3,000). Counted here: the queued
    messages looked at, for 20,000 in batches of 100."""
    looked: list[int] = [0]

    class Counted(dict):  # type: ignore[type-arg]
        def get(self, key, default=None):  # type: ignore[no-untyped-def]
            looked[0] += 1
            return super().get(key, default)

        def __contains__(self, key: object) -> bool:
            looked[0] += 1
            return super().__contains__(key)

        def values(self):  # type: ignore[no-untyped-def]
            looked[0] += len(self)
            return super().values()

    db = Database("sqlite://")
    readers = Readers(threads=0, pace=0.0)
    readers._queued = Counted()
    n = 20_000
    for inbound_id in range(1, n + 1):
        readers.submit(db, None, inbound_id, size=500, sender=f"p{inbound_id % 500}@example.org")
    looked[0] = 0
    taken: list[int] = []
    while (batch := _taken(readers)) is not None:
        taken += batch
    assert taken == list(range(1, n + 1))
    assert looked[0] <= 3 * n, looked[0]


class _FirstBatchHeld:
    """The readers' batches, read (``reads``, their ids) and written as usual, but the first
    batch's transaction held open from ``writing`` until ``release``; ``second`` is set
    when a second batch is read."""

    def __init__(self, monkeypatch) -> None:
        self.reads: list[tuple[int, ...]] = []
        self.writing, self.release, self.second = (threading.Event() for _ in range(3))
        real_read, real_apply = mailboxes_module.read_batch, mailboxes_module.apply_batch

        def reading(db, config, ids):
            self.reads.append(tuple(ids))
            if len(self.reads) == 2:
                self.second.set()
            return real_read(db, config, ids)

        def applying(db, config, batch):
            if len(self.reads) == 1:  # the first batch's transaction, held open
                self.writing.set()
                assert self.release.wait(HANG)
            return real_apply(db, config, batch)

        monkeypatch.setattr(mailboxes_module, "read_batch", reading)
        monkeypatch.setattr(mailboxes_module, "apply_batch", applying)


def test_fewer_than_a_batch_wait_for_the_batch_being_written_and_go_as_one(
    intake, monkeypatch
) -> None:
    """What LMTP's sessions deliver one by one while a batch is written is not read ahead
    a message or two at a time: it is taken once that batch is written, all of it, as one
    batch (taken ahead, LMTP's batches held half as many messages). A whole batch queued
    is still read ahead (the test before)."""
    db, config = intake
    held = _FirstBatchHeld(monkeypatch)
    reads, writing, release = held.reads, held.writing, held.release
    entry = Intake(db, config, readers=Readers(threads=4, batch=10))
    first = entry.store_many(
        [(mail("KEY ann-key-123\nDICE 1", "ann@example.org", "w0"), T0, "t", None, None, None)]
    )
    assert writing.wait(HANG)
    later = []
    for name in ("ann", "bob", "cy"):
        raw = mail(f"KEY {name}-key-123\nDICE 2", f"{name}@example.org", f"w-{name}")
        later.append(entry.store(raw, T0, "t"))
    # taken ahead, the first of them would be read by now (another reader is idle); give
    # it a second, then let the first batch be written
    deadline = time.monotonic() + 1.0
    while len(reads) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for _, future in [*first, *later]:
        assert future.result(timeout=HANG).status == "processed"
    assert reads == [
        (first[0][0].inbound_id,),
        tuple(result.inbound_id for result, _ in later),
    ]


def test_a_message_held_back_goes_at_once_when_a_close_asks_for_it(intake, monkeypatch) -> None:
    """A message held back behind the batch being written (fewer than a batch queued) is
    read at once when a close asks for it: marked urgent, the readers are woken."""
    db, config = intake
    held = _FirstBatchHeld(monkeypatch)
    reads, writing, release, second = held.reads, held.writing, held.release, held.second
    readers = Readers(threads=4, batch=10)
    entry = Intake(db, config, readers=readers)
    first = entry.store_many(
        [(mail("KEY ann-key-123\nDICE 1", "ann@example.org", "u0"), T0, "t", None, None, None)]
    )
    assert writing.wait(HANG)
    raw = mail("KEY bob-key-123\nDICE 2", "bob@example.org", "u1")
    result, future = entry.store(raw, T0, "t")
    assert result.inbound_id is not None
    readers.submit_urgent(db, config, {result.inbound_id: (len(raw), "bob@example.org")})
    try:
        assert second.wait(30), "a message a close waits for stayed held back"
    finally:
        release.set()
    assert reads == [(first[0][0].inbound_id,), (result.inbound_id,)]
    for _, done in [*first, (result, future)]:
        assert done.result(timeout=HANG).status == "processed"


def quoted(lines: int) -> str:
    """A reply's quote of a round report, ``lines`` lines long (about 51 bytes each)."""
    return "".join(f"> line {n:05d} of the round report you sent us\r\n" for n in range(lines))


def _batches_recorded(monkeypatch) -> tuple[list[tuple[int, ...]], list[bool]]:
    """The readers' batches as read (their ids), and each transaction's ``savepoints``
    (False: written at once; True: written again, a savepoint each)."""
    import snl_pbem.app.intake.batch as batch_module

    reads: list[tuple[int, ...]] = []
    writes: list[bool] = []
    real_read, real_write = mailboxes_module.read_batch, batch_module._write

    def reading(db, config, ids):
        reads.append(tuple(ids))
        return real_read(db, config, ids)

    def writing(db, config, todo, read, *, savepoints):
        writes.append(savepoints)
        return real_write(db, config, todo, read, savepoints=savepoints)

    monkeypatch.setattr(mailboxes_module, "read_batch", reading)
    monkeypatch.setattr(batch_module, "_write", writing)
    return reads, writes


def test_an_imap_fetch_of_orders_is_written_in_one_transaction(intake, monkeypatch) -> None:
    """A whole IMAP fetch (``BATCH`` small messages, what the poller stores in one commit)
    is read and written as one batch, in one transaction, by the readers as ``serve`` makes
    them: a batch costs about 13 ms besides its messages, and in batches of 25 a fetch paid
    it four times (bench_ingest: 1.3x the orders a second through Dovecot in one)."""
    from snl_pbem.mail.imap import BATCH as FETCH

    db, config = intake
    reads, writes = _batches_recorded(monkeypatch)
    names = ("ann", "bob", "cy")
    fetch = [
        (
            mail(
                f"KEY {names[i % 3]}-key-123\nDICE {1 + i % 6}",
                f"{names[i % 3]}@example.org",
                f"f{i}",
            ),
            T0,
            "t",
            None,
            None,
            None,
        )
        for i in range(FETCH)
    ]
    entry = Intake(db, config, readers=Readers())
    stored = entry.store_many(fetch)
    for _, future in stored:
        assert future.result(timeout=HANG).status == "processed"
    assert reads == [tuple(result.inbound_id for result, _ in stored)]
    assert writes == [False]  # one transaction, never written again
    assert len(orders_of(db)) == FETCH  # each message's order set stored


def test_a_batch_of_large_messages_is_bounded_by_its_bytes(intake, monkeypatch) -> None:
    """Replies quoting a report (tens of KB each, HTML often) fill a batch by their bytes
    before its count: a batch reads no more bytes than 12 of the largest batched messages
    (``BATCH_TOTAL_BYTES``), as its reading counts against ``IN_ORDER_SECONDS`` whole."""
    db, config = intake
    reads, _ = _batches_recorded(monkeypatch)
    quote = quoted(1200)

    def reply(i: int) -> bytes:
        return mail(f"KEY ann-key-123\nDICE {1 + i % 6}\n\n{quote}", "ann@example.org", f"q{i:02d}")

    size = len(reply(0))
    per_batch = mailboxes_module.BATCH_TOTAL_BYTES // size
    raws = [reply(i) for i in range(per_batch + per_batch // 2 + 1)]  # a batch and a half
    assert all(len(raw) == size for raw in raws)
    assert mailboxes_module.BATCH_BYTES // 2 < size <= mailboxes_module.BATCH_BYTES
    # (in_order: ann's next batch is never taken while her first is read, however slow)
    entry = Intake(db, config, readers=Readers(in_order=HANG))
    stored = entry.store_many([(raw, T0, "t", None, None, None) for raw in raws])
    for _, future in stored:
        future.result(timeout=HANG)
    assert 1 < per_batch < len(raws) < mailboxes_module.BATCH_MAX
    assert [len(ids) for ids in reads] == [per_batch, len(raws) - per_batch]
    assert [i for ids in reads for i in ids] == [result.inbound_id for result, _ in stored]


PACED = 60.0
"""A pace no test waits out: what these tests see taken is taken for another reason."""


def test_fewer_than_a_batch_are_paced_and_what_comes_meanwhile_joins(intake, monkeypatch) -> None:
    """LMTP's sessions deliver one message each at a time: fewer than a batch are taken
    ``pace`` after the batch before at the soonest, with what came meanwhile (unpaced they
    went about ten a batch, each batch's fixed cost paid again). The first message after a
    pause is taken at once, and a whole batch queued is taken at once."""
    db, config = intake
    reads, _ = _batches_recorded(monkeypatch)
    entry = Intake(db, config, readers=Readers(threads=2, batch=4, pace=PACED))
    names = ("ann", "bob", "cy", "ann", "bob")
    stored = []
    for n, name in enumerate(names):
        raw = mail(f"KEY {name}-key-123\nDICE {n + 1}", f"{name}@example.org", f"p{n}")
        stored.append(entry.store(raw, T0, "t"))
        if n == 0:  # alone after a pause: at once (a pace of a minute is never waited out)
            assert stored[0][1].result(timeout=PACED / 2).status == "processed"
        if n == 3:  # three paced: none taken (unpaced, the first is taken at once)
            time.sleep(0.3)
            assert len(reads) == 1
    for _, future in stored:
        assert future.result(timeout=PACED / 2).status == "processed"
    ids = [result.inbound_id for result, _ in stored]
    assert reads == [(ids[0],), tuple(ids[1:])]  # the fourth queued made a whole batch


def test_a_message_a_close_waits_for_is_not_paced(intake, monkeypatch) -> None:
    """A message held by the pace goes at once when a close asks for it."""
    db, config = intake
    reads, _ = _batches_recorded(monkeypatch)
    readers = Readers(threads=2, batch=4, pace=PACED)
    entry = Intake(db, config, readers=readers)
    first = entry.store(mail("KEY ann-key-123\nDICE 1", "ann@example.org", "c0"), T0, "t")
    assert first[1].result(timeout=PACED / 2).status == "processed"
    raw = mail("KEY bob-key-123\nDICE 2", "bob@example.org", "c1")
    result, future = entry.store(raw, T0, "t")
    assert result.inbound_id is not None
    time.sleep(0.3)
    assert len(reads) == 1  # held by the pace (unpaced, it is taken at once)
    readers.submit_urgent(db, config, {result.inbound_id: (len(raw), "bob@example.org")})
    assert future.result(timeout=PACED / 2).status == "processed"
    assert reads == [(first[0].inbound_id,), (result.inbound_id,)]


def test_a_message_that_cannot_join_a_batch_is_not_paced(intake, monkeypatch) -> None:
    """A message too large to join a batch is read alone: the pace would gain nothing, and
    it is taken at once."""
    db, config = intake
    reads, _ = _batches_recorded(monkeypatch)
    entry = Intake(db, config, readers=Readers(threads=2, batch=4, pace=PACED))
    first = entry.store(mail("KEY ann-key-123\nDICE 1", "ann@example.org", "l0"), T0, "t")
    assert first[1].result(timeout=PACED / 2).status == "processed"
    quote = quoted(2000)
    raw = mail(f"KEY bob-key-123\nDICE 2\n\n{quote}", "bob@example.org", "l1")
    assert len(raw) > mailboxes_module.BATCH_BYTES
    result, future = entry.store(raw, T0, "t")
    assert future.result(timeout=PACED / 2).status == "processed"
    assert reads == [(first[0].inbound_id,), (result.inbound_id,)]


def test_a_group_store_lingers_for_others_only_soon_after_a_group_of_several(intake) -> None:
    """LMTP's group store (``GroupStore``): a message alone is written at once; soon after
    a group of several (sessions delivering together), the next waits ``linger`` for
    others, and one that comes meanwhile is written in the same transaction; after a pause
    none waits. Each caller returns once its own message is committed. (Its sleep and its
    clock are the test's: nothing here depends on the machine's speed.)"""
    db, config = intake
    groups: list[int] = []
    release = threading.Event()

    def recorded(db_, config_, messages, envelopes):
        groups.append(len(messages))
        if len(groups) == 2:  # the second group waits until two more queue behind it
            assert release.wait(HANG)
        return store_many(db_, config_, messages, envelopes)

    lingered: list[float] = []
    meanwhile: list[int] = []  # a message another session delivers while one lingers
    now = [0.0]

    def linger(seconds: float) -> None:
        lingered.append(seconds)
        if meanwhile:
            threads.append(deliver(meanwhile.pop()))
            until(lambda: len(group._queue) == 2)

    group = mailboxes_module.GroupStore(
        db, config, linger=0.25, within=0.1, sleep=linger, clock=lambda: now[0]
    )

    def message(n: int) -> tuple[bytes, object, str, None, None, None]:
        raw = mail(f"KEY ann-key-123\nDICE {n}", "ann@example.org", f"g{n}")
        return (raw, T0, "lmtp", None, None, None)

    def deliver(n: int) -> threading.Thread:
        raw = message(n)
        thread = threading.Thread(target=lambda: stored.append(group.store(raw, (None, None))))
        thread.start()
        return thread

    def until(done) -> None:
        deadline = time.monotonic() + HANG
        while not done():
            assert time.monotonic() < deadline
            time.sleep(0.001)

    stored: list = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mailboxes_module, "store_many", recorded)
        group.store(message(1), (None, None))  # alone: written at once
        threads = [deliver(2)]
        until(lambda: len(groups) == 2)  # written alone too (held in its write)
        threads += [deliver(3), deliver(4)]
        until(lambda: len(group._queue) == 2)
        release.set()  # 2 is committed; 3 and 4 go together, at once
        for thread in threads:
            thread.join(HANG)
        assert groups == [1, 1, 2] and lingered == []
        threads, meanwhile[:], now[0] = [], [6], 0.05
        group.store(message(5), (None, None))  # soon after a group of two: 6 joins it
        for thread in threads:
            thread.join(HANG)
        assert groups == [1, 1, 2, 2] and lingered == [0.25]
        assert len(stored) == 4 and all(result.status == "new" for result, _ in stored)
        now[0] = 0.1
        group.store(message(7), (None, None))  # soon after that group: it lingers, alone
        assert groups == [1, 1, 2, 2, 1] and lingered == [0.25, 0.25]
        now[0] = 0.2
        group.store(message(8), (None, None))  # after a pause: at once
        assert groups == [1, 1, 2, 2, 1, 1] and lingered == [0.25, 0.25]


def test_a_group_stores_writer_ends_when_idle_and_outlives_a_failing_caller(intake, caplog) -> None:
    """The group store's one writer thread: it ends after ``idle`` seconds with nothing
    to write and starts again with the next message; a caller whose ``done`` fails is
    logged, and the writer goes on to tell the others of its group and to write the next."""
    db, config = intake
    group = mailboxes_module.GroupStore(db, config, linger=0, idle=0.05)

    def message(n: int) -> tuple[bytes, object, str, None, None, None]:
        raw = mail(f"KEY ann-key-123\nDICE {n}", "ann@example.org", f"w{n}")
        return (raw, T0, "lmtp", None, None, None)

    def until(done) -> None:
        deadline = time.monotonic() + HANG
        while not done():
            assert time.monotonic() < deadline
            time.sleep(0.005)

    writers: list[threading.Thread] = []
    firsts: list = []

    def first_done(outcome, _envelope) -> None:
        writers.append(threading.current_thread())
        firsts.append(outcome)

    group.submit(lambda: (message(1), (None, None)), first_done)
    until(lambda: firsts)
    (writer,), ((first, _),) = writers, firsts
    assert writer.name == "snl-pbem-store"
    until(lambda: group._writer is None)  # idle: it ends
    writer.join(HANG)
    assert not writer.is_alive()
    told: list = []
    release = threading.Event()
    real_store_many = mailboxes_module.store_many

    def tell(outcome, _envelope) -> None:
        told.append(outcome)

    def held(*args):
        assert release.wait(HANG)
        return real_store_many(*args)

    def failing(outcome, _envelope) -> None:
        raise RuntimeError("the caller's own failure")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mailboxes_module, "store_many", held)
        group.submit(lambda: (message(2), (None, None)), tell)  # a new writer, held in its write
        until(lambda: group._writer is not None and not group._queue)
        group.submit(lambda: (message(3), (None, None)), failing)  # these two: the next group
        group.submit(lambda: (message(4), (None, None)), tell)
        release.set()
        until(lambda: len(told) == 2)
    assert [result.status for result, _ in told] == ["new", "new"]
    assert "after storing a message" in caplog.text and "the caller's own failure" in caplog.text
    fifth, _ = group.store(message(5), (None, None))  # the writer lived on
    assert first.status == fifth.status == "new"
    with db.transaction() as session:
        assert len(session.scalars(select(InboundMessage)).all()) == 5


def test_a_message_submitted_is_told_even_when_its_reading_cannot_be_asked(
    intake, monkeypatch
) -> None:
    """``Intake.submit`` (the server's LMTP receiver): should handing the stored message
    to the readers fail, its caller is told so (as ``store`` would raise: the MTA is
    answered 451 and delivers again, found already stored), never left waiting."""
    db, config = intake
    entry = mailboxes_module.Intake(db, config, readers=mailboxes_module.Readers())

    def refused(*args, **kwargs):
        raise RuntimeError("the readers are gone")

    monkeypatch.setattr(mailboxes_module, "read_stored", refused)
    told: list = []
    entry.submit(
        mail("KEY ann-key-123\nDICE 2", "ann@example.org", "s1"), lambda: T0, "lmtp", told.append
    )
    deadline = time.monotonic() + HANG
    while not told:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert isinstance(told[0], RuntimeError) and "readers are gone" in str(told[0])


def test_a_group_stores_writer_that_fails_tells_those_queued_and_the_next_starts_anew(
    intake, caplog
) -> None:
    """Should the writer itself fail (a bug of ours, here its clock), those queued are told
    (their MTA answered 451), none is left waiting for ever, and the next message starts
    a new writer."""
    db, config = intake
    broken = [True]

    def clock() -> float:
        if broken[0]:
            broken[0] = False
            raise RuntimeError("a broken clock")
        return time.monotonic()

    group = mailboxes_module.GroupStore(db, config, linger=0.001, clock=clock)
    raw = mail("KEY ann-key-123\nDICE 2", "ann@example.org", "b1")
    with pytest.raises(RuntimeError, match="a broken clock"):
        group.store((raw, T0, "lmtp", None, None, None), (None, None))
    assert "the store's writer stopped" in caplog.text
    result, _ = group.store((raw, T0, "lmtp", None, None, None), (None, None))
    assert result.status == "new"

    class Stop(BaseException):
        """Not an Exception: past the group's own handling, to the writer's."""

    def stopped(*args):
        raise Stop()

    told: list = []
    said = threading.Event()
    with pytest.MonkeyPatch.context() as patch:  # the group being written is told too
        patch.setattr(mailboxes_module, "store_many", stopped)
        group.submit(
            lambda: ((raw, T0, "lmtp", None, None, None), (None, None)),
            lambda outcome, _: (told.append(outcome), said.set()),
        )
        assert said.wait(HANG)
    assert isinstance(told[0], Stop)


def test_a_group_stores_writer_that_cannot_start_refuses_that_message_only(
    intake, monkeypatch
) -> None:
    """No thread to be had (the process's limit): the message that would have started the
    writer is refused (its MTA answered 451), and the next starts one; none is left queued
    behind a writer that never ran (the hostile review)."""
    db, config = intake
    group = mailboxes_module.GroupStore(db, config, linger=0)
    real_start = threading.Thread.start
    refusals = [RuntimeError("can't start new thread")]

    def start(self: threading.Thread) -> None:
        if self.name == "snl-pbem-store" and refusals:
            raise refusals.pop()
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    raw = mail("KEY ann-key-123\nDICE 2", "ann@example.org", "t1")
    with pytest.raises(RuntimeError, match="can't start new thread"):
        group.store((raw, T0, "lmtp", None, None, None), (None, None))
    assert group._queue == [] and group._writer is None
    told: list = []
    stored = threading.Event()
    group.submit(
        lambda: ((raw, T0, "lmtp", None, None, None), (None, None)),
        lambda outcome, _: (told.append(outcome), stored.set()),
    )
    assert stored.wait(HANG)  # (a writer that never ran would never say)
    assert told[0][0].status == "new"


def test_a_group_is_told_what_was_committed_even_when_the_writer_fails_after(
    intake, caplog
) -> None:
    """The writer fails once a group of two is committed (here its clock, read after a
    group of several): both are told they are stored, as they are; a message whose own
    reading fails (``prepare``) is told so, and the others of its group are stored; the
    next message starts a writer anew."""
    db, config = intake
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        if calls[0] == 3:  # (before the first group, before the second, then after it)
            raise RuntimeError("a broken clock")
        return time.monotonic()

    group = mailboxes_module.GroupStore(db, config, linger=0.001, clock=clock)
    told: dict[str, object] = {}
    both = threading.Event()
    release = threading.Event()
    real_store_many = mailboxes_module.store_many

    def held(*args):
        assert release.wait(HANG)
        return real_store_many(*args)

    def tell(name: str):
        def done(outcome, _envelope) -> None:
            told[name] = outcome
            if len(told) == 4:
                both.set()

        return done

    def prepared(n: int):
        raw = mail(f"KEY ann-key-123\nDICE {n}", "ann@example.org", f"c{n}")
        return lambda: ((raw, T0, "lmtp", None, None, None), (None, None))

    def unreadable():
        raise ValueError("an envelope that cannot be read")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mailboxes_module, "store_many", held)
        group.submit(prepared(1), tell("first"))  # alone, held in its write
        deadline = time.monotonic() + HANG
        while group._queue:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        group.submit(prepared(2), tell("second"))
        group.submit(unreadable, tell("unreadable"))
        group.submit(prepared(3), tell("third"))
        release.set()
        assert both.wait(HANG)
        while group._writer is not None:  # (it fails just after telling them)
            assert time.monotonic() < deadline + HANG
            time.sleep(0.005)
    assert isinstance(told["unreadable"], ValueError)
    assert [told[name][0].status for name in ("first", "second", "third")] == ["new"] * 3
    assert "the store's writer stopped" in caplog.text and "a broken clock" in caplog.text
    result, _ = group.store(prepared(4)()[0], (None, None))
    assert result.status == "new"


def test_a_message_submitted_is_read_in_the_writer_not_in_the_callers_thread(
    intake, monkeypatch
) -> None:
    """``Intake.submit``: the envelope and the receipt time (a crafted header section
    took milliseconds to read) are read in the store's writer, not in the caller's thread
    (the LMTP receiver's loop, which every session waits on: the hostile review)."""
    db, config = intake
    entry = mailboxes_module.Intake(db, config, readers=mailboxes_module.Readers())
    where: dict[str, str] = {}
    real_envelope_of = mailboxes_module.envelope_of

    def envelope_of(raw: bytes):
        where["envelope"] = threading.current_thread().name
        return real_envelope_of(raw)

    def received_at():
        where["receipt time"] = threading.current_thread().name
        return T0

    monkeypatch.setattr(mailboxes_module, "envelope_of", envelope_of)
    told: list = []
    said = threading.Event()
    raw = mail("KEY ann-key-123\nDICE 2", "ann@example.org", "r1")
    entry.submit(raw, received_at, "lmtp", lambda outcome: (told.append(outcome), said.set()))
    assert said.wait(HANG)
    result, reading = told[0]
    assert result.status == "new" and reading.result(HANG).status == "processed"
    assert where == {"envelope": "snl-pbem-store", "receipt time": "snl-pbem-store"}


def test_the_latest_of_our_mail_to_each_recipient_is_read_back_exactly(intake) -> None:
    """``_latest_to`` against the rule worked out from the whole outbox: per recipient, the
    latest SENT_COMPARED in each status that reached it and the latest SECRET_COMPARED
    of them that held a key, with their fingerprints (None where none was kept), for 40
    recipients (on SQLite two statements' shapes, each statement's rows packed as one; on
    PostgreSQL one statement for all) of up to 60 messages each, some failed, some secret."""
    from snl_pbem.app.intake.reading import SECRET_COMPARED, SENT_COMPARED, _latest_to

    db, _config = intake
    recipients = [f"r{n}@example.org" for n in range(40)]
    rows = []
    for n, recipient in enumerate(recipients):
        for m in range(n * 3 % 61):
            rows.append(
                {
                    "kind": "reply",
                    "recipient": recipient,
                    "message_id": f"<latest-{n}-{m}@example.org>",
                    "message": b"x",
                    "status": ("sent", "pending", "failed")[(n + m) % 3],
                    "next_attempt_at": T0,
                    "created_at": T0,
                    "secret": (n * m) % 4 == 1,
                    "fingerprint": None if m % 7 == 3 else f"{n:012x} {m:012x}",
                }
            )
    with db.transaction() as s:
        s.execute(OutboxMessage.__table__.insert(), rows)
    with db.transaction() as s:
        every = s.execute(
            select(
                OutboxMessage.id,
                OutboxMessage.recipient,
                OutboxMessage.status,
                OutboxMessage.secret,
                OutboxMessage.fingerprint,
            ).where(OutboxMessage.recipient.in_(recipients))
        ).all()
        found = _latest_to(s, recipients)
    expected = set()
    for who, recipient in enumerate(recipients):
        for status in ("sent", "pending"):
            mine = sorted((r for r in every if r[1] == recipient and r[2] == status), reverse=True)
            expected |= {(who, 0, r[0], r[4]) for r in mine[:SENT_COMPARED]}
            expected |= {(who, 1, r[0], r[4]) for r in [r for r in mine if r[3]][:SECRET_COMPARED]}
    assert set(found) == expected
    assert len(expected) > 500 and any(f is None for *_, f in expected)


def test_rows_deleted_or_expunged_in_a_batch_are_left_to_the_session(intake) -> None:
    """``_update_messages_rows`` writes only rows the session still holds: one deleted
    meanwhile is deleted (not updated, which would find no row), one expunged keeps its
    stored values, the third is written."""
    db, config = intake
    ids = three(db, config)
    with db.transaction() as s:
        rows = list(s.scalars(select(InboundMessage).where(InboundMessage.id.in_(ids))))
        rows.sort(key=lambda r: r.id)
        for row in rows:
            row.status = "processed"
        s.delete(rows[0])
        s.expunge(rows[1])
        _update_messages_rows(s, rows)
    with db.transaction() as s:
        left = {r.id: r.status for r in s.scalars(select(InboundMessage))}
    assert left == {ids[1]: "new", ids[2]: "processed"}


def test_a_change_beyond_the_messages_rows_is_written_as_its_message_ends(intake) -> None:
    """A batch written without savepoints writes a message's seats, keys and rounds as the
    message ends (``_pending_beyond_messages``): a row added, deleted or changed that is
    not a message's own; a change to the messages' rows only (their status) waits for the
    batch's end. Looked for among the rows changed, not in ``Session.dirty`` (a set of the
    batch's rows built at each message)."""
    db, config = intake
    ids = three(db, config)
    with db.transaction() as s:
        rows = list(s.scalars(select(InboundMessage).where(InboundMessage.id.in_(ids))))
        player = s.scalars(select(Player).where(Player.name == "ann")).one()
        checked: set = set()  # the batch's rows found changed: not looked at again
        assert not _pending_beyond_messages(s, checked)
        for row in rows:
            row.status = "processed"
        assert not _pending_beyond_messages(s, checked)  # the messages' own rows: at the end
        assert {state.obj() for state in checked} == set(rows)
        player.language = "th"
        assert _pending_beyond_messages(s, checked)  # a seat changed
        s.flush()
        assert not _pending_beyond_messages(s, checked)
        game = s.scalars(select(Game)).one()
        enqueue_mail(
            s,
            config,
            game=game,
            kind="notice",
            to="ann@example.org",
            now=T0,
            template="player/notice.txt.j2",
            subject="x",
            message="y",
            line_problems=(),
        )
        assert _pending_beyond_messages(s, checked)  # a row added
        s.flush()
        s.delete(s.get(OutboxMessage, s.scalars(select(OutboxMessage.id)).first()))
        assert _pending_beyond_messages(s, checked)  # a row deleted
        s.rollback()
