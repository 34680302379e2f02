"""The readers are woken once for a group of messages queued together (``waking_once``),
and the reader woken wakes another for what it leaves: no message waits for a wake-up.

The readers' processing is replaced here by one that records which thread took which
messages and holds them until the test lets go: what is tested is who is woken, not the
reading (the LMTP and serve tests read real mail through the same path). Waits are bounded
by a hang detector, never by a speed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from snl_pbem.runners.mailboxes import GroupStore, Intake, Readers
from snl_pbem.timeutil import utcnow

HANG = 60.0
"""A hang detector, never a speed requirement."""


class Taken:
    """Stands in for ``Readers._process``: each batch taken is recorded with its thread and
    held until ``release``."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.changed = threading.Condition()
        self.released = threading.Event()

    def __call__(self, jobs: list[Any]) -> dict[int, Any]:
        with self.changed:
            self.batches.append((threading.current_thread().name, [j.inbound_id for j in jobs]))
            self.changed.notify_all()
        assert self.released.wait(HANG)
        return {job.inbound_id: RuntimeError("not read here") for job in jobs}

    def until(self, batches: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.batches) >= batches, HANG), self.batches


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> Any:
    taken = Taken()

    def make(**kwargs: Any) -> tuple[Readers, Taken]:
        r = Readers(in_order=0.0, pace=0.0, **kwargs)  # nothing waits on time here
        monkeypatch.setattr(r, "_process", taken)
        return r, taken

    yield make
    taken.released.set()


class Counting:
    """The readers' condition's ``notify``, counted."""

    def __init__(self, readers: Readers) -> None:
        self.count = 0
        self._notify = readers._cond.notify

        def notify(n: int = 1) -> None:
            self.count += 1
            self._notify(n)

        readers._cond.notify = notify  # type: ignore[method-assign]


class Waiting:
    """The readers waiting in their condition's ``wait``, counted (read with its lock held,
    as it is changed)."""

    def __init__(self, readers: Readers) -> None:
        self.count = 0
        self._readers = readers
        wait = readers._cond.wait

        def counted(timeout: float | None = None) -> bool:
            self.count += 1
            try:
                return wait(timeout)
            finally:
                self.count -= 1

        readers._cond.wait = counted  # type: ignore[method-assign]

    def all(self, n: int) -> bool:
        with self._readers._cond:
            return self.count == n


DB = object()  # the readers key their queue by the database's identity only


def test_a_group_queued_within_waking_once_wakes_one_reader_as_it_ends(readers) -> None:
    r, _ = readers(threads=4)
    r._paused = 1  # none taken: only the wake-ups are counted
    counting = Counting(r)
    with r.waking_once():
        for inbound_id in range(1, 8):
            r.submit(DB, None, inbound_id, size=500, sender=f"p{inbound_id}@example.org")  # type: ignore[arg-type]
        assert counting.count == 0
        with r.waking_once():  # nested: the outermost wakes
            r.submit(DB, None, 8, size=500, sender="p8@example.org")  # type: ignore[arg-type]
        assert counting.count == 0
    assert counting.count == 1
    r.submit(DB, None, 9, size=500, sender="p9@example.org")  # type: ignore[arg-type]
    assert counting.count == 2  # outside it, each wakes one, as before


def test_another_threads_message_is_not_held_back_by_one_waking_once(readers) -> None:
    r, _ = readers(threads=2)
    r._paused = 1
    counting = Counting(r)
    with r.waking_once():
        other = threading.Thread(
            target=r.submit, args=(DB, None, 1), kwargs={"size": 500, "sender": "a@example.org"}
        )
        other.start()
        other.join(HANG)
        assert counting.count == 1


def test_the_reader_woken_wakes_another_for_what_it_leaves(readers) -> None:
    """Three readers up and all three waiting; then five queued together, batches of two:
    the three take them side by side, the first woken by the group's one wake-up, each next
    by the reader before it (without that, the two others are never woken: the test hangs
    and fails)."""
    r, taken = readers(threads=3, batch=2)
    waiting = Waiting(r)
    for inbound_id in range(1, 4):  # the three readers started, then idle, waiting
        r.submit(DB, None, inbound_id, size=500, sender=f"p{inbound_id}@example.org")  # type: ignore[arg-type]
    taken.until(1)
    taken.released.set()
    deadline = time.monotonic() + HANG
    # every reader done with the batches before and waiting (not only idle: one still
    # finishing its batch, awake, would take some of the five on its own)
    while not (r.idle() and len(r._workers) == 3 and waiting.all(3)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    taken.released.clear()
    before = len(taken.batches)
    # held: none taken until all five are queued (the readers are waiting: ``waking_once``
    # would do, but held leaves no doubt; a reader still awake took the first ones alone
    # as they came, once, in a fresh clone, when the test waited for ``idle`` only)
    with r.held():
        assert waiting.count == 3
        for inbound_id in range(11, 16):
            r.submit(DB, None, inbound_id, size=500, sender=f"p{inbound_id}@example.org")  # type: ignore[arg-type]
    taken.until(before + 3)  # (each batch is held: three readers hold one at once)
    later = taken.batches[before:]
    assert sorted(ids for _, ids in later) == [[11, 12], [13, 14], [15]]
    assert len({name for name, _ in later}) == 3


def test_a_group_stores_tells_within_its_hold(sqlite_intake) -> None:
    """GroupStore tells a group's messages their outcomes within ``hold`` (the readers'
    ``waking_once``, given by the Intake), and lets go after."""
    db, config = sqlite_intake
    depth = [0]
    seen: list[int] = []

    class Hold:
        def __enter__(self) -> None:
            depth[0] += 1

        def __exit__(self, *_: object) -> None:
            depth[0] -= 1

    store = GroupStore(db, config, linger=0.0, hold=Hold)
    done = threading.Event()

    def told(outcome: Any, envelope: Any) -> None:
        assert not isinstance(outcome, BaseException), outcome
        seen.append(depth[0])
        done.set()

    raw = b"From: a@example.org\r\nMessage-ID: <w1@example.org>\r\n\r\nDICE 4\r\n"
    envelope = ("<w1@example.org>", "a@example.org")
    store.submit(lambda: ((raw, utcnow(), "test", None, None, None), envelope), told)
    assert done.wait(HANG)
    assert seen == [1] and depth[0] == 0


def test_the_intake_queues_an_lmtp_group_within_the_readers_waking_once(sqlite_intake) -> None:
    db, config = sqlite_intake
    r = Readers()
    intake = Intake(db, config, readers=r)
    assert intake._group._hold == r.waking_once
