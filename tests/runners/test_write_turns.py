"""SQLite: a deadline storm's closes and the outbox's sender take turns at the write lock
(snl_pbem.app.turns). Closes that follow one another with no gap kept the sender,
which polls for SQLite's lock, out until the last round had closed: no report went out
during the storm. Now a close waits while a sender's transaction waits or runs, and a
sender's transaction waits while a close runs.

The checks wait on events; where one checks that something has NOT happened yet, it waits
a moment, so a slow machine can only make a broken gate pass, never a working one fail."""

from __future__ import annotations

import threading
from datetime import timedelta

from test_scheduler import DEADLINE, Clock, setup

from snl_pbem.app.turns import WriteTurns, write_turns
from snl_pbem.runners.scheduler import RoundScheduler, make_scheduler
from snl_pbem.store import Database, Round

MOMENT = 0.3


def in_thread(target) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        target()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def test_a_senders_transaction_waits_for_the_close_under_way() -> None:
    turns = WriteTurns()
    closing, release = threading.Event(), threading.Event()

    def close() -> None:
        with turns.closing():
            closing.set()
            release.wait(10)

    def send() -> None:
        with turns.sending():
            pass

    closer, _ = in_thread(close)
    assert closing.wait(10)
    _, sent = in_thread(send)
    assert not sent.wait(MOMENT)  # the close holds the lock: the sender waits its turn
    release.set()
    assert sent.wait(10)
    closer.join(10)


def test_the_next_close_waits_for_a_sender_waiting_or_writing() -> None:
    turns = WriteTurns()
    writing, release = threading.Event(), threading.Event()

    def send() -> None:
        with turns.sending():
            writing.set()
            release.wait(10)

    def close() -> None:
        with turns.closing():
            pass

    sender, _ = in_thread(send)
    assert writing.wait(10)
    _, closed = in_thread(close)
    assert not closed.wait(MOMENT)  # the sender's turn first
    release.set()
    assert closed.wait(10)
    sender.join(10)


def test_turns_only_on_sqlite(tmp_path) -> None:
    db, _ = setup(tmp_path)
    assert write_turns(db) is write_turns(db) is not None  # one per database
    other = Database(db.url)
    assert write_turns(other) is not write_turns(db)
    other.dispose()


def round_state(db: Database) -> str:
    with db.transaction() as s:
        return s.query(Round.state).filter(Round.number == 1).scalar()  # type: ignore[no-any-return]


def test_a_scheduled_close_waits_for_the_senders_transaction(tmp_path) -> None:
    """The scheduler's close of a due round starts only once a sender's transaction that
    waits or runs is over (the sender gets the lock between two closes of a storm)."""
    db, config = setup(tmp_path)
    clock = Clock(DEADLINE + timedelta(seconds=1))
    rs = RoundScheduler(db, config, clock=clock, scheduler=make_scheduler(1))
    turns = write_turns(db)
    assert turns is not None
    writing, release = threading.Event(), threading.Event()

    def send() -> None:
        with turns.sending():
            writing.set()
            release.wait(10)

    sender, _ = in_thread(send)
    assert writing.wait(10)
    _, closed = in_thread(lambda: rs.on_deadline("g1", 1))
    assert not closed.wait(MOMENT)
    assert round_state(db) == "open"
    release.set()
    assert closed.wait(30)
    assert round_state(db) == "closed"
    sender.join(10)
