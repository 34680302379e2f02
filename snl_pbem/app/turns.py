"""SQLite: the closes and the outbox's senders of one process take turns at the write lock.

SQLite has one write lock, and a writer that finds it taken polls for it, sleeping up to
100 ms between tries. In a deadline storm the close worker's closes followed one another
with no gap, so the outbox's sender never got the lock: no report went out until the last
round had closed, and the sending, which could have run beside the closes (the GIL is free
while a close waits on the disk), came after them all. Here a close
(``snl_pbem.runners.scheduler``) waits while a sender's transaction (``snl_pbem.app.outbox``)
waits or runs, and a sender's transaction waits while a close runs. The intake and other
processes poll for the lock as before. PostgreSQL has row locks: no turns there.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from snl_pbem.store import Database

TURN_WAIT = 2.0
"""The longest a close or a sender's transaction waits for its turn (``WriteTurns``): a
safety net only; each waits for the other's one transaction."""


class WriteTurns:
    """The turns of one database's closes and senders in this process (see above)."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._closing = 0
        self._sending = 0

    @contextmanager
    def closing(self) -> Iterator[None]:
        """Around a close (its write transaction): after any sender's transaction waiting."""
        with self._turn:
            self._turn.wait_for(lambda: not self._sending, timeout=TURN_WAIT)
            self._closing += 1
        try:
            yield
        finally:
            with self._turn:
                self._closing -= 1
                self._turn.notify_all()

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Around a sender's transaction (a claim, the record of a batch)."""
        with self._turn:
            self._sending += 1
            self._turn.wait_for(lambda: not self._closing, timeout=TURN_WAIT)
        try:
            yield
        finally:
            with self._turn:
                self._sending -= 1
                self._turn.notify_all()


_TURNS: weakref.WeakKeyDictionary[Database, WriteTurns] = weakref.WeakKeyDictionary()
_TURNS_LOCK = threading.Lock()


def write_turns(db: Database) -> WriteTurns | None:
    """The turns of ``db``'s closes and senders in this process; None on PostgreSQL (row
    locks: no one write lock to share)."""
    if not db.is_sqlite:
        return None
    with _TURNS_LOCK:
        turns = _TURNS.get(db)
        if turns is None:
            turns = _TURNS[db] = WriteTurns()
        return turns


@contextmanager
def sending_turn(db: Database) -> Iterator[None]:
    """Around a sender's transaction: its turn on SQLite (``WriteTurns.sending``)."""
    turns = write_turns(db)
    if turns is None:
        yield
    else:
        with turns.sending():
            yield
