"""Rows written together (``snl_pbem.store.deferred``, issue 23): a batch's order sets and
replies wait for the next statement, whatever it is, so nothing reads the database without
them; they keep the order they were inserted in, ORM rows among them; a block that fails
writes none of them. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from sqlalchemy import Table, event, func, select
from sqlalchemy.exc import IntegrityError

from snl_pbem.app.outbox import MailBatch
from snl_pbem.store import Database, OutboxMessage, deferred
from snl_pbem.store.db import TransactionUndone

OUTBOX = cast(Table, OutboxMessage.__table__)
NOW = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)


def row(tag: str) -> dict[str, Any]:
    return {
        "game_id": None,
        "kind": "ack",
        "recipient": f"{tag}@example.org",
        "message_id": f"<{tag}@example.org>",
        "message": tag.encode(),
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": NOW,
        "created_at": NOW,
        "secret": False,
    }


def orm(tag: str) -> OutboxMessage:
    return OutboxMessage(**row(tag))


def inserts(db: Database) -> list[tuple[str, bool]]:
    """(statement's first words, as executemany) of each INSERT from now on."""
    seen: list[tuple[str, bool]] = []

    def note(_conn: Any, _cursor: Any, statement: str, _p: Any, _c: Any, many: bool) -> None:
        if statement.startswith("INSERT"):
            seen.append((" ".join(statement.split()[:3]), many))

    event.listen(db.engine, "before_cursor_execute", note)
    return seen


def recipients(db: Database) -> list[str]:
    """The outbox's recipients in id order (the order mail goes out in)."""
    with db.transaction() as s:
        return list(s.scalars(select(OutboxMessage.recipient).order_by(OutboxMessage.id)))


def test_rows_wait_for_the_next_statement_and_any_statement_sees_them(db: Database) -> None:
    seen = inserts(db)
    with db.transaction() as s, deferred.deferring(s):
        deferred.insert_row(s, OUTBOX, row("ann"))
        deferred.insert_row(s, OUTBOX, row("bob"))
        assert seen == []  # not yet
        # the next statement, a plain query, finds them written, in one statement
        assert s.scalar(select(func.count()).select_from(OutboxMessage)) == 2
        # (an executemany on SQLite; on PostgreSQL one statement of arrays, unnest.insert_all)
        assert seen == [("INSERT INTO outbox", db.is_sqlite)]
        deferred.insert_row(s, OUTBOX, row("cy"))
    assert len(seen) == 2  # cy's at the block's end
    assert recipients(db) == ["ann@example.org", "bob@example.org", "cy@example.org"]


def test_rows_keep_their_order_among_the_sessions_own(db: Database) -> None:
    """A row inserted before an object the session adds gets the smaller id: the session's
    flush is a statement, and the rows waiting go first (the outbox's ids are the order
    the mail was written in)."""
    with db.transaction() as s, deferred.deferring(s):
        deferred.insert_row(s, OUTBOX, row("ann"))
        s.add(orm("bob"))
        s.flush()
        deferred.insert_row(s, OUTBOX, row("cy"))
        s.add(orm("dee"))  # flushed at the commit, after the block wrote cy's
    assert recipients(db) == [f"{n}@example.org" for n in ("ann", "bob", "cy", "dee")]


def test_outside_the_block_a_row_is_written_at_once(db: Database) -> None:
    seen = inserts(db)
    with db.transaction() as s:
        deferred.insert_row(s, OUTBOX, row("ann"))
        assert seen == [("INSERT INTO outbox", False)]
        with deferred.deferring(s):
            deferred.insert_row(s, OUTBOX, row("bob"))
        deferred.insert_row(s, OUTBOX, row("cy"))  # the block is over: at once again
        assert len(seen) == 3
    assert len(recipients(db)) == 3


def test_a_block_that_fails_writes_none_of_its_rows(db: Database) -> None:
    with db.transaction() as s:
        with pytest.raises(RuntimeError), deferred.deferring(s):
            deferred.insert_row(s, OUTBOX, row("ann"))
            raise RuntimeError("a message failed")
        deferred.insert_row(s, OUTBOX, row("bob"))  # the block's listener is gone
    assert recipients(db) == ["bob@example.org"]


def test_a_row_the_database_refuses_fails_at_the_next_statement(db: Database) -> None:
    """What changes: a bad row fails where the rows are written, not where it was given
    (the intake then writes its batch again with a savepoint each)."""
    bad = {**row("ann"), "recipient": None}  # NOT NULL
    with pytest.raises(IntegrityError), db.transaction() as s, deferred.deferring(s):
        deferred.insert_row(s, OUTBOX, bad)
        s.execute(select(1))
    assert recipients(db) == []


def test_a_refused_row_fails_the_block_even_when_its_statement_failed_quietly(
    db: Database,
) -> None:
    """The rows go with the next statement: when that is a savepoint whose failure is
    passed over (as a close's "are all orders in?" is), the block still fails at its end,
    so its transaction is never committed as if they had been written (the review's
    finding: a batch reported processed, its orders and answers nowhere)."""
    with (
        pytest.raises(deferred.DeferredRowsFailed),
        db.transaction() as s,
        deferred.deferring(s),
    ):
        deferred.insert_row(s, OUTBOX, row("ann"))
        deferred.insert_row(s, OUTBOX, {**row("bob"), "recipient": None})  # NOT NULL
        try:
            with s.begin_nested():
                s.execute(select(1))
        except Exception:
            pass  # as the caller may
    assert recipients(db) == []


def test_rows_inserted_in_a_savepoint_go_with_it(db: Database) -> None:
    """Rows waiting when a savepoint begins are written before it (they outlive its
    rollback); rows given inside it are written before it ends, and undone with it."""
    with db.transaction() as s, deferred.deferring(s):
        deferred.insert_row(s, OUTBOX, row("ann"))
        try:
            with s.begin_nested():
                deferred.insert_row(s, OUTBOX, row("bob"))
                raise KeyError("a command failed")
        except KeyError:
            pass
        with s.begin_nested():
            deferred.insert_row(s, OUTBOX, row("cy"))
    assert recipients(db) == ["ann@example.org", "cy@example.org"]


def test_a_transaction_undone_by_a_failure_passed_over_says_so(db: Database) -> None:
    """A flush the database refuses, its failure caught and passed over (a savepoint's, as
    a step may), undoes the transaction; ending it then raises, where it used to end
    quietly, committing nothing, its caller none the wiser."""
    with pytest.raises(TransactionUndone), db.transaction() as s:
        deferred.insert_row(s, OUTBOX, row("ann"))
        s.add(OutboxMessage(kind="ack", message_id="<x@example.org>"))  # no recipient
        try:
            with s.begin_nested():
                pass
        except Exception:
            pass
    assert recipients(db) == []


def test_a_mail_batch_goes_after_the_rows_waiting(db: Database) -> None:
    """A round's reports (``MailBatch``) inserted by driver SQL on PostgreSQL, which the
    deferred rows' listener does not see: the rows waiting are written first all the same,
    and the outbox's ids keep the order the mail was written in."""
    with db.transaction() as s, deferred.deferring(s):
        deferred.insert_row(s, OUTBOX, row("ann"))
        batch = MailBatch()
        batch.rows.extend([row("bob"), row("cy")])
        batch.insert(s)
        deferred.insert_row(s, OUTBOX, row("dee"))
    assert recipients(db) == [f"{n}@example.org" for n in ("ann", "bob", "cy", "dee")]
