"""Several servers on one PostgreSQL share a deadline storm: a scheduled close
(``skip_locked``) skips a game another server is closing (``RoundBusy``), instead of
waiting for it; it still waits for intake's and the referee's short locks on the game row.
The round claim keeps each round closed exactly once (R17, R18: the no-orders defaults)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text

import snl_pbem.app.rounds as rounds
from snl_pbem.app.close_claim import claim_closing
from snl_pbem.app.lookup import game_by_name
from snl_pbem.app.rounds import RoundBusy, close_round
from snl_pbem.config import Config
from snl_pbem.store import Database, Round

HANG = 120.0
"""A hang detector only: every wait below ends on an event, never on a time."""

AFTER = datetime.now(UTC) + timedelta(days=30)  # past the fixture game's first deadline


class Run(threading.Thread):
    """``call`` on a thread of its own; its result or exception kept."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as exc:  # kept for the test to look at
            self.error = exc

    def outcome(self) -> Any:
        self.join(HANG)
        assert not self.is_alive(), "still running"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """A close on a thread named "paused" stops just before its commit (``reached`` set)
    until ``go`` is set: another server in the middle of closing the game."""
    reached, go = threading.Event(), threading.Event()
    real = rounds.crash_point

    def point(name: str, prepare: Callable[[], object] | None = None) -> None:
        if name == "close.before-commit" and threading.current_thread().name == "paused":
            reached.set()
            assert go.wait(HANG)
        real(name, prepare)

    monkeypatch.setattr(rounds, "crash_point", point)
    yield reached, go
    go.set()


def closing(db: Database, name: str = "", **kwargs: Any) -> Run:
    run = Run(lambda: close_round(db, "g1", AFTER, expect_round=1, **kwargs))
    if name:
        run.name = name
    run.start()
    return run


def waits_on_lock(db: Database, run: Run) -> None:
    """Until ``run`` waits for a lock (PostgreSQL says a session of the database does), or
    has ended (the caller's next check fails)."""
    event = threading.Event()
    while run.is_alive():
        with db.transaction() as s:
            waiting = s.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
            )
        if waiting:
            return
        event.wait(0.05)


def closed_rounds(db: Database) -> list[tuple[int, str]]:
    with db.transaction() as s:
        rows = s.execute(select(Round.number, Round.closed_by).where(Round.state == "closed"))
        return [(number, by) for number, by in rows]


postgresql_only = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@postgresql_only
def test_a_game_being_closed_is_skipped_at_once(
    intake: tuple[Database, Config], paused: tuple[threading.Event, threading.Event]
) -> None:
    db, _ = intake
    reached, go = paused
    first = closing(db, "paused", skip_locked=True, actor="server-a")
    assert reached.wait(HANG)
    # the first close is held before its commit: a second server skips the game ...
    with pytest.raises(RoundBusy) as busy:
        closing(db, skip_locked=True, actor="server-b").outcome()
    assert (busy.value.game_name, busy.value.number) == ("g1", 1)
    assert "being closed by another server" in str(busy.value)
    # ... and a close without skip_locked (the referee's close-round) waits for it
    referee = closing(db, actor="referee")
    waits_on_lock(db, referee)
    assert referee.is_alive()
    go.set()
    assert first.outcome() is not None
    assert referee.outcome() is None  # round 1 was closed meanwhile: not again
    assert closed_rounds(db) == [(1, "server-a")]


@postgresql_only
def test_a_server_killed_mid_close_leaves_the_round_to_the_next(
    intake: tuple[Database, Config],
) -> None:
    """The claim goes with the transaction: rolled back (its server died), the round is
    still open and the next try closes it."""
    db, _ = intake
    with pytest.raises(RuntimeError), db.transaction() as session:
        assert claim_closing(session, "g1", wait=False)
        with pytest.raises(RoundBusy):
            close_round(db, "g1", AFTER, expect_round=1, skip_locked=True)
        raise RuntimeError("the server dies")
    assert close_round(db, "g1", AFTER, expect_round=1, skip_locked=True) is not None
    assert closed_rounds(db) == [(1, "scheduler")]


@postgresql_only
def test_intake_holding_the_game_row_is_waited_for(intake: tuple[Database, Config]) -> None:
    """An order being stored locks the game row for a moment: the close waits for it (the
    order counts) rather than putting the round off as busy."""
    db, _ = intake
    holding, release = threading.Event(), threading.Event()

    def hold_row() -> None:
        with db.transaction() as session:
            game_by_name(session, "g1", lock=True)  # as intake locks it
            holding.set()
            assert release.wait(HANG)

    holder = Run(hold_row)
    holder.start()
    try:
        assert holding.wait(HANG)
        close = closing(db, skip_locked=True)
        waits_on_lock(db, close)
        assert close.is_alive(), close.error
    finally:
        release.set()
    holder.outcome()
    assert close.outcome() is not None
    assert closed_rounds(db) == [(1, "scheduler")]


def test_skip_locked_on_sqlite_closes_as_before(
    sqlite_intake: tuple[Database, Config],
) -> None:
    db, _ = sqlite_intake
    assert close_round(db, "g1", AFTER, expect_round=1, skip_locked=True) is not None
    assert close_round(db, "g1", AFTER, expect_round=1, skip_locked=True) is None
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(Round)) == 2
    assert closed_rounds(db) == [(1, "scheduler")]
