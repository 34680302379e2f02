"""The database handle: engines tuned per backend and the one transaction helper.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and every
transaction begins IMMEDIATE, so concurrent writers wait for each other
instead of failing half-way. PostgreSQL is used as it comes, with row locks
where a state change must happen once (closing a round).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from snl_pbem.ownership import create_file, make_dirs
from snl_pbem.store.driver import Driver, connect

log = logging.getLogger("snl_pbem.store")

SQLITE_BUSY_TIMEOUT_MS = 30_000
READING = "snl_pbem_reading"
"""Execution option of the engine ``Database.reading`` uses (SQLite: BEGIN DEFERRED)."""


class SchemaOutOfDate(RuntimeError):
    """The database is not at the newest migration: run ``snl-pbem db upgrade``."""


def make_engine(url: str, *, sqlite_busy_ms: int = SQLITE_BUSY_TIMEOUT_MS, **kwargs: Any) -> Engine:
    """An engine for ``url``: SQLite gets WAL, a busy timeout, foreign keys, BEGIN IMMEDIATE."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **kwargs)
    if parsed.database and parsed.database != ":memory:":
        # Made here rather than by SQLite, so that a database (and its folders) created by
        # a command run as root belongs to the service (snl_pbem.ownership). SQLite gives
        # its -wal and -shm files the database file's owner by itself.
        make_dirs(Path(parsed.database).parent)
        create_file(Path(parsed.database))
    engine = create_engine(url, connect_args={"timeout": sqlite_busy_ms / 1000}, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={sqlite_busy_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=FULL")  # a committed order survives power loss
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # a reading transaction (``Database.reading``) takes no write lock: in WAL mode it
        # reads beside the writer
        deferred = connection.get_execution_options().get(READING)
        connection.exec_driver_sql("BEGIN DEFERRED" if deferred else "BEGIN IMMEDIATE")

    return engine


class _Turns:
    """A reentrant lock whose urgent waiters go first (``Database.transaction``). One not
    urgent waits while any urgent one does, for ``timeout`` at most: then it goes on
    without its turn (SQLite's own busy wait still orders it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owner: int | None = None
        self._depth = 0
        self._urgent = 0

    def acquire(self, urgent: bool, timeout: float) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            self._urgent += urgent
            try:
                if not self._cond.wait_for(
                    lambda: self._owner is None and (urgent or not self._urgent), timeout
                ):
                    return False
            finally:
                self._urgent -= urgent
            self._owner, self._depth = me, 1
            return True

    def release(self) -> None:
        with self._cond:
            self._depth -= 1
            if not self._depth:
                self._owner = None
                self._cond.notify_all()


class TransactionUndone(Exception):
    """A failure inside a transaction was caught and passed over, but it undid the
    transaction (a flush the database refused): nothing of it was committed."""

    def __init__(self, what: str = "the transaction") -> None:
        super().__init__(
            f"{what} was undone by a failure caught inside it (a write the database "
            "refused): nothing of it was committed"
        )


class Database:
    """One database: its engine and sessions. Only the edges call :meth:`transaction`."""

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        self.url = url
        self.engine = make_engine(url, **engine_kwargs)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._readers = sessionmaker(
            self.engine.execution_options(**{READING: True}), expire_on_commit=False
        )
        self._turns = _Turns() if self.is_sqlite else None
        self._wait = engine_kwargs.get("sqlite_busy_ms", SQLITE_BUSY_TIMEOUT_MS) / 1000

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def transaction(self, *, urgent: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on any error.

        SQLite: this process's threads take turns for the database's one write lock here,
        each handed it the moment the one before commits (left to SQLite, a thread finding
        the lock taken sleeps and looks again, up to 100 ms a time: under a flood of mail
        a store waited for a batch that had long committed). An ``urgent`` transaction (a
        message's store, which its sender's MTA waits for) goes before the others waiting.
        Other processes still wait as SQLite makes them: its busy timeout.

        Raises ``TransactionUndone`` when a failure inside it was caught and passed over
        but undid it (a flush that failed): nothing of it is committed, and the caller
        must know."""
        with self._turn(urgent), self._sessions() as session, session.begin():
            yield session
            if not session.is_active:  # else it would end quietly, committing nothing
                raise TransactionUndone()

    @contextmanager
    def _turn(self, urgent: bool) -> Iterator[None]:
        """SQLite: this process's turn for the write lock (``transaction``); elsewhere
        nothing."""
        turns = self._turns
        held = turns is not None and turns.acquire(urgent, self._wait)
        try:
            yield
        finally:
            if held:
                assert turns is not None
                turns.release()

    @contextmanager
    def driver_transaction(self, *, urgent: bool = False) -> Iterator[Driver]:
        """A transaction on the driver's own connection (``snl_pbem.store.driver``), for
        the hottest small transaction only: committed on success, rolled back on any error,
        taking its turn on SQLite as ``transaction`` does. No session, no ORM."""
        with self._turn(urgent):
            pooled = connect(self.engine)  # (its errors as SQLAlchemy's)
            driver = Driver(pooled.dbapi_connection, self.engine.dialect)
            try:
                driver.begin()
                yield driver
                driver.commit()
            except BaseException:
                with contextlib.suppress(Exception):  # (the error that got here is raised)
                    driver.rollback()
                if driver.invalidated:
                    pooled.invalidate()
                raise
            finally:
                pooled.close()

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session in one transaction that only reads. SQLite: it takes no write lock
        (BEGIN DEFERRED), so it neither waits for a writer nor holds one up, and it
        must not write. PostgreSQL: as ``transaction``."""
        if not self.is_sqlite:
            with self.transaction() as session:
                yield session
            return
        with self._readers() as session, session.begin():
            yield session

    @staticmethod
    def serialize(session: Session, name: str) -> None:
        """Hold a lock named ``name`` until the transaction ends, so that processes doing
        the same whole-table work (syncing the config) take turns. SQLite: every write
        transaction already holds the database's one write lock (BEGIN IMMEDIATE)."""
        if session.get_bind().dialect.name == "postgresql":
            digest = hashlib.sha256(name.encode()).digest()
            session.execute(
                text("SELECT pg_advisory_xact_lock(:key)"),
                {"key": int.from_bytes(digest[:8], "big", signed=True)},
            )

    def dispose(self) -> None:
        self.engine.dispose()

    def backup(self, directory: Path | None, label: str, keep: int) -> Path | None:
        """SQLite: an online backup into ``directory`` (default: backups/ beside the file).

        Keeps the newest ``keep`` backups; returns the new file, or None when there is
        nothing to do (PostgreSQL, an in-memory database, or keep == 0).
        """
        database = make_url(self.url).database
        if not self.is_sqlite or keep <= 0 or not database or database == ":memory:":
            return None
        source = Path(database)
        folder = directory or source.parent / "backups"
        make_dirs(folder)
        stamp = datetime.now().strftime("%Y%m%dT%H%M%S%f")
        target = folder / f"{source.stem}-{stamp}-{label}.sqlite"
        raw = self.engine.raw_connection()
        try:
            create_file(target)  # the service's owner and mode, even for a root command
            copy = sqlite3.connect(target)
            try:
                raw.driver_connection.backup(copy)  # type: ignore[union-attr]
            finally:
                copy.close()
        except BaseException:  # the disk full, say: leave no half-written backup behind
            target.unlink(missing_ok=True)
            raise
        finally:
            raw.close()
        backups = sorted(folder.glob(f"{source.stem}-*.sqlite"))
        for old in backups[: max(0, len(backups) - keep)]:
            old.unlink(missing_ok=True)
        log.info("backup written: %s", target)
        return target
