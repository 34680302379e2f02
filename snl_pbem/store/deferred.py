"""Rows a batch of messages inserts, written together: each order of a batch inserts its
order set and its reply, two statements a message; within ``deferring`` they wait, and go
as one statement a table (an ``executemany``) before the next statement of any kind on the
transaction's connection, or at the end. So nothing can read the database without them:
whatever runs next, a query, the session's flush, a savepoint, finds them written, in the
order they were inserted (the outbox's ids keep the order the mail was written in).

What changes is only when a failing row fails: at the next statement, not its own. The
intake's batches are written without savepoints under ``deferring`` and written again with
a savepoint each, not deferring, should anything fail (``snl_pbem.app.intake.batch``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Table, event, insert
from sqlalchemy.orm import Session

_PENDING = "snl_pbem.deferred_rows"
"""session.info: {table: rows waiting}, while ``deferring``."""


def insert_row(session: Session, table: Table, row: dict[str, Any]) -> None:
    """Insert ``row`` into ``table`` on the session's connection: at once, or within
    ``deferring`` before the next statement."""
    pending: dict[Table, list[dict[str, Any]]] | None = session.info.get(_PENDING)
    if pending is None:
        session.connection().execute(insert(table), [row])
    else:
        pending.setdefault(table, []).append(row)


def write(session: Session) -> None:
    """Whatever rows wait, written now: one statement a table, each table's rows in the
    order they were inserted."""
    pending: dict[Table, list[dict[str, Any]]] | None = session.info.get(_PENDING)
    if not pending:
        return
    waiting = list(pending.items())
    pending.clear()  # first: the statements below come back through ``before``
    connection = session.connection()
    for table, rows in waiting:
        connection.execute(insert(table), rows)


@contextmanager
def deferring(session: Session) -> Iterator[None]:
    """Rows given to ``insert_row`` wait for the next statement on the session's
    connection, or for the end of the block (written there, unless the block raised)."""
    connection = session.connection()
    pending: dict[Table, list[dict[str, Any]]] = {}

    def before(_conn: Connection, *_args: Any) -> None:
        if pending:
            write(session)

    session.info[_PENDING] = pending
    event.listen(connection, "before_execute", before)
    try:
        yield
        write(session)
    finally:
        session.info.pop(_PENDING, None)
        event.remove(connection, "before_execute", before)
        pending.clear()
