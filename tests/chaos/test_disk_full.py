"""The disk full during a round close: the close fails cleanly (one transaction, no
half-written backup), the deadline is tried again, and it succeeds once there is room.

Two ways to fill the disk: a real one (a small tmpfs mounted for the test, filled with a
file; needs root and permission to mount, skipped otherwise) and SQLite's own page limit
(``max_page_count``), which gives the same error (SQLITE_FULL) anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from mailhelpers import T0, game_config
from sqlalchemy import event, func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import load_config
from snl_pbem.runners.scheduler import RoundScheduler, make_scheduler
from snl_pbem.store import Database, OutboxMessage, Round
from snl_pbem.store.migrate import upgrade

DEADLINE = T0.replace(year=2030, month=1, day=4, hour=18)


class Clock:
    def __init__(self, now=DEADLINE) -> None:
        self.now = now

    def __call__(self):
        return self.now


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "8m") -> Iterator[Path]:
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system to the last byte; returns the filler (delete it to make room)."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def started(folder: Path, backups: int) -> tuple[Database, object]:
    db = Database(f"sqlite:///{folder / 's.db'}")
    upgrade(db)
    path = folder / "c.toml"
    game_config(path, db.url)
    path.write_text(path.read_text().replace("[database]", f"[database]\nbackups = {backups}"))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    return db, config


def round_state(db: Database) -> tuple[str, int]:
    with db.transaction() as s:
        state = s.scalar(select(Round.state).where(Round.number == 1))
        mail = s.scalar(select(func.count()).select_from(OutboxMessage))
    return state, mail


def fails_then_retried(db: Database, config, make_room) -> None:
    """The deadline fires on a full disk: nothing changes, a retry is planned; after
    ``make_room()`` the retry closes the round."""
    before = round_state(db)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    rs = RoundScheduler(db, config, clock=Clock(), scheduler=scheduler)
    try:
        assert rs.on_deadline("g1", 1) is None
        assert rs.failures and "full" in rs.failures[0].lower(), rs.failures
        retry = scheduler.get_job("close:g1:1")
        assert retry.trigger.run_date == DEADLINE + timedelta(seconds=30)
        assert round_state(db) == before  # nothing half done: still open, no mail written
        make_room()
        outcome = rs.on_deadline("g1", 1)  # what the retry job runs
        assert outcome is not None and outcome.round == 1
        assert round_state(db)[0] == "closed" and round_state(db)[1] > before[1]
    finally:
        scheduler.shutdown(wait=False)


@pytest.mark.parametrize("backups", [3, 0], ids=["backup-first", "no-backups"])
def test_a_real_full_disk_during_a_close(tmp_path: Path, backups: int) -> None:
    """With backups on, the backup before the close hits the full disk first (and leaves no
    partial file); with them off, the close's own transaction does."""
    with small_disk(tmp_path / "disk") as disk:
        db, config = started(disk, backups)
        filler = fill(disk)
        try:
            fails_then_retried(db, config, filler.unlink)
            backups_left = sorted((disk / "backups").glob("*.sqlite"))
            assert len(backups_left) == (1 if backups else 0)  # only the retry's, complete
            for backup in backups_left:
                with sqlite3.connect(backup) as conn:
                    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
            db.dispose()
            with sqlite3.connect(disk / "s.db") as conn:
                assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        finally:
            db.dispose()


def test_sqlite_page_limit_during_a_close(tmp_path: Path) -> None:
    """The same through SQLite's max_page_count: the database may not grow by one page."""
    db, config = started(tmp_path, 0)
    with db.transaction() as s:
        pages = s.connection().exec_driver_sql("pragma page_count").scalar()
    db.engine.dispose()
    limit = {"pages": pages}

    @event.listens_for(db.engine, "connect")
    def _limit(dbapi_connection, _record) -> None:
        dbapi_connection.execute(f"pragma max_page_count = {limit['pages']}")

    def make_room() -> None:
        limit["pages"] = 1 << 30
        db.engine.dispose()  # new connections take the new limit

    fails_then_retried(db, config, make_room)
    db.dispose()
