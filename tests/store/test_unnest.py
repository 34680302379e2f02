"""``insert_all``: many rows in one statement on PostgreSQL (each column one array,
unnested), SQLAlchemy's executemany elsewhere; the rows written, their order, their
defaults, what is returned and what is refused are SQLAlchemy's own ``insert``'s."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, event, insert, select
from sqlalchemy.exc import DataError, IntegrityError, StatementError
from sqlalchemy.orm.exc import StaleDataError

from snl_pbem.store import Database, InboundMessage, OutboxMessage
from snl_pbem.store.models import Game, OrderRecord, Player, Round
from snl_pbem.store.unnest import insert_all, update_all

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OUTBOX = cast(Table, OutboxMessage.__table__)
INBOUND = cast(Table, InboundMessage.__table__)
ORDERS = cast(Table, OrderRecord.__table__)


def outbox_rows(prefix: str, n: int) -> list[dict[str, Any]]:
    """Replies as the intake writes them, with what is awkward: NULLs (a whole column of
    them too), bytes with NUL and high bytes, Thai, quotes and braces, another zone."""
    return [
        {
            "game_id": None,
            "kind": "ack" if i % 3 else "report",
            "recipient": f"ผู้เล่น{i}@example.org" if i % 5 == 0 else f'"a{{b}}"{i}@x.org',
            "message_id": f"<{prefix}{i}@example.org>",
            "message": bytes([0, 255, 10, 13]) * i + b'\\x{}"',
            "next_attempt_at": T0 + timedelta(seconds=i),
            "created_at": (T0 + timedelta(microseconds=i)).astimezone(timezone(timedelta(hours=7))),
            "fingerprint": None if i % 2 else f"ab:{i}",
            "last_error": None,
        }
        for i in range(n)
    ]


def read_all(db: Database, table: Table, prefix: str = "") -> list[dict[str, Any]]:
    with db.transaction() as s:
        rows = s.execute(select(table).order_by(table.c.id)).mappings().all()
    out = [dict(r) for r in rows]
    for row in out:
        row.pop("id")
    return [r for r in out if prefix in str(r.get("message_id", ""))]


def test_the_rows_written_are_sqlalchemys_own(db: Database) -> None:
    """The same rows through both (defaults left out: status, attempts, secret), read
    back equal, in the order given."""
    with db.transaction() as s:
        s.connection().execute(insert(OUTBOX), outbox_rows("sa", 40))
    with db.transaction() as s:
        insert_all(s.connection(), OUTBOX, outbox_rows("un", 40))
    theirs, ours = read_all(db, OUTBOX, "<sa"), read_all(db, OUTBOX, "<un")
    assert len(ours) == 40
    for mine, its in zip(ours, theirs, strict=True):
        assert mine["message_id"].replace("<un", "<sa") == its["message_id"]
        assert {k: v for k, v in mine.items() if k != "message_id"} == {
            k: v for k, v in its.items() if k != "message_id"
        }
    assert ours[0]["status"] == "pending" and ours[0]["attempts"] == 0
    assert ours[0]["secret"] is False


def test_ids_follow_the_order_given(db: Database) -> None:
    """(PostgreSQL's unnest gives its elements in order as it is: the statement's ORDER BY
    makes it a guarantee, which this cannot tell from the present behaviour.)"""
    rows = outbox_rows("o", 500)
    with db.transaction() as s:
        insert_all(s.connection(), OUTBOX, rows)
    with db.transaction() as s:
        got = list(s.scalars(select(OutboxMessage.message_id).order_by(OutboxMessage.id)))
    assert got == [row["message_id"] for row in rows]


def test_returning_gives_each_rows_own_values(db: Database) -> None:
    rows = [
        {
            "message_id": None if i % 4 == 0 else f"<m{i}@x>",
            "sha256": f"{i:064x}",
            "source": "imap:INBOX",
            "uidvalidity": 2**40,
            "uid": i if i % 2 else None,
            "received_at": T0,
            "raw": b"\x00raw" * i,
            "status": "new",
            "error": None,
            "attempts": 0,
            "sender": None,
        }
        for i in range(120)
    ]
    with db.transaction() as s:
        found = insert_all(s.connection(), INBOUND, rows, ("sha256", "id"))
    with db.transaction() as s:
        stored = {d: i for d, i in s.execute(select(InboundMessage.sha256, InboundMessage.id))}
        raws = {d: r for d, r in s.execute(select(InboundMessage.sha256, InboundMessage.raw))}
    assert sorted(found) == sorted(stored.items())
    assert raws == {row["sha256"]: row["raw"] for row in rows}


def test_json_booleans_and_a_renamed_column(db: Database) -> None:
    """order_sets: JSON problems, booleans, the column ``trapdoor`` (the ORM's
    ``nomination``), and a default left out (``source``)."""
    with db.transaction() as s:
        s.add(
            game := Game(
                name="g", timezone="UTC", board={}, schedule={}, order_key_salt="s", created_at=T0
            )
        )
        s.flush()
        s.add(player := Player(game_id=game.id, name="ann", email="a@example.org", joined_at=T0))
        s.add(round_ := Round(game_id=game.id, number=1, turns=1, deadline=T0, opened_at=T0))
        s.flush()
        ids = (round_.id, player.id)
    rows = [
        {
            "round_id": ids[0],
            "player_id": ids[1],
            "inbound_id": None,
            "received_at": T0,
            "dice": "4 2",
            "trapdoor": None if i % 2 else 17,
            "valid": i % 3 == 0,
            "problems": [] if i % 2 else ["ไม่ถูกต้อง", {"line": i}],
            "withdrawn": False,
        }
        for i in range(6)
    ]
    with db.transaction() as s:
        insert_all(s.connection(), ORDERS, rows)
    with db.transaction() as s:
        got = s.execute(select(OrderRecord).order_by(OrderRecord.id)).scalars().all()
        seen = [(r.nomination, r.valid, r.problems, r.source) for r in got]
    assert seen == [(r["trapdoor"], r["valid"], r["problems"], "email") for r in rows]


@pytest.mark.parametrize("how", ["sqlalchemy", "insert_all"])
def test_what_is_refused_is_refused_alike(db: Database, how: str) -> None:
    """A value too long for its column (a cast to VARCHAR(n) would have cut it short,
    not refused it), a message id already there, a naive time: the same errors."""

    def put(rows: list[dict[str, Any]]) -> None:
        with db.transaction() as s:
            if how == "sqlalchemy":
                s.connection().execute(insert(OUTBOX), rows)
            else:
                insert_all(s.connection(), OUTBOX, rows)

    put(outbox_rows("a", 2))
    too_long = outbox_rows("b", 2)
    too_long[1]["kind"] = "k" * 33
    if not db.is_sqlite:  # (SQLite keeps any length)
        with pytest.raises(DataError):
            put(too_long)
    with pytest.raises(IntegrityError):
        put(outbox_rows("c", 2) + outbox_rows("a", 1))
    naive = outbox_rows("d", 2)
    naive[1]["created_at"] = datetime(2030, 1, 1)
    with pytest.raises(StatementError, match="naive datetime"):
        put(naive)
    assert {r["message_id"] for r in read_all(db, OUTBOX)} == {
        "<a0@example.org>",
        "<a1@example.org>",
    }


def test_on_postgresql_one_statement_of_one_text_whatever_the_rows(db: Database) -> None:
    statements: list[tuple[str, bool]] = []

    def seen(_c: Any, _cur: Any, statement: str, _p: Any, _ctx: Any, many: bool) -> None:
        statements.append((statement, many))

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        for n in (1, 7, 300):
            with db.transaction() as s:
                insert_all(s.connection(), OUTBOX, outbox_rows(f"n{n}-", n))
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
    inserts = [(text, many) for text, many in statements if "INSERT" in text]
    if db.is_sqlite:
        assert len(inserts) == 3 and all(many for _, many in inserts[1:])
        return
    assert len(inserts) == 3 and not any(many for _, many in inserts)
    assert len({text for text, _ in inserts}) == 1 and "unnest" in inserts[0][0]


def test_rows_of_different_keys_go_as_sqlalchemy_takes_them(db: Database) -> None:
    """Not every row with the same keys: SQLAlchemy's statement (which refuses them as it
    always did), not arrays of mismatched rows."""
    rows = outbox_rows("k", 3)
    del rows[2]["fingerprint"]
    with db.transaction() as s, pytest.raises(StatementError):
        insert_all(s.connection(), OUTBOX, rows)


def test_a_column_whose_key_is_not_its_name(db: Database) -> None:
    """Rows are given by column key; the statement names the column."""
    table = Table(
        "t_keyed",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("real_name", String(10), key="alias"),
    )
    table.create(db.engine)
    with db.transaction() as s:
        insert_all(s.connection(), table, [{"alias": "a"}, {"alias": "b"}])
    with db.transaction() as s:
        assert list(s.scalars(select(table.c.alias).order_by(table.c.id))) == ["a", "b"]


@pytest.mark.parametrize("how", ["sqlalchemy", "insert_all"])
def test_values_of_mixed_kinds_go_as_sqlalchemy_writes_them(db: Database, how: str) -> None:
    """A column of ints and bools, or of an enum's strings and plain ones: psycopg would
    not send the first as one array (SQLAlchemy's statement is used), the second it does."""
    from snl_pbem.store.states import MailKind

    rows = outbox_rows("mix", 4)
    for row, attempts in zip(rows, (True, 2, 0, 0), strict=True):
        row["attempts"] = attempts
    rows[2]["kind"] = MailKind.REPORT
    with db.transaction() as s:
        if how == "sqlalchemy":
            s.connection().execute(insert(OUTBOX), rows)
        else:
            insert_all(s.connection(), OUTBOX, rows)
    got = read_all(db, OUTBOX)
    assert [r["attempts"] for r in got] == [1, 2, 0, 0]
    assert [r["kind"] for r in got] == ["report", "ack", "report", "report"]


def test_a_list_where_one_value_belongs_is_refused_not_spread_over_rows(db: Database) -> None:
    """As an array it would be one of two dimensions, unnested into more rows (the other
    columns' padded with NULLs, which these columns allow)."""
    table = Table(
        "t_lists",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("n", Integer),
        Column("s", String(10)),
    )
    table.create(db.engine)
    with pytest.raises(StatementError), db.transaction() as s:
        insert_all(s.connection(), table, [{"n": [1, 2], "s": "a"}, {"n": [3, 4], "s": "b"}])
    with db.transaction() as s:
        assert list(s.execute(select(table))) == []


def test_update_all_sets_what_sqlalchemys_update_sets(db: Database) -> None:
    """Each row named by its id set to its own values (bytes, NULLs, Thai, a long note),
    the rows not named left as they were; on PostgreSQL one statement."""
    with db.transaction() as s:
        insert_all(s.connection(), OUTBOX, outbox_rows("u", 6))
    with db.transaction() as s:
        ids = list(s.scalars(select(OutboxMessage.id).order_by(OutboxMessage.id)))
    before = read_all(db, OUTBOX)
    changes = [
        {"id": ids[i], "status": "sent", "message": b"\x00scrubbed" * i, "last_error": e}
        for i, e in ((4, None), (1, "ผิดพลาด " * 200), (2, ""))
    ]
    statements: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        with db.transaction() as s:
            update_all(s.connection(), OUTBOX, changes)
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
    after = read_all(db, OUTBOX)
    expected = [dict(row) for row in before]
    for change in changes:
        row = expected[ids.index(change["id"])]
        row.update(status="sent", message=change["message"], last_error=change["last_error"])
    assert after == expected
    updates = [s for s in statements if s.startswith("UPDATE")]
    assert len(updates) == 1 and ("unnest" in updates[0]) != db.is_sqlite


def test_update_all_refuses_as_the_orm_does(db: Database) -> None:
    """A row named that is not there (the ORM's flush says StaleDataError), a value too
    long for its column; a key named twice goes by SQLAlchemy's statement (the last
    value holds, as there)."""
    with db.transaction() as s:
        insert_all(s.connection(), OUTBOX, outbox_rows("r", 2))
    with db.transaction() as s:
        ids = list(s.scalars(select(OutboxMessage.id).order_by(OutboxMessage.id)))
    with pytest.raises(StaleDataError), db.transaction() as s:
        update_all(
            s.connection(), OUTBOX, [{"id": ids[0], "status": "x"}, {"id": -1, "status": "y"}]
        )
    if not db.is_sqlite:
        with pytest.raises(DataError), db.transaction() as s:
            update_all(s.connection(), OUTBOX, [{"id": ids[0], "status": "s" * 17}])
    with db.transaction() as s:
        update_all(
            s.connection(), OUTBOX, [{"id": ids[1], "kind": "a"}, {"id": ids[1], "kind": "b"}]
        )
    assert [r["status"] for r in read_all(db, OUTBOX)] == ["pending", "pending"]
    assert [r["kind"] for r in read_all(db, OUTBOX)] == ["report", "b"]


def test_update_all_with_a_column_named_like_its_parameters(db: Database) -> None:
    """SQLAlchemy's statement (SQLite's) names its parameters apart from every column: a
    column ``key`` beside the key ``id`` gets its own value, not the id."""
    table = Table(
        "t_named",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("key", String(10)),
        Column("key_", String(10)),
    )
    table.create(db.engine)
    with db.transaction() as s:
        insert_all(s.connection(), table, [{"key": "a", "key_": "b"}])
        update_all(s.connection(), table, [{"id": 1, "key": "new", "key_": "new_"}])
        with pytest.raises(ValueError, match="nothing to set"):
            update_all(s.connection(), table, [{"id": 1}])
    with db.transaction() as s:
        assert [tuple(r) for r in s.execute(select(table))] == [(1, "new", "new_")]
