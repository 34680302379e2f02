"""The readers' batches written in a process of their own on PostgreSQL (issue 23:
``snl_pbem.runners.applier``). A batch is applied there as in ``serve`` (R1: each order
counts once), and should the process end with a batch in it, the batch is written again in
``serve`` and nothing of it is applied twice or lost. SQLite's stay in ``serve``."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mailhelpers import OPENED, T0, game_config, orders_of
from sqlalchemy import func, select

import snl_pbem.runners.applier as applier_module
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake.batch import read_batch
from snl_pbem.app.intake.store import store_many
from snl_pbem.runners.applier import Applier
from snl_pbem.runners.mailboxes import Readers, default_readers
from snl_pbem.runners.server import Server
from snl_pbem.store import Database, InboundMessage, OutboxMessage
from snl_pbem.store.migrate import upgrade

TAGS = itertools.count()
WAIT = 300.0
"""A hang detector, never a speed requirement."""


def stored(db: Database, config, names: tuple[str, ...] = ("ann", "bob", "cy")) -> list[int]:
    """Each player's orders stored, unprocessed (DICE 2, 3, 4 in turn)."""
    messages = [
        (
            (
                f"From: {name}@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
                f"Message-ID: <ap-{name}-{next(TAGS)}@example.org>\r\n\r\nKEY {name}-key-123\r\n"
                f"DICE {n}\r\n"
            ).encode(),
            T0,
            "test",
            None,
            None,
            None,
        )
        for n, name in enumerate(names, start=2)
    ]
    return [result.inbound_id for result, _ in store_many(db, config, messages)]


def statuses(db: Database) -> dict[int, str]:
    with db.transaction() as s:
        return dict(s.execute(select(InboundMessage.id, InboundMessage.status)).all())


def acks(db: Database) -> int:
    with db.transaction() as s:
        return s.scalar(select(func.count()).where(OutboxMessage.kind == "ack")) or 0


PG = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
"""A test of the process itself: on PostgreSQL only (the ``intake`` fixture's)."""


@pytest.fixture
def applier():
    made = Applier(logging.WARNING)
    yield made
    made.stop()


def test_a_batch_is_written_in_the_process_on_postgresql_and_here_on_sqlite(
    intake, applier: Applier, monkeypatch
) -> None:
    db, config = intake
    if not db.is_sqlite:  # the process writes it, not serve

        def not_here(*_args):
            raise AssertionError("written in serve")

        monkeypatch.setattr(applier_module, "apply_batch", not_here)
    ids = stored(db, config)
    results = applier.apply(db, config, read_batch(db, config, ids))
    assert [results[i].status for i in ids] == ["processed"] * 3
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "2"), ("bob", "3"), ("cy", "4")]
    assert acks(db) == 3
    if db.is_sqlite:  # the one write lock's turns are this process's threads': here
        assert applier.pid is None
    else:
        assert applier.pid is not None and applier.pid != os.getpid()
        assert applier._process.is_alive()
    # a message handled already is not applied again, wherever it is written
    again = applier.apply(db, config, read_batch(db, config, ids))
    assert [again[i].status for i in ids] == ["duplicate"] * 3
    assert len(orders_of(db)) == 3 and acks(db) == 3


def test_the_readers_hand_their_batches_to_the_applier(intake, applier: Applier) -> None:
    db, config = intake
    readers = Readers()
    readers.applier = applier
    ids = stored(db, config)
    with readers.held():  # one batch
        futures = [readers.submit(db, config, i, size=100, sender="x") for i in ids]
    assert [f.result(WAIT).status for f in futures] == ["processed"] * 3
    assert len(orders_of(db)) == 3
    assert (applier.pid is None) == db.is_sqlite


def held_row(db: Database, inbound_id: int):
    """A connection of its own holding ``inbound_id``'s row (FOR UPDATE) until it is closed:
    a batch holding that message waits, its transaction begun."""
    connection = db.engine.connect()
    connection.begin()
    connection.execute(
        select(InboundMessage.id).where(InboundMessage.id == inbound_id).with_for_update()
    )
    return connection


def waiting_for_a_lock(db: Database) -> bool:
    with db.engine.connect() as connection:
        return bool(
            connection.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).scalar()
        )


