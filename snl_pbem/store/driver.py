"""A transaction on the database driver's own connection: statements sent as written.

For one small transaction run thousands of times an hour and nothing else: the store of a
group of messages LMTP delivered meanwhile (``snl_pbem.app.intake.store``), which each of
their MTA sessions waits for before its ``250``. Through SQLAlchemy's session and compiled
statements a group of seven cost 0.85 ms of the server's CPU on SQLite; on the driver's
connection (``Database.driver_transaction``), the same statements 0.39.

What stays as it was: the transaction (SQLite: ``BEGIN IMMEDIATE``, this process's threads
taking turns for the write lock as ``Database.transaction``'s do; PostgreSQL: the driver's
own), the values as SQLAlchemy converts them (each column's bind processing, its constant
default when left out), and the errors as SQLAlchemy raises them (``IntegrityError``,
``OperationalError``, ``DataError``: ``sqlalchemy.exc.DBAPIError.instance``), so that a
caller handles them alike. A connection the database dropped is not put back in the pool.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from sqlalchemy import Dialect, Engine, PoolProxiedConnection, Table
from sqlalchemy.exc import DBAPIError

from snl_pbem.store.unnest import constant_defaults, unnested_insert


class Driver:
    """Statements on one DBAPI connection, in the transaction ``Database.driver_transaction``
    holds. ``mark`` is the driver's placeholder (``?`` or ``%s``)."""

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        self.connection = connection
        self.dialect = dialect
        self.sqlite = dialect.name == "sqlite"
        self.mark = "?" if dialect.paramstyle == "qmark" else "%s"
        self.invalidated = False
        """The database dropped the connection (it must not go back to the pool)."""

    def rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows ``sql`` selects (or returns)."""
        with self._translated(sql, params) as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> int | None:
        """Run ``sql``; on SQLite the id of the row it inserted (its ``lastrowid``; None
        elsewhere: ``RETURNING`` it, with ``rows``)."""
        with self._translated(sql, params) as cursor:
            cursor.execute(sql, params)
            row_id = getattr(cursor, "lastrowid", None)  # (psycopg's cursors have none)
            return int(row_id) if row_id is not None else None

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column IN (values)``: its SQL and parameters. PostgreSQL: ``= ANY(%s)``, one
        array whatever the number of values (one statement text, parsed once)."""
        if self.sqlite:
            return f"{column} IN ({', '.join([self.mark] * len(values))})", list(values)
        return f"{column} = ANY({self.mark})", [list(values)]

    @contextmanager
    def _translated(self, sql: str, params: Sequence[Any]) -> Iterator[Any]:
        base = self.dialect.loaded_dbapi.Error
        cursor = None
        try:
            cursor = self.connection.cursor()
            yield cursor
        except base as exc:
            lost = self.dialect.is_disconnect(exc, self.connection, cursor)
            self.invalidated = self.invalidated or lost
            raise DBAPIError.instance(
                sql, params, exc, base, connection_invalidated=lost, dialect=self.dialect
            ) from exc
        finally:
            if cursor is not None:
                with suppress(base):
                    cursor.close()

    def begin(self) -> None:
        if self.sqlite:  # (PostgreSQL's driver begins by itself, at the first statement)
            self.run("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self.sqlite:
            self.run("COMMIT")
        else:
            with self._translated("COMMIT", ()):
                self.connection.commit()

    def rollback(self) -> None:
        if self.sqlite:
            if self.connection.in_transaction:
                self.run("ROLLBACK")
        else:
            with self._translated("ROLLBACK", ()):
                self.connection.rollback()


def connect(engine: Engine) -> PoolProxiedConnection:
    """A connection from ``engine``'s pool, as ``raw_connection`` gives it, its driver's
    errors raised as SQLAlchemy's (the database away: ``OperationalError``), as a
    session's first statement raises them."""
    dialect = engine.dialect
    base = dialect.loaded_dbapi.Error
    try:
        return engine.raw_connection()
    except base as exc:
        lost = dialect.is_disconnect(exc, None, None)
        raise DBAPIError.instance(
            None, None, exc, base, connection_invalidated=lost, dialect=dialect
        ) from exc


def insert_keyed(
    driver: Driver, table: Table, rows: Sequence[Mapping[str, Any]], key: str
) -> dict[Any, int]:
    """``INSERT`` ``rows`` (dicts by column key, each with the same keys) into ``table`` in
    their order; each new row's ``id`` by its ``key`` column's value (unique to each row).
    The values converted as SQLAlchemy's statement converts them, a column left out given
    its constant default. PostgreSQL (psycopg): one statement, each column one array
    (``unnested_insert``); SQLite: one prepared statement a row (its ``lastrowid``)."""
    if not rows:
        return {}
    dialect = driver.dialect
    unnested = unnested_insert(dialect, table, rows, (key, "id"))
    if unnested is not None:
        sql, arrays = unnested
        return {found: int(row_id) for found, row_id in driver.rows(sql, arrays)}
    names = list(rows[0])
    defaults = constant_defaults(table, names)
    if defaults is None:
        raise TypeError(f"{table.name}: a column left out whose default is not a constant")
    keys = names + list(defaults)
    processors = [table.c[k].type.dialect_impl(dialect).bind_processor(dialect) for k in keys]
    quote = dialect.identifier_preparer.quote
    returning = " RETURNING id" if not driver.sqlite else ""
    sql = (
        f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
        f"({', '.join(quote(table.c[k].name) for k in keys)}) "
        f"VALUES ({', '.join([driver.mark] * len(keys))}){returning}"
    )
    found: dict[Any, int] = {}
    for row in rows:
        values = [row[k] if k in row else defaults[k] for k in keys]
        values = [v if p is None else p(v) for p, v in zip(processors, values, strict=True)]
        if driver.sqlite:
            row_id = driver.run(sql, values)
        else:
            ((row_id,),) = driver.rows(sql, values)
        assert row_id is not None
        found[row[key]] = int(row_id)
    return found
