"""Inserting many plain rows at once: one prepared statement, one DBAPI executemany.

For the big, simple tables written when a round closes (integers and text,
no type conversion), this is as fast as the driver can go; the ORM's per-row
bookkeeping would cost several times more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ARRAY, ColumnElement, all_, any_, bindparam
from sqlalchemy.orm import QueryableAttribute, Session

from snl_pbem.store import deferred
from snl_pbem.store.models import Base

_MARKERS = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": ":{n}"}


def insert_rows(
    session: Session, model: type[Base], columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    """``INSERT INTO table (columns) VALUES (...)`` for every row, in the session's transaction."""
    if not rows:
        return
    deferred.write(session)  # driver SQL passes by ``deferred``'s listener: what waits first
    table = Base.metadata.tables[model.__tablename__]
    connection = session.connection()
    style = connection.dialect.paramstyle
    if style not in _MARKERS:
        raise NotImplementedError(f"paramstyle {style}")
    marks = ", ".join(_MARKERS[style].format(n=i + 1) for i in range(len(columns)))
    for name in columns:
        table.c[name]
    quote = connection.dialect.identifier_preparer.quote
    sql = (
        f"INSERT INTO {quote(table.name)} ({', '.join(quote(c) for c in columns)}) VALUES ({marks})"
    )
    connection.exec_driver_sql(sql, list(rows))


def among(
    column: ColumnElement[Any] | QueryableAttribute[Any],
    values: Iterable[Any],
    *,
    sqlite: bool,
    negate: bool = False,
) -> ColumnElement[bool]:
    """``column IN (values)`` (``NOT IN`` with ``negate``). PostgreSQL: ``column = ANY(:a)``
    (``<> ALL``), one array parameter whatever the number of values, so the statement is
    the same text every time: an IN list of 200 ids is 200 placeholders that SQLAlchemy
    expands and psycopg converts anew on every execution, which cost the outbox's sender
    more than its SMTP work during a storm. SQLite has no arrays: an IN list there."""
    listed = list(values)
    if sqlite:
        return column.not_in(listed) if negate else column.in_(listed)
    array = bindparam(None, listed, type_=ARRAY(column.type))
    return column != all_(array) if negate else column == any_(array)


def among_param(
    column: ColumnElement[Any] | QueryableAttribute[Any], name: str, *, sqlite: bool
) -> ColumnElement[bool]:
    """:func:`among` with the values left to a parameter ``name``, given at execution: a
    statement built once and run many times (SQLite: an expanding IN list)."""
    if sqlite:
        return column.in_(bindparam(name, expanding=True))
    return column == any_(bindparam(name, type_=ARRAY(column.type)))