def until(condition, what: str) -> None:
    """Until ``condition()`` (a hang detector's WAIT at most)."""
    ends = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < ends, what
        time.sleep(0.02)


class KilledWithTheBatch(Applier):
    """The process killed with a batch in it: ``when(db, ids)`` says when (it returns
    once the moment has come); ``lost`` also throws away its answer, should it have
    written one (killed after its commit, before serve read its word)."""

    def __init__(self, when, lost: bool = False) -> None:
        super().__init__(logging.WARNING)
        self.when, self.lost = when, lost

    def _round_trip(self, pipe, db, config, batch):
        process = self._process

        def kill() -> None:
            self.when(db, batch.ids)
            os.kill(process.pid, signal.SIGKILL)
            process.join(WAIT)

        killer = threading.Thread(target=kill)
        killer.start()
        try:
            if self.lost:  # handed over, then its word (if written) gone with it

                def lost_word() -> None:
                    killer.join()
                    raise EOFError("its word lost")

                pipe.recv = lost_word
            return super()._round_trip(pipe, db, config, batch)
        finally:
            killer.join()


@PG
def test_a_batch_whose_process_ends_as_it_writes_is_written_here_once(
    intake, caplog, monkeypatch
) -> None:
    """Killed with its transaction begun (waiting for a row another holds): nothing of it
    is committed, and serve writes the batch: each message applied and answered once."""
    db, config = intake
    monkeypatch.setattr(applier_module, "RESTART_AFTER", WAIT)  # (no new process: here)
    ids = stored(db, config)
    holder = held_row(db, ids[1])

    def when_it_waits(db, ids) -> None:
        until(lambda: waiting_for_a_lock(db), "the process's transaction waiting for a lock")
        threading.Timer(0.2, holder.close).start()  # (the kill first: serve's write waits)

    applier = KilledWithTheBatch(when_it_waits)
    try:
        applier.start()
        assert applier.wait_ready(WAIT)
        with caplog.at_level(logging.ERROR, logger="snl_pbem.server"):
            results = applier.apply(db, config, read_batch(db, config, ids))
        assert "was killed by SIGKILL" in caplog.text
        assert "its batch of 3 is written in serve" in caplog.text
        assert [results[i].status for i in ids] == ["processed"] * 3
        assert all(status == "processed" for status in statuses(db).values())
        assert [(o.player, o.dice) for o in orders_of(db)] == [
            ("ann", "2"),
            ("bob", "3"),
            ("cy", "4"),
        ]
        assert acks(db) == 3
        # the next batch, within RESTART_AFTER of the last start: written here
        gone = applier._process
        more = stored(db, config, ("ann",))
        assert applier.apply(db, config, read_batch(db, config, more))[more[0]].status == (
            "processed"
        )
        assert applier._pipe is None and applier._process is gone
    finally:
        holder.close()
        applier.stop()


@PG
def test_a_batch_whose_process_ends_before_its_word_is_told_from_its_rows(
    intake, caplog, monkeypatch
) -> None:
    """Killed once it committed, its answer lost: serve finds the messages handled (none
    applied twice) and tells what their rows say, as if each may have filled the game or
    made its round all in (serve checks both)."""
    db, config = intake
    monkeypatch.setattr(applier_module, "RESTART_AFTER", WAIT)
    ids = stored(db, config)

    def when_committed(db, ids) -> None:
        until(lambda: all(statuses(db)[i] == "processed" for i in ids), "the batch committed")

    applier = KilledWithTheBatch(when_committed, lost=True)
    try:
        applier.start()
        assert applier.wait_ready(WAIT)
        with caplog.at_level(logging.ERROR, logger="snl_pbem.server"):
            results = applier.apply(db, config, read_batch(db, config, ids))
        assert "its batch of 3 is written in serve" in caplog.text
        assert [(results[i].status, results[i].game) for i in ids] == [("processed", "g1")] * 3
        assert all(results[i].all_in and results[i].started for i in ids)
        assert "ended before it answered" in results[ids[0]].detail
        assert len(orders_of(db)) == 3 and acks(db) == 3
    finally:
        applier.stop()


