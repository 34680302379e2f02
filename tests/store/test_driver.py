"""``Database.driver_transaction`` and ``insert_keyed``: the store of a group of messages on
the driver's own connection. What it writes, commits, refuses and waits for is what
SQLAlchemy's session and statements would: the same rows read back, the same errors, the
same turns for SQLite's write lock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from sqlalchemy import Table, insert, select, text
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

import snl_pbem.store.driver as driver_module
from snl_pbem.store import Database, InboundMessage
from snl_pbem.store.driver import insert_keyed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
INBOUND = cast(Table, InboundMessage.__table__)


def inbound_rows(prefix: str, n: int) -> list[dict[str, Any]]:
    """Rows as the store writes them, with what is awkward: NULLs, bytes with NUL and high
    bytes, Thai, quotes, another zone; ``status`` and ``attempts`` left to their defaults."""
    return [
        {
            "message_id": None if i % 4 == 0 else f"<{prefix}{i}@example.org>",
            "sha256": f"{prefix}{i:062d}"[:64],
            "source": "lmtp:127.0.0.1" if i % 2 else "imap:ผู้เล่น 'INBOX'",
            "uidvalidity": None if i % 2 else 7,
            "uid": None if i % 2 else 1000 * ord(prefix) + i,
            "received_at": (T0 + timedelta(microseconds=i)).astimezone(
                timezone(timedelta(hours=7))
            ),
            "raw": bytes([0, 255, 10, 13]) * i + b'\\x{}"',
            "error": None if i % 3 else "too large (…)",
            "sender": f"p{i}@example.org",
        }
        for i in range(n)
    ]


def read_back(db: Database, prefix: str) -> list[dict[str, Any]]:
    with db.transaction() as s:
        rows = s.execute(select(INBOUND).order_by(INBOUND.c.id)).mappings().all()
    out = [dict(r) for r in rows if r["sha256"].startswith(prefix)]
    for row in out:  # (what tells the prefixes' rows apart taken out)
        row.pop("id")
        row["sha256"] = row["sha256"][len(prefix) :]
        row["message_id"] = (row["message_id"] or "").replace(f"<{prefix}", "<")
        row["uid"] = None if row["uid"] is None else row["uid"] - 1000 * ord(prefix)
    return out


@pytest.mark.parametrize("unnested", [True, False])
def test_the_rows_written_are_sqlalchemys_own(db: Database, monkeypatch, unnested) -> None:
    """The same rows through SQLAlchemy's insert and through ``insert_keyed`` read back
    equal (values converted alike, defaults given alike), each id returned by its key, in
    the order given. On PostgreSQL both its statements: one of arrays (``unnested``), and
    one a row (where arrays cannot be)."""
    if not unnested:
        monkeypatch.setattr(driver_module, "unnested_insert", lambda *a: None)
    with db.transaction() as s:
        s.connection().execute(insert(INBOUND), inbound_rows("a", 12))
    with db.driver_transaction() as driver:
        ids = insert_keyed(driver, INBOUND, inbound_rows("b", 12), "sha256")
    assert read_back(db, "a") == read_back(db, "b")
    row = read_back(db, "b")[0]
    assert (row["status"], row["attempts"]) == ("new", 0)  # the columns' defaults
    with db.transaction() as s:
        by_key = {key: row_id for key, row_id in s.execute(select(INBOUND.c.sha256, INBOUND.c.id))}
    assert ids == {key: by_key[key] for key in ids} and len(ids) == 12
    assert sorted(ids.values()) == [ids[r["sha256"]] for r in inbound_rows("b", 12)]


def test_a_transaction_commits_or_leaves_nothing(db: Database) -> None:
    """Committed when the block ends; nothing of it when it raises."""
    with pytest.raises(RuntimeError), db.driver_transaction() as driver:
        insert_keyed(driver, INBOUND, inbound_rows("c", 2), "sha256")
        raise RuntimeError("after the insert")
    assert read_back(db, "c") == []
    with db.driver_transaction() as driver:
        insert_keyed(driver, INBOUND, inbound_rows("c", 2), "sha256")
    assert len(read_back(db, "c")) == 2


def test_the_databases_refusals_are_sqlalchemys_errors(db: Database) -> None:
    """A duplicate key is SQLAlchemy's IntegrityError, a value too long for PostgreSQL's
    column its DataError (the store tells a refused message from a database away by
    them), and the connection serves again after."""
    with db.driver_transaction() as driver:
        insert_keyed(driver, INBOUND, inbound_rows("d", 1), "sha256")
    with pytest.raises(IntegrityError), db.driver_transaction() as driver:
        insert_keyed(driver, INBOUND, inbound_rows("d", 1), "sha256")
    if not db.is_sqlite:
        too_long = inbound_rows("e", 1)
        too_long[0]["sender"] = "x" * 300
        with pytest.raises(DataError), db.driver_transaction() as driver:
            insert_keyed(driver, INBOUND, too_long, "sha256")
    with db.driver_transaction() as driver:
        insert_keyed(driver, INBOUND, inbound_rows("f", 1), "sha256")
    assert len(read_back(db, "d")) == len(read_back(db, "f")) == 1


def test_a_connection_the_database_dropped_is_not_used_again(db: Database) -> None:
    """PostgreSQL: the server ends the session mid-transaction. The error is SQLAlchemy's
    OperationalError, saying the connection was lost; the next transaction has another."""
    if db.is_sqlite:
        pytest.skip("SQLite has no server to drop the connection")
    with pytest.raises(OperationalError) as caught, db.driver_transaction() as driver:
        (pid,) = driver.rows("SELECT pg_backend_pid()", [])[0]
        with db.transaction() as s:
            s.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        driver.rows("SELECT 1", [])
    assert caught.value.connection_invalidated and driver.invalidated
    with db.driver_transaction() as again:
        assert again.rows("SELECT pg_backend_pid()", [])[0][0] != pid


def test_sqlite_transactions_take_turns_with_the_sessions(db: Database) -> None:
    """SQLite: a driver transaction holds the write lock's turn as a session's does. A
    session's transaction started meanwhile waits for its commit, and then sees its rows."""
    if not db.is_sqlite:
        pytest.skip("PostgreSQL's writers do not take turns")
    inside, seen = threading.Event(), []

    def other() -> None:
        inside.wait(30)
        with db.transaction() as s:
            seen.append(s.scalar(select(INBOUND.c.id).where(INBOUND.c.sha256.like("g%"))))

    thread = threading.Thread(target=other)
    thread.start()
    with db.driver_transaction() as driver:
        inside.set()
        thread.join(0.3)  # it waits for the turn (it would have read nothing otherwise)
        assert thread.is_alive() and not seen
        ids = insert_keyed(driver, INBOUND, inbound_rows("g", 1), "sha256")
    thread.join(30)
    assert seen == list(ids.values())


