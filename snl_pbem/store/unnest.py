"""Many rows inserted (or updated) by one statement on PostgreSQL: each column one array,
unnested.

Like :func:`snl_pbem.store.bulk.insert_rows` (plain tuples, one executemany), for the rows
the intake writes: dicts with dates, bytes and JSON, converted as SQLAlchemy converts them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    DateTime,
    Dialect,
    Integer,
    LargeBinary,
    String,
    Table,
    TypeDecorator,
    bindparam,
    insert,
    update,
)
from sqlalchemy.exc import StatementError
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.types import Enum, TypeEngine

from snl_pbem.rules.words import counted


def insert_all(
    connection: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    returning: Sequence[str] = (),
) -> list[tuple[Any, ...]]:
    """``INSERT`` ``rows`` (dicts by column key, each with the same keys) into ``table``,
    in their order (ascending ids); the ``returning`` columns of each row inserted, in no
    particular order. As SQLAlchemy's ``connection.execute(insert(table), rows)``: the
    same rows, the same Python-side defaults and type conversions, the same errors (a
    value too long for its column, a broken constraint).

    PostgreSQL (psycopg): one statement whatever the number of rows, each column one
    array parameter, unnested (``unnested_insert``), sent in binary (as text, an array of 100
    messages' bytes took 2.5 ms to write out). SQLAlchemy's statements were a row each (an
    executemany), or with ``returning`` one with a placeholder per value (1,100 for 100
    messages' rows), which psycopg parses anew at every execution (it caches statements
    of up to 50 parameters only). 100 stored messages' rows: 1.3 ms of the server's CPU
    against 5.3-5.7; 100 replies': 1.0 against 2.2-2.3. Elsewhere, or for a table with a
    column it does not send so, SQLAlchemy's own statement.

    On PostgreSQL it is driver SQL, which ``snl_pbem.store.deferred``'s listener does not
    see: in a session that defers rows, write them first (``deferred.write``). A string
    with a NUL, refused by psycopg before SQLAlchemy's statement is sent, is refused by
    the server here (the same ``DataError``; on PostgreSQL the transaction is then failed,
    as it is by any statement the server refuses)."""
    if not rows:
        return []
    unnested = unnested_insert(connection.dialect, table, rows, returning)
    if unnested is not None:
        sql, arrays = unnested
        result = connection.exec_driver_sql(sql, arrays)
        return [tuple(row) for row in result] if returning else []
    if returning:
        statement = insert(table).returning(*(table.c[name] for name in returning))
        return [tuple(row) for row in connection.execute(statement, list(rows))]
    connection.execute(insert(table), list(rows))
    return []


_ARRAY_SAFE = (Integer, String, LargeBinary, Boolean, DateTime, JSON)
"""The column types :func:`insert_all` and :func:`update_all` send as arrays (a
TypeDecorator by its ``impl``); rows with a column of another type go by SQLAlchemy's
statement."""


def unnested_insert(
    dialect: Dialect,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    returning: Sequence[str],
) -> tuple[str, tuple[list[Any], ...]] | None:
    """``INSERT INTO table (...) SELECT ... FROM unnest(%b, ...) WITH ORDINALITY ORDER BY``
    its ordinality, and its arrays (``_arrays``); None where that cannot be: not psycopg,
    a column left out whose default is not a constant, or as ``_arrays`` says."""
    if not _psycopg(dialect):
        return None
    keys = list(rows[0])
    extra = constant_defaults(table, keys)
    if extra is None:
        return None
    found = _arrays(dialect, table, rows, keys, extra)
    if found is None:
        return None
    columns, casts, arrays = found
    preparer = dialect.identifier_preparer
    quote = preparer.quote
    names = [quote(column.name) for column in columns]
    values_as = ", ".join(f"c{i}" for i in range(len(columns)))
    sql = (
        f"INSERT INTO {preparer.format_table(table)} ({', '.join(names)}) "
        f"SELECT {values_as} FROM unnest({', '.join(f'%b::{c}[]' for c in casts)}) "
        f"WITH ORDINALITY AS v({values_as}, n) ORDER BY n"
    )
    if returning:
        sql += " RETURNING " + ", ".join(quote(table.c[name].name) for name in returning)
    return sql, tuple(arrays)


def constant_defaults(table: Table, keys: Sequence[str]) -> dict[str, Any] | None:
    """The value each column of ``table`` not in ``keys`` is given, as SQLAlchemy's
    ``insert`` gives it: its default, where it has one; None when one of them is not a
    constant (a function, which a statement of our own does not call)."""
    found: dict[str, Any] = {}
    for column in table.columns:
        if column.key in keys or column.default is None:
            continue
        default: Any = column.default
        if not default.is_scalar:
            return None
        found[column.key] = default.arg
    return found


def update_all(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]], key: str = "id"
) -> None:
    """``UPDATE`` the rows of ``table`` that ``rows`` name by their ``key`` column (each a
    dict by column key, with the same keys: ``key``, and the columns to set to the values
    given). As SQLAlchemy's executemany of ``UPDATE ... WHERE key = :key``: the same
    conversions and errors; raises ``StaleDataError`` if a row named is not there, as the
    ORM's flush does. PostgreSQL (psycopg): one statement, ``UPDATE ... FROM unnest(...)``,
    as :func:`insert_all`'s (and as driver SQL, unseen by ``deferred``); elsewhere, or when
    a key is named twice, SQLAlchemy's."""
    if not rows:
        return
    names = [name for name in rows[0] if name != key]
    if not names:
        raise ValueError(f"update_all: nothing to set in {table.name}, only {key}")
    unnested = None
    if _psycopg(connection.dialect) and len({row[key] for row in rows}) == len(rows):
        found = _arrays(connection.dialect, table, rows, [key, *names], {})
        if found is not None:
            columns, casts, arrays = found
            preparer = connection.dialect.identifier_preparer
            quote = preparer.quote
            values_as = ", ".join(f"c{i}" for i in range(len(columns)))
            sets = ", ".join(f"{quote(c.name)} = v.c{i}" for i, c in enumerate(columns) if i)
            unnested = (
                f"UPDATE {preparer.format_table(table)} AS t SET {sets} "
                f"FROM unnest({', '.join(f'%b::{c}[]' for c in casts)}) AS v({values_as}) "
                f"WHERE t.{quote(columns[0].name)} = v.c0",
                tuple(arrays),
            )
    if unnested is not None:
        updated = connection.exec_driver_sql(*unnested).rowcount
    else:
        # (parameters named apart from every column: SQLAlchemy reserves the columns')
        statement = (
            update(table)
            .where(table.c[key] == bindparam("snl_key"))
            .values({name: bindparam(f"snl_set{i}") for i, name in enumerate(names)})
        )
        params = [
            {f"snl_set{i}": row[name] for i, name in enumerate(names)} | {"snl_key": row[key]}
            for row in rows
        ]
        updated = connection.execute(statement, params).rowcount
    if updated != len(rows):
        raise StaleDataError(
            f"UPDATE of {table.name} expected to update {counted(len(rows), 'row')}; "
            f"{updated} matched"
        )


def _psycopg(dialect: Dialect) -> bool:
    return dialect.name == "postgresql" and dialect.driver == "psycopg"


def _arrays(
    dialect: Dialect,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    keys: list[str],
    extra: Mapping[str, Any],
) -> tuple[list[Column[Any]], list[str], list[list[Any]]] | None:
    """The columns of ``keys`` (then those of ``extra``, a value for every row), the SQL
    type each one's array is cast to, and the arrays (each value as SQLAlchemy's bind
    processing gives it to psycopg); None where that cannot be: rows whose keys differ, a
    column of a type not in ``_ARRAY_SAFE``, a column whose values are not of one kind
    (``_one_kind``).

    Each array is cast to its column's type with no length (``TEXT[]`` for strings), and
    the value to the column by the statement's own assignment: an explicit cast to
    ``VARCHAR(n)`` would cut an over-long value short where the statement refuses it."""
    if any(len(row) != len(keys) or any(k not in row for k in keys) for row in rows):
        return None
    columns: list[Column[Any]] = []
    arrays: list[list[Any]] = []
    for key in keys:
        if key not in table.c:
            return None
        columns.append(table.c[key])
        arrays.append([row[key] for row in rows])
    for key, value in extra.items():
        columns.append(table.c[key])
        arrays.append([value] * len(rows))
    casts: list[str] = []
    for column, values in zip(columns, arrays, strict=True):
        cast = _array_cast(column.type, dialect)
        if cast is None:
            return None
        casts.append(cast)
        process = column.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            try:
                values[:] = [process(value) for value in values]
            except Exception as exc:  # (as SQLAlchemy's own statement reports it)
                raise StatementError(
                    f"({type(exc).__name__}) {exc}", f"{table.name}: {column.name}", None, exc
                ) from exc
        if not _one_kind(values, isinstance(_impl(column.type), JSON)):
            return None
    return columns, casts, arrays


def _one_kind(values: list[Any], json: bool) -> bool:
    """Whether psycopg sends ``values`` as an array SQLAlchemy's statement would take
    alike: one Python type (strings of several, such as an enum's and plain ones, are one
    to it), and no list, tuple or dict outside a JSON column (which it would send as an
    array of more dimensions, and unnest into more rows). Others go by SQLAlchemy's
    statement: one of ints and bools, say, is written there and refused here."""
    kinds = {type(value) for value in values}
    kinds.discard(type(None))
    if len(kinds) > 1 and not all(issubclass(kind, str) for kind in kinds):
        return False
    return json or not any(issubclass(kind, (list, tuple, dict, set)) for kind in kinds)


def _array_cast(type_: TypeEngine[Any], dialect: Dialect) -> str | None:
    """The SQL type an array of ``type_``'s values is cast to; None if not sent so."""
    impl = _impl(type_)
    if isinstance(impl, Enum) or not isinstance(impl, _ARRAY_SAFE):
        return None
    if isinstance(impl, String):
        return "TEXT"  # (no length: the statement checks it, a cast would cut the value)
    return impl.compile(dialect=dialect)


def _impl(type_: TypeEngine[Any]) -> TypeEngine[Any]:
    """The type a TypeDecorator decorates (``UTCDateTime``'s DateTime); another as it is."""
    return type_.impl_instance if isinstance(type_, TypeDecorator) else type_