@PG
def test_a_stop_never_waits_on_a_batch_that_waits(intake, monkeypatch) -> None:
    """serve stopping while the process's batch waits for a row another holds: the stop
    kills it after its wait, whatever the row; the batch is left stored, unprocessed (read
    at the next start), and nothing is written in serve (stopped, it takes no batch)."""
    db, config = intake
    ids = stored(db, config)
    holder = held_row(db, ids[0])
    applier = Applier(logging.WARNING)
    outcome: list = []
    try:
        applier.start()
        assert applier.wait_ready(WAIT)
        batch = read_batch(db, config, ids)
        writer = threading.Thread(target=lambda: outcome.append(applier.apply(db, config, batch)))
        writer.start()
        until(lambda: waiting_for_a_lock(db), "the process's transaction waiting for a lock")
        stopper = threading.Thread(target=applier.stop, args=(0.5,))
        stopper.start()
        stopper.join(WAIT)
        assert not stopper.is_alive(), "the stop waited for the row's holder"
        writer.join(WAIT)
        assert not applier._process.is_alive()
    finally:
        holder.close()
    assert [type(outcome[0][i]) for i in ids] == [RuntimeError] * 3
    assert set(statuses(db).values()) == {"new"} and orders_of(db) == []
    # stopped: a late batch is written here, and no process is started again
    monkeypatch.setattr(applier_module, "RESTART_AFTER", 0.0)
    gone = applier._process
    results = applier.apply(db, config, read_batch(db, config, ids))
    assert [results[i].status for i in ids] == ["processed"] * 3
    assert applier._process is gone


@PG
def test_a_process_gone_between_batches_is_started_again(intake, applier, monkeypatch) -> None:
    db, config = intake
    applier.start()
    assert applier.wait_ready(WAIT)
    first = applier.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    applier._process.join(WAIT)
    monkeypatch.setattr(applier_module, "RESTART_AFTER", 0.0)
    ids = stored(db, config)
    results = applier.apply(db, config, read_batch(db, config, ids))
    assert [results[i].status for i in ids] == ["processed"] * 3
    assert applier.pid not in (None, first) and applier._process.is_alive()


def test_serve_on_postgresql_writes_its_batches_in_a_process_of_its_own(
    tmp_path: Path, postgres
) -> None:
    """Started, serve's readers write through its applier; stopped, the process is gone and
    the readers write in serve again."""
    config = tmp_path / "config.toml"
    db = Database(postgres.url(postgres.create_database()))
    upgrade(db)
    loaded = game_config(config, db.url)
    sync_games(db, loaded, T0)
    start_game(db, loaded, "g1", OPENED)
    server = Server(config)
    thread = threading.Thread(target=server.serve_forever, kwargs={"install_signals": False})
    thread.start()
    try:
        assert server.ready.wait(WAIT)
        applier = server._applier
        assert applier is not None and default_readers().applier is applier
        assert applier.pid is not None and applier._process.is_alive()
        ids = stored(db, loaded, ("ann", "bob"))
        with default_readers().held():
            futures = [default_readers().submit(db, loaded, i, size=100) for i in ids]
        assert [f.result(WAIT).status for f in futures] == ["processed"] * 2
    finally:
        server.stop_event.set()
        thread.join(WAIT)
        db.dispose()
    assert not thread.is_alive()
    assert not applier._process.is_alive() and default_readers().applier is None


@PG
def test_a_batch_that_cannot_be_handed_over_is_written_here(
    intake, applier, monkeypatch, caplog
) -> None:
    db, config = intake
    applier.start()

    def refuse(*_args, **_kwargs):
        raise TypeError("cannot pickle '_thread.lock' object")

    # (the applier's pickling only: the sandbox's and the pipes' own are left alone)
    monkeypatch.setattr(applier_module, "pickle", SimpleNamespace(dumps=refuse))
    ids = stored(db, config)
    with caplog.at_level(logging.ERROR, logger="snl_pbem.server"):
        results = applier.apply(db, config, read_batch(db, config, ids))
    assert [results[i].status for i in ids] == ["processed"] * 3
    assert "could not be handed over (TypeError: cannot pickle" in caplog.text
    assert applier._process.is_alive()  # the process is left as it was, for the next