def test_a_database_away_is_sqlalchemys_operational_error_and_no_message_is_refused(
    caplog, tmp_path
) -> None:
    """No database at the address: taking the connection fails as a session's statement
    would, with SQLAlchemy's OperationalError (the source keeps the messages and retries),
    not the driver's own, which the store took for a refused message (it logged "could
    not be stored ... each alone" and tried each again)."""
    from mailhelpers import game_config

    from snl_pbem.app.intake.store import store_many

    away = Database("postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=5")
    config = game_config(tmp_path / "config.toml", away.url)
    with pytest.raises(OperationalError), away.driver_transaction():
        pass
    two = [(b"Subject: a\r\n\r\nx", T0, "t", None, None, None), (b"b", T0, "t", None, None, None)]
    with pytest.raises(OperationalError):
        store_many(away, config, two)
    assert not any("each alone" in r.getMessage() for r in caplog.records)
    away.dispose()


def test_a_statement_run_answers_on_either_database(db: Database) -> None:
    """``run``: SQLite's id of the row inserted; PostgreSQL's driver has no ``lastrowid``,
    and a statement run there answers None rather than failing."""
    with db.driver_transaction() as driver:
        assert driver.run("SELECT 1") is None or db.is_sqlite
        ids = insert_keyed(driver, INBOUND, inbound_rows("h", 1), "sha256")
        driver.run(
            f"UPDATE inbound_messages SET attempts = 1 WHERE id = {driver.mark}", [*ids.values()]
        )
    assert read_back(db, "h")[0]["attempts"] == 1
