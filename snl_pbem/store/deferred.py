"""Rows a batch of messages inserts, written together: each order of a batch inserts its
order set and its reply, two statements a message; within ``deferring`` they wait, and go
as one statement a table (an ``executemany``; on PostgreSQL one of arrays,
``snl_pbem.store.unnest.insert_all``) before the next statement SQLAlchemy executes
on the transaction's connection (``Connection.execute``: a query, the session's flush, a
savepoint; ``bulk.insert_rows``'s driver SQL writes them first itself), or at the end. So
nothing reads the database without them, and they go in the order they were inserted (the
outbox's ids keep the order the mail was written in).

What changes is only where a failing row fails: at the next statement, not its own. Should
that statement's failure be caught and passed over (a savepoint that may fail, as a close's
"all orders in?" is), the block still fails at its end: rows were not written, and nothing
of the transaction may be committed without them. The intake's batches are written without
savepoints under ``deferring``, and written again with a savepoint each, not deferring,
should anything fail (``snl_pbem.app.intake.batch``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Table, event, insert
from sqlalchemy.orm import Session

from snl_pbem.store.unnest import insert_all

_PENDING = "snl_pbem.deferred_rows"
"""session.info: the rows waiting (``_Waiting``), while ``deferring``."""


class DeferredRowsFailed(Exception):
    """Rows written together were refused (the database's error is the cause)."""


class _Waiting:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.rows: dict[Table, list[dict[str, Any]]] = {}
        self.failed: BaseException | None = None

    def write(self) -> None:
        if not self.rows:
            return
        waiting = list(self.rows.items())
        self.rows.clear()  # first: the statements below come back through the listener
        try:
            for table, rows in waiting:
                insert_all(self.connection, table, rows)
        except BaseException as exc:
            self.failed = self.failed or exc
            raise


def insert_row(session: Session, table: Table, row: dict[str, Any]) -> None:
    """Insert ``row`` into ``table`` on the session's connection: at once, or within
    ``deferring`` before the next statement."""
    waiting: _Waiting | None = session.info.get(_PENDING)
    # the session's connection asked for first, as the statement would: a savepoint the
    # session has yet to begin (it begins one at its first use) begins now, so the row is
    # written within it and undone with it (what waited before is written before it)
    connection = session.connection()
    if waiting is None:
        connection.execute(insert(table), [row])
    else:
        waiting.rows.setdefault(table, []).append(row)


def write(session: Session) -> None:
    """Whatever rows wait, written now: one statement a table, each table's rows in the
    order they were inserted (for SQL that SQLAlchemy does not execute itself)."""
    waiting: _Waiting | None = session.info.get(_PENDING)
    if waiting is not None:
        waiting.write()


@contextmanager
def deferring(session: Session) -> Iterator[None]:
    """Rows given to ``insert_row`` wait for the next statement on the session's
    connection, or for the end of the block (written there, unless the block raised).
    Fails at the end if any writing of them failed, even one that was caught in the
    block: ``DeferredRowsFailed``, or the database's own error when the rows still waiting
    cannot be written either (PostgreSQL refuses every statement of a failed transaction)."""
    connection = session.connection()
    waiting = _Waiting(connection)

    def before(_conn: Connection, *_args: Any) -> None:
        waiting.write()

    session.info[_PENDING] = waiting
    event.listen(connection, "before_execute", before)
    try:
        yield
        waiting.write()
        if waiting.failed is not None:
            raise DeferredRowsFailed(
                f"rows written together were refused: {waiting.failed}"
            ) from waiting.failed
    finally:
        session.info.pop(_PENDING, None)
        event.remove(connection, "before_execute", before)
        waiting.rows.clear()
