"""Wiring the mail intakes to the database: leases, health, ``ingest``, and the readers.

The IMAP poller and the LMTP receiver (``snl_pbem.mail``) know nothing of
the database; this module gives them what they call.

Both intakes go through one :class:`Intake`: it stores a message first, hands
it to :class:`Readers`, a few threads that have stored messages read (in the
sandbox) and processed in parallel, and tells each typed result to one
``on_result`` (the server's). Both work in batches where that costs little or no wait: an
IMAP fetch is stored in one transaction before it is moved; LMTP deliveries that arrive
while one is being written are written together next, by one writer thread
(:class:`GroupStore`; while several sessions deliver, a group waits a millisecond for
others), each answered 250 once committed; and the small messages queued behind the one
a reader takes are read in one sandbox round trip and processed in one transaction, a
savepoint each (``snl_pbem.app.intake.batch``). A message that runs to the sandbox's time limit
holds one reader for that long, never the mailbox or the messages after it. A round's close asks
the same readers for the messages received before its deadline and still
unread, and waits for them at most ``CLOSE_WAIT_SECONDS``
(``snl_pbem.runners.scheduler``).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from snl_pbem.app.intake import IngestResult
from snl_pbem.app.intake.batch import apply_batch, read_batch
from snl_pbem.app.intake.store import Incoming, store_many
from snl_pbem.app.mailbox_state import (
    ensure_state,
    record_failed_poll,
    record_good_poll,
    release_lease,
    take_lease,
)
from snl_pbem.config import Config
from snl_pbem.mail.imap import ImapPoller, MailboxConfig
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.mail.parse import envelope_of
from snl_pbem.mail.received import mta_receipt_time
from snl_pbem.mail.sandbox import MAX_WORKERS, PARSE_SECONDS
from snl_pbem.procs import dead_here, identity
from snl_pbem.runners.applier import Applier
from snl_pbem.store import Database
from snl_pbem.store.states import InboundStatus
from snl_pbem.timeutil import format_duration, utcnow

log = logging.getLogger("snl_pbem.mailboxes")

LEASE = timedelta(minutes=5)
IN_ORDER_SECONDS = 2.0
"""A message read for longer than this is slow: the readers take the next beside it. Under
``PARSE_SECONDS / MAX_WORKERS``, so a flood of slow messages still keeps every reader busy."""
SETTLE_SECONDS = 6 * PARSE_SECONDS
"""How long a poll waits, at most, for what it stored to be read before it goes on to the
next: ordinary mail is read in milliseconds and answered before, while a flood of slow
messages is read on behind it (and a deadline ends the wait at once)."""
ALWAYS_AWAITED_BYTES = 256 * 1024
"""A close waits for every message of at most this size received before its deadline, however
long the machine takes to read it: an order is a few hundred bytes, and reading grows
linearly with size (snl_pbem.mail.htmltext), so only a larger message can be slow of
itself. Whether to give up on a message never depends on how fast the machine is."""
KEPT_RESULTS = 1000
BATCH_MAX = 100
"""Messages processed in one transaction at most (``process_batch``): what has queued while
the previous batch was written, so a batch adds no wait; bounded so that a close waiting for
the game's lock, or another writer, waits for a short batch only. A batch costs about 13 ms
besides its messages (its transaction and commit, the game's lock and the read-ahead of its
senders' seats, what we sent them, the sandbox's round trip), so an IMAP fetch (``BATCH``
there, 100) is written in one: through Dovecot 1.3x the orders a second of batches of 25.
A batch of 100 orders is written in about 60 ms of a core (``apply_batch`` alone, SQLite;
25: 20 ms): what a close of its game usually waits for the lock (longer if the batch fails
and is written again); a close's own messages go first. Larger messages fill a batch by
their bytes first (``BATCH_TOTAL_BYTES``)."""
PACE_SECONDS = 0.1
"""While fewer messages than a batch (``BATCH_MAX``) are queued, a batch is taken this long
after the one before at the soonest, so what comes meanwhile joins it. At once: a close's
messages, a whole batch queued, a message that cannot join a batch (large, or of unknown
size), and a message that comes after a pause. LMTP's sessions deliver one message each at
a time, so its batches held what came while the one before was read and written (about
ten); each batch costs about 13 ms besides its messages, in the process that also answers
the sessions. Paced, they hold about forty: through LMTP 1.25-1.3x the orders a second on
SQLite, 1.13x on PostgreSQL (bench_ingest, whose clock then also counted the MTA's ending:
compare those with each other; with it corrected, 8 sessions, SQLite: 600 and 558 a second
at 0.1 s, 525 and 503 at 0.05, 573 and 595 at 0.2). Under such a flood a message's reply
waits up to this much longer; the MTA's answer (250) never waits for it: it is sent once
the message is stored."""
READ_AHEAD = 2
"""Batches read and waiting for their transaction (or in it) at most: the one being written
and the next, read meanwhile. (``Readers.waking_once`` wakes one thread for a group: a
thread waiting for its batch's turn may be the one woken, and at two that is only ever so
when no reader could take anything. With more it could be, and the group would wait for
the next batch done.)"""
BATCH_BYTES = 64 * 1024
"""Messages larger than this are read and processed alone (a large message may be slow to
read: it must not hold small ones); an order is a few hundred bytes."""
BATCH_TOTAL_BYTES = 12 * BATCH_BYTES
"""A batch's bytes at most: a batch's reading counts against ``IN_ORDER_SECONDS`` as a
whole, and reading grows with size, so a batch of the largest messages batched reads no
longer than it did when a batch held 25 read by two workers, half each (one reads it now:
``sandbox.Sandbox.parse_many``). 100 orders are about 60 KB; 100 replies quoting a report,
an HTML one especially, may be 6 MB."""


@dataclass(eq=False)
class _Job:
    db: Database
    config: Config
    inbound_id: int
    size: int
    sender: str
    urgent: bool = False
    started: float = 0.0
    finished: float = 0.0
    close_since: float | None = None
    """When a close first waited for this message (monotonic): its wait counts once."""
    turn: int = 0
    """Its batch's place in the order batches were taken: transactions go in that order."""
    read_at: float | None = None
    """When its batch was read (parsed): from then on it waits for its turn to be written."""
    future: Future[IngestResult] = field(default_factory=Future)


class Readers:
    """Stored messages read and processed in parallel, by ``threads`` threads.

    Each thread takes the next message and runs ``process_now`` on it (the sandbox bounds
    the reading, the row lock makes a second processing a no-op). Messages are taken in
    the order they were stored, and the next one only once the one taken last is done or
    has been read for ``IN_ORDER_SECONDS``: ordinary mail (milliseconds) is processed in
    order, as it comes (the last seat goes to the first JOIN), while slow messages are
    read side by side. One sender's messages follow the same rule and no other: the From
    address is forgeable, so slow messages 'from' a player must never hold her real ones.

    Messages a close waits for go first, the smallest first whoever sent them (an order
    is a few hundred bytes, a message slow to read is large), each sender's next once her
    one before it is done or has been read for ``IN_ORDER_SECONDS``. So within a close one
    sender's messages may be processed out of the order they came. That is safe for what
    a close counts: the orders that count are the latest by receipt time
    (``snl_pbem.app.state.counting_orders``), whatever the order they were processed in;
    CLEAR is an order set like the others; and a CONFIRM (of a JOIN, a RESIGN, an
    ADDRESS) carries a code the sender only has once the message before it was processed
    and answered. (ABSENT and ABSENT OFF in two messages that both wait for one close,
    the later the smaller, are the exception: the one read last holds, until the next.)
    A message asked for twice is read once (same future).

    A reader takes, with the message these rules choose, the small messages queued behind
    it in the same order (up to ``batch``; ``_batch``), and processes them in one
    transaction: what queued while the previous batch was written, so no message waits
    for a batch to fill. A batch is read (parsed in the sandbox, no lock taken) before its
    transaction, and the next batch is taken and read while one is written; for the rules
    above a batch read counts as done, and the transactions go in the order the batches
    were taken (``_turn_pause``), so ordinary mail is still applied in the order it came.
    A batch is taken ahead so only when a whole one is queued (an IMAP fetch); fewer (what
    LMTP's few sessions deliver meanwhile) are taken once the batch being written is done,
    with all that queued until then: taken ahead, LMTP's batches held half as many
    messages, each batch's fixed cost paid twice as often. And fewer than a whole batch are
    taken ``pace`` seconds after the batch before at the soonest (``PACE_SECONDS``): what
    comes meanwhile joins them. A close's messages never wait.
    """

    def __init__(
        self,
        threads: int = MAX_WORKERS,
        in_order: float = IN_ORDER_SECONDS,
        batch: int = BATCH_MAX,
        pace: float = PACE_SECONDS,
    ) -> None:
        self.threads = threads
        self.in_order = in_order
        self.batch = batch
        self.pace = pace
        self._taken_at = float("-inf")  # when the last batch was taken (monotonic)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queued: dict[tuple[int, int], _Job] = {}
        self._urgent: dict[tuple[int, int], _Job] = {}
        """The queued messages a close waits for (usually few)."""
        self._order: list[tuple[int, int]] = []
        """(inbound id, id(db)) of every queued message, in stored order, and of some taken
        since (passed over; dropped at the front as taking goes on, and all at once when they
        outnumber the queued): the head and what follows it found without sorting the queue,
        which cost the square of a backlog (``_stored_order``). (Readers serving several
        databases, as tests do, order the same id of two by the database, not by when each
        was queued.)"""
        self._running: dict[tuple[int, int], _Job] = {}
        self._workers: list[threading.Thread] = []
        self._names = itertools.count(1)
        self._turns = itertools.count(1)
        self._paused = 0
        self._waking = threading.local()
        """Per thread: within ``waking_once`` (depth), and a reader to wake as it ends (due)."""
        self.applier: Applier | None = None
        """What writes the batches read (``serve`` on PostgreSQL: ``snl_pbem.runners.applier``);
        None: ``apply_batch``, in this process."""

    def submit(
        self,
        db: Database,
        config: Config,
        inbound_id: int,
        *,
        size: int = 0,
        sender: str | None = None,
        urgent: bool = False,
    ) -> Future[IngestResult]:
        """Have stored message ``inbound_id`` read and processed; its result, later."""
        key = (id(db), inbound_id)
        with self._cond:
            job = self._queued.get(key) or self._running.get(key)
            if job is None:
                job = _Job(db, config, inbound_id, size, sender or f"#{inbound_id}")
                self._enqueue(key, job)
                self._start_worker()
                if getattr(self._waking, "depth", 0):
                    self._waking.due = True  # woken once, as ``waking_once`` ends
                else:
                    self._cond.notify()
            if urgent and not job.urgent:  # a close waits for it: it goes now (``_first``)
                job.urgent = True
                if key in self._queued:
                    self._urgent[key] = job
                self._cond.notify_all()
            return job.future

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the readers while several messages are submitted (``with readers.held():``):
        none is taken before all are queued, so they are read as one batch (and one reader
        is woken for them: ``waking_once``)."""
        with self._cond, self.waking_once():
            yield

    @contextlib.contextmanager
    def waking_once(self) -> Iterator[None]:
        """The messages this thread submits meanwhile wake one reader as it ends, not one
        each (that one wakes another if it leaves some: ``_work``). The LMTP store's writer
        queues a group so: a wake-up per message was a ninth of that thread's time. The
        readers are not held: those awake may take some meanwhile."""
        waking = self._waking
        depth = getattr(waking, "depth", 0)
        waking.depth = depth + 1
        try:
            yield
        finally:
            waking.depth = depth
            if not depth and getattr(waking, "due", False):
                waking.due = False
                with self._cond:
                    self._cond.notify()

    def submit_urgent(
        self, db: Database, config: Config, messages: dict[int, tuple[int, str | None]]
    ) -> dict[int, Future[IngestResult]]:
        """Have these messages ({id: (size, sender)}) read before any other, the smallest
        first (a close is waiting for them); all queued at once, so the order holds."""
        with self._cond:
            futures = {
                inbound_id: self.submit(
                    db, config, inbound_id, size=size, sender=sender, urgent=True
                )
                for inbound_id, (size, sender) in messages.items()
            }
            return futures

    def wait_for_close(
        self, db: Database, futures: dict[int, Future[IngestResult]], seconds: float
    ) -> list[int]:
        """Wait until these messages are read, or give up on those still unread once
        ``seconds`` have passed and the readers have stopped getting through ordinary mail
        (none of these read in under ``in_order`` seconds for that long). So ordinary
        mail, however much of it, is all read (it goes first: see the class), and slow
        messages add ``seconds`` at most. The time counts from when a close first waited
        for any of them: the closes of one deadline share it. Returns the ids unread."""
        now = time.monotonic()
        jobs: dict[Future[IngestResult], _Job] = {}
        start = now
        with self._cond:
            for inbound_id, future in futures.items():
                job = self._queued.get((id(db), inbound_id)) or self._running.get(
                    (id(db), inbound_id)
                )
                if job is not None:
                    job.close_since = job.close_since or now
                    start = min(start, job.close_since)
                    jobs[future] = job
        progress = start  # when one of them was last read quickly
        pending = {future: inbound_id for inbound_id, future in futures.items()}
        # a small message is always waited for (ALWAYS_AWAITED_BYTES): on a machine slow
        # enough that ordinary mail takes longer than in_order to read, the close is late,
        # never without the orders
        small = sum(1 for f, job in jobs.items() if job.size <= ALWAYS_AWAITED_BYTES)
        # each future hooked once, its completion queued: waiting on all those pending for
        # the first done, again for each one, hung a waiter on every one each time (the
        # square of a close's thousands)
        done: queue.SimpleQueue[Future[IngestResult]] = queue.SimpleQueue()
        for future in pending:
            future.add_done_callback(done.put)  # (put at once if done meanwhile)
        timeout: float | None = 0.0
        while pending:
            try:
                finished = [done.get(timeout=timeout)]
            except queue.Empty:
                finished = []
            with contextlib.suppress(queue.Empty):
                while True:
                    finished.append(done.get_nowait())
            now = time.monotonic()
            for future in finished:
                if pending.pop(future, None) is None:
                    continue
                job = jobs.get(future)
                if job is None:  # read before we looked
                    progress = max(progress, now)
                    continue
                small -= job.size <= ALWAYS_AWAITED_BYTES
                if job.finished - job.started < self.in_order:
                    progress = max(progress, job.finished)
            until = max(start + seconds, progress + self.in_order)
            if not pending or (now >= until and not small):
                break
            timeout = max(until - now, 0.0) if not small else max(min(until - now, 1.0), 0.2)
        return sorted(pending.values())

    def finish(self, seconds: float) -> bool:
        """At shutdown: take no new message and wait for those being read, ``seconds`` at
        most; True if none is left being read. What is queued stays stored, unprocessed,
        and is read at the next start (``process_pending``). Taken up again after."""
        until = time.monotonic() + seconds
        with self._cond:
            self._paused += 1
            try:
                while self._running and time.monotonic() < until:
                    self._cond.wait(until - time.monotonic())
                return not self._running
            finally:
                self._paused -= 1
                self._cond.notify_all()

    def idle(self) -> bool:
        """True when no message is waiting or being read (for tests and benchmarks)."""
        with self._cond:
            return not self._queued and not self._running

    def _start_worker(self) -> None:
        self._workers = [t for t in self._workers if t.is_alive()]
        if len(self._workers) < self.threads and len(self._workers) < len(self._queued) + len(
            self._running
        ):
            thread = threading.Thread(
                target=self._work, name=f"snl-pbem-reader-{next(self._names)}", daemon=True
            )
            self._workers.append(thread)
            thread.start()

    def _next(self) -> tuple[list[_Job] | None, float | None]:
        """The messages to read now, as one batch, or None and how long to wait before
        looking again (None: until something changes). The first is the one the rules
        below choose; small messages queued behind it join it, in the order they were
        stored (``_batch``)."""
        job, pause = self._first()
        if job is None:
            return None, pause
        return self._batch(job), None

    def _batch(self, first: _Job) -> list[_Job]:
        """``first`` and, when it is small, the small messages of the same database queued
        after it, in stored order, up to BATCH_MAX messages and BATCH_TOTAL_BYTES: one
        transaction for all of them (``process_batch``). A large message is read alone (it
        may be slow: see the class)."""
        if self.batch <= 1 or not 0 < first.size <= BATCH_BYTES:  # 0: size not known
            return [first]
        # her next waits for one still being read (a batch read waits for its turn: one
        # taken after it is written after it)
        busy = {job.sender for job in self._running.values() if job.read_at is None}
        # the order the rules above take them in: at a close the smallest first (its few
        # messages sorted), else stored order from ``first`` on (the queue's head: none
        # before it)
        if first.urgent:
            following: Iterable[_Job] = sorted(
                (j for j in self._urgent.values() if _smaller(first, j)),
                key=lambda j: (j.size, j.inbound_id),
            )
        else:
            following = self._stored_order((first.inbound_id, id(first.db)))
        batch, size = [first], first.size
        for job in following:
            if job is first or job.db is not first.db or job.urgent != first.urgent:
                continue
            if job.sender in busy:
                continue
            if len(batch) >= self.batch or not 0 < job.size <= BATCH_BYTES:
                break
            size += job.size
            if size > BATCH_TOTAL_BYTES:
                break
            batch.append(job)
        return batch

    def _enqueue(self, key: tuple[int, int], job: _Job) -> None:
        self._queued[key] = job
        entry, order = (job.inbound_id, key[0]), self._order
        if not order or entry > order[-1]:  # (stored order: nearly always)
            order.append(entry)
            return
        at = bisect.bisect_left(order, entry)
        if at == len(order) or order[at] != entry:  # (its entry may still stand, passed over)
            order.insert(at, entry)

    def _stored_order(self, after: tuple[int, int] | None = None) -> Iterator[_Job]:
        """The queued messages in stored order (those after the entry ``after`` only): the
        taken ones' entries are dropped as they are met at the front, and all at once when
        they outnumber the queued ones, so taking a batch costs its own messages, not the
        queue's. The caller holds the lock and changes nothing while it iterates."""
        order, queued = self._order, self._queued
        if len(order) > 2 * len(queued) + 1024:
            order[:] = [entry for entry in order if (entry[1], entry[0]) in queued]
        front = 0
        while front < len(order) and (order[front][1], order[front][0]) not in queued:
            front += 1
        del order[:front]
        start = 0 if after is None else bisect.bisect_right(order, after)
        for at in range(start, len(order)):
            job = queued.get((order[at][1], order[at][0]))
            if job is not None:
                yield job

    def _first(self) -> tuple[_Job | None, float | None]:
        if not self._queued or self._paused:
            return None, None
        now = time.monotonic()
        written = {job.turn for job in self._running.values() if job.read_at is not None}
        if len(written) >= READ_AHEAD:  # read batches wait for their turn: enough of them
            return None, None
        urgent = list(self._urgent.values())
        if written and not urgent and len(self._queued) < self.batch:
            return None, None  # ahead only a whole batch: else all that queues meanwhile, after
        fresh: dict[str, float] = {}  # sender: when her message read for under in_order began
        for job in self._running.values():
            if job.read_at is None and now - job.started < self.in_order:
                fresh[job.sender] = max(fresh.get(job.sender, job.started), job.started)
        if urgent:  # a close waits: its messages at once, the small first, whoever sent them
            ready = [job for job in urgent if job.sender not in fresh]
            if ready:
                return min(ready, key=lambda j: (j.size, j.inbound_id)), None
            return None, min(fresh[job.sender] for job in urgent) + self.in_order - now
        if fresh:  # in order, unless the one read last is slow
            return None, max(fresh.values()) + self.in_order - now
        head = next(self._stored_order())  # (every queued message has its entry)
        if (
            len(self._queued) < self.batch
            and now < self._taken_at + self.pace
            and 0 < head.size <= BATCH_BYTES  # (one that cannot join a batch gains nothing)
        ):
            return None, self._taken_at + self.pace - now  # paced: what comes meanwhile joins
        return head, None

    def _work(self) -> None:
        while True:
            with self._cond:
                jobs, pause = self._next()
                while jobs is None:
                    self._cond.wait(pause)
                    jobs, pause = self._next()
                self._take(jobs)
                if self._queued:  # (those it left may be another's: ``waking_once``)
                    self._cond.notify()
            outcomes = self._process(jobs)
            with self._cond:
                now = time.monotonic()
                for job in jobs:
                    job.finished = now
                    del self._running[(id(job.db), job.inbound_id)]
                self._cond.notify_all()
            for job in jobs:
                outcome = outcomes[job.inbound_id]
                if isinstance(outcome, BaseException):
                    log.error(
                        "inbound %d could not be processed (%s: %s); it stays stored, unprocessed",
                        job.inbound_id,
                        type(outcome).__name__,
                        outcome,
                    )
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)

    def _take(self, jobs: list[_Job]) -> None:
        """Move a batch from the queue to those being read (the lock held)."""
        now = time.monotonic()
        turn = next(self._turns)
        self._taken_at = now
        for job in jobs:
            key = (id(job.db), job.inbound_id)
            del self._queued[key]
            self._urgent.pop(key, None)
            job.started, job.turn = now, turn
            self._running[key] = job

    def _process(self, jobs: list[_Job]) -> dict[int, IngestResult | BaseException]:
        """Each job's outcome: the batch read (``read_batch``: parsed, no lock taken), then,
        once every batch taken before it is written or slow to read, written in one
        transaction (``apply_batch``; one message alone as ``process_now`` does). While a
        batch is written the next is read: the sandbox's parse and the transaction overlap,
        and the transactions still go in the order the batches were taken. An exception:
        the database away, it stays new."""
        first = jobs[0]
        try:
            read = read_batch(first.db, first.config, [job.inbound_id for job in jobs])
            with self._cond:
                now = time.monotonic()
                for job in jobs:
                    job.read_at = now
                self._cond.notify_all()  # the next batch may be taken and read meanwhile
                while (pause := self._turn_pause(first.turn)) != 0.0:
                    self._cond.wait(pause)
            applier = self.applier
            if applier is not None:  # (PostgreSQL: in a process of its own)
                return dict(applier.apply(first.db, first.config, read))
            return dict(apply_batch(first.db, first.config, read))
        except BaseException as exc:
            return {job.inbound_id: exc for job in jobs}

    def _turn_pause(self, turn: int) -> float | None:
        """0.0 when the batch taken as ``turn`` may be written: no batch taken before it is
        still to be written, unless it is being read and has been for ``in_order`` (slow
        mail never holds what comes after it); else how long to wait (None: until a batch
        is done or read)."""
        now = time.monotonic()
        pause: float | None = 0.0
        for job in self._running.values():
            if job.turn >= turn:
                continue
            if job.read_at is not None:
                return None
            left = job.started + self.in_order - now
            if left > 0:
                pause = left if not pause else min(pause, left)
        return pause


_readers: Readers | None = None
_readers_lock = threading.Lock()


def _smaller(first: _Job, job: _Job) -> bool:
    """Whether ``first`` goes before ``job`` at a close: the smaller first, then stored order."""
    return (first.size, first.inbound_id) < (job.size, job.inbound_id)


def default_readers() -> Readers:
    """The process's readers, shared by its intakes and its closes."""
    global _readers
    with _readers_lock:
        if _readers is None:
            _readers = Readers()
        return _readers


def read_stored(
    readers: Readers,
    db: Database,
    config: Config,
    result: IngestResult,
    raw: bytes,
    sender: str | None,
) -> Future[IngestResult]:
    """The future result of processing a message ``ingest(process=False)`` just stored (a
    message already known is done at once); ``sender``: its ``envelope_of``'s."""
    if result.status != InboundStatus.NEW or result.inbound_id is None:
        done: Future[IngestResult] = Future()
        done.set_result(result)
        return done
    return readers.submit(db, config, result.inbound_id, size=len(raw), sender=sender)


def settle(
    futures: Iterable[Future[IngestResult]],
    seconds: float,
    interrupt: threading.Event | None = None,
) -> bool:
    """Wait until these are done, ``seconds`` at most, or until ``interrupt`` is set
    (a deadline asks the poller to read the mailbox now); True if all are done.

    Each future is hooked once (a callback that counts it done), and the wait looks at
    ``interrupt`` every 0.2 s: linear in the futures however long they take. Waiting on
    all of them each time (``concurrent.futures.wait``) hung a waiter on every one still
    pending at each look: a poll of 30,000 after an outage, read over 10 s, cost the
    poller's thread 1.3 s of CPU (the GIL the readers need), against 0.04 s now."""
    pending = [f for f in futures if not f.done()]
    if not pending:
        return True
    all_done = threading.Event()
    left = len(pending)
    counting = threading.Lock()

    def one_done(_: Future[IngestResult]) -> None:
        nonlocal left
        with counting:
            left -= 1
            if left == 0:
                all_done.set()

    for future in pending:
        future.add_done_callback(one_done)  # (called at once if done meanwhile)
    until = time.monotonic() + seconds
    while not all_done.is_set():
        remaining = until - time.monotonic()
        if remaining <= 0 or (interrupt is not None and interrupt.is_set()):
            return False
        all_done.wait(min(remaining, 0.2))
    return True


Stored = tuple[IngestResult, tuple[bytes, str | None] | None]
"""A message stored (``store_many``'s outcome for it)."""
Envelope = tuple[str | None, str | None]
"""A message's Message-ID and sender (``envelope_of``)."""
Told = Callable[[Stored | BaseException, Envelope | None], object]
"""Told a message's outcome once its group is committed (or the exception that stopped
it), with its envelope (None if it was not read)."""


@dataclass(eq=False)
class _Waiting:
    prepare: Callable[[], tuple[Incoming, Envelope]]
    done: Told
    envelope: Envelope | None = None
    told: bool = False

    def tell(self, outcome: Stored | BaseException) -> None:
        if self.told:
            return
        self.told = True
        try:
            self.done(outcome, self.envelope)
        except Exception:  # the writer must never die of it
            log.exception("after storing a message")


LINGER_SECONDS = 0.0003
"""How long a group store waits for others to join it before it writes, when a group of
several was written within the last ``LINGER_WITHIN_SECONDS`` (``GroupStore``): several
sessions are delivering, and each of their messages would otherwise be written in a group
of two or three, each group a transaction (a store of one message is about 0.7 ms of the
process's CPU, of three 0.9). Eight sessions delivering 2,000 orders, the messages stored
and not read (a throwaway trial, SQLite, four runs each way): groups of 2.4-2.7 became
4.2-4.35, the process's CPU a message 0.99-1.11 ms became 0.81-0.90, and the messages stored
a second stayed as they were (874-1,026 without, 917-990 with).

It was 1 ms until issue 23's twenty-seventh session. Since a group's store and the
sessions' loop cost less, a group of eight sessions' messages gathers sooner: stored and
not read (3,000 orders, SQLite, taking turns), 3,250-3,350 a second at 0.3 ms against
2,370-2,790 at 1 ms, the process's CPU a message the same (0.216 ms against 0.205-0.220;
without lingering 2,970-3,040 a second at 0.32 ms). On SQLite every group waits while the
readers' transaction holds the write lock, so what is stored between their transactions
sets the pace: end to end (``bench_ingest --messages 3000``, three pairs) 1,001-1,031
orders a second against 931-993; on PostgreSQL, no difference (798-867 against 795-851)."""
LINGER_WITHIN_SECONDS = 0.1
"""A group store lingers only this soon after a group of several was written: a message
that comes after a pause, or while one session delivers alone, is written at once."""


WRITER_IDLE_SECONDS = 5.0
"""A group store's writer thread ends after this long with nothing to write, and starts
again with the next message (an Intake made and dropped leaves no thread behind)."""


class GroupStore:
    """Group commit for messages that come one by one (LMTP's sessions): one writer thread
    writes them, the first at once, alone; those that arrive while a group is being
    written are written together next, in one transaction (``store_many``). Soon after a
    group of several (``within`` seconds), a group waits ``linger`` seconds first for
    others to join it (``LINGER_SECONDS``); otherwise none waits for another to arrive.
    Each message is told its outcome only once it is committed (then its 250 may be sent).

    One writer, not the delivering threads taking turns to write: each message had held a
    thread of the receiver's executor, woken by the one that wrote its group, and woke the
    loop itself. ``bench_ingest`` (3,000 orders over eight LMTP sessions, three runs each
    way): SQLite 474-528 a second against 363-428, the process's CPU a message 1.26-1.41 ms
    against 1.62-2.05; PostgreSQL 351-441 against 257-367 (its clock then also counted the
    MTA's ending, until ``7dae74d``: compare these with each other)."""

    def __init__(
        self,
        db: Database,
        config: Config,
        linger: float = LINGER_SECONDS,
        within: float = LINGER_WITHIN_SECONDS,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        idle: float = WRITER_IDLE_SECONDS,
        hold: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        """``hold``: entered while a group's messages are told their outcomes (the
        readers' ``waking_once``, so that a group is queued for reading with one wake-up;
        not ``held``, whose lock the callbacks told would run under)."""
        self.db = db
        self.config = config
        self.linger = linger
        self.within = within
        self.idle = idle
        self._hold = hold
        self._sleep = sleep
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[_Waiting] = []
        self._writer: threading.Thread | None = None
        self._several_at = float("-inf")  # when a group of several was written last

    def submit(self, prepare: Callable[[], tuple[Incoming, Envelope]], done: Told) -> None:
        """Have a message written: ``prepare`` (run in the writer's thread, before its
        group: what it reads of the message costs the caller nothing) gives it and its
        envelope; ``done`` is told its outcome once its group is committed, or the
        exception that stopped it (``prepare``'s own, or the group's: the database away,
        none of it stored), in the writer's thread. Raises if no writer can be started."""
        waiting = _Waiting(prepare, done)
        with self._cond:
            self._queue.append(waiting)
            if self._writer is not None:
                self._cond.notify()
                return
            writer = threading.Thread(target=self._write, name="snl-pbem-store", daemon=True)
            try:
                writer.start()
            except BaseException:  # (out of threads): this one is refused, none is stranded
                self._queue.remove(waiting)
                raise
            self._writer = writer

    def store(self, message: Incoming, envelope: Envelope) -> Stored:
        """Store ``message`` (its ``envelope_of``: ``envelope``), with what comes
        meanwhile; return once it is committed."""
        outcome: list[Stored | BaseException] = []
        committed = threading.Event()

        def done(result: Stored | BaseException, _: Envelope | None) -> None:
            outcome.append(result)
            committed.set()

        self.submit(lambda: (message, envelope), done)
        committed.wait()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _write(self) -> None:
        batch: list[_Waiting] = []
        try:
            while True:
                with self._cond:
                    if not self._queue and not self._cond.wait_for(lambda: self._queue, self.idle):
                        self._writer = None  # (under the lock: the next ``submit`` starts one)
                        return
                if self.linger and self._clock() - self._several_at < self.within:
                    self._sleep(self.linger)  # others are delivering: they join this group
                with self._cond:
                    batch, self._queue = self._queue, []
                self._write_group(batch)
        except BaseException as exc:  # (a bug of ours): none may wait for ever
            log.exception("the store's writer stopped")
            with self._cond:
                self._writer, queued, self._queue = None, self._queue, []
            for waiting in [*batch, *queued]:
                waiting.tell(exc)  # (those told already are not told again)

    def _write_group(self, batch: list[_Waiting]) -> None:
        ready: list[_Waiting] = []
        messages: list[Incoming] = []
        envelopes: list[Envelope] = []
        for waiting in batch:
            try:
                message, waiting.envelope = waiting.prepare()
            except Exception as exc:  # that message alone is not stored
                waiting.tell(exc)
                continue
            ready.append(waiting)
            messages.append(message)
            envelopes.append(waiting.envelope)
        if not ready:
            return
        try:
            outcomes: list[Any] = list(store_many(self.db, self.config, messages, envelopes))
        except Exception as exc:  # the database away: none is stored
            outcomes = [exc] * len(ready)
        with self._hold():
            for waiting, outcome in zip(ready, outcomes, strict=True):
                waiting.tell(outcome)
        if len(ready) > 1:
            self._several_at = self._clock()


class Intake:
    """How a message that arrived, by IMAP or LMTP alike, enters: ``store`` stores it
    (``ingest(process=False)``: committed before the source is acknowledged) and hands it
    to the readers; ``told`` passes each outcome, once read, to ``on_result`` (the server
    plans what it says: a game started, a round all in)."""

    def __init__(
        self,
        db: Database,
        config: Config,
        *,
        readers: Readers | None = None,
        on_result: Callable[[IngestResult], None] | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.readers = readers or default_readers()
        self.on_result = on_result
        self._group = GroupStore(db, config, hold=self.readers.waking_once)

    def store(
        self,
        raw: bytes,
        received_at: datetime,
        source: str,
        *,
        uidvalidity: int | None = None,
        uid: int | None = None,
        size: int | None = None,
    ) -> tuple[IngestResult, Future[IngestResult]]:
        """Store one message and have it read: (the storing's result, the future result
        of its reading; a message already known is done at once)."""
        envelope = envelope_of(raw)  # read once: for the row, and for the readers
        result, _ = self._group.store((raw, received_at, source, uidvalidity, uid, size), envelope)
        return result, read_stored(self.readers, self.db, self.config, result, raw, envelope[1])

    def submit(
        self,
        raw: bytes,
        received_at: Callable[[], datetime],
        source: str,
        done: Callable[[tuple[IngestResult, Future[IngestResult]] | BaseException], object],
    ) -> None:
        """``store`` without waiting: ``done`` is called, in the store's writer thread,
        with what ``store`` returns, or with the exception it would raise. The receipt
        time (``received_at()``) and the envelope are read there too, just before the
        message's group is written: not in the caller's thread (the LMTP receiver's
        loop, which every session waits on)."""

        def prepare() -> tuple[Incoming, Envelope]:
            return (raw, received_at(), source, None, None, None), envelope_of(raw)

        def stored(outcome: Stored | BaseException, envelope: Envelope | None) -> None:
            if isinstance(outcome, BaseException):
                done(outcome)
                return
            assert envelope is not None  # (read before it was stored)
            result = outcome[0]
            try:
                reading = read_stored(self.readers, self.db, self.config, result, raw, envelope[1])
            except Exception as exc:  # (as ``store`` would raise it: the caller must be told)
                done(exc)
                return
            done((result, reading))

        self._group.submit(prepare, stored)

    def store_many(
        self, messages: list[Incoming]
    ) -> list[tuple[IngestResult, Future[IngestResult]]]:
        """``store`` for several messages, in one transaction (``store_many``): all are
        stored, and may be acknowledged, or (the database away: it raises) none."""
        envelopes = [envelope_of(raw) for raw, *_ in messages]  # once: the rows, the readers
        stored = store_many(self.db, self.config, messages, envelopes)
        with self.readers.held():  # all queued at once: read as one batch, not one by one
            return [
                (result, read_stored(self.readers, self.db, self.config, result, raw, sender))
                for (result, _), (raw, *_), (_, sender) in zip(
                    stored, messages, envelopes, strict=True
                )
            ]

    def told(self, future: Future[IngestResult]) -> IngestResult | None:
        """A message read: its outcome to ``on_result`` (None when its reading failed:
        logged by the reader; the message stays stored, unprocessed)."""
        if future.exception() is not None:
            return None
        result = future.result()
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception as exc:  # a reader thread must never die of it
                log.error("after reading a message: %s: %s", type(exc).__name__, exc)
        return result


class DatabaseHooks:
    """The IMAP poller's hooks, backed by the mailbox_state table and ``ingest``.

    A poll stores each message (in order; each is moved once committed) and hands it to
    the readers; at its end it waits for them to be read, ``SETTLE_SECONDS`` at most and
    no longer once a deadline asks for a new poll (``interrupt``, the poller's ``wake``):
    the poll that a close waits for is never held up by slow messages read before it.
    ``results`` holds each message's outcome in the order the poll stored them (those
    read later are added when read); each is told to ``intake`` (its ``on_result``) as
    it is known, as the LMTP receiver tells it (:class:`Intake`)."""

    def __init__(
        self,
        db: Database,
        config: Config,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
        *,
        readers: Readers | None = None,
        intake: Intake | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.clock = clock
        self.owner = owner or identity()
        self.intake = intake or Intake(db, config, readers=readers)
        self.interrupt: threading.Event | None = None
        """Set when the poll should stop waiting for its messages to be read."""
        self.results: deque[IngestResult] = deque(maxlen=KEPT_RESULTS)
        """The latest outcomes (for tests and logs; a running server is told by ``intake``)."""
        self._poll_started: datetime | None = None
        self._reading: list[Future[IngestResult]] = []

    def deliver(
        self,
        raw: bytes,
        source: str,
        uidvalidity: int,
        uid: int,
        arrived: datetime | None = None,
        size: int | None = None,
    ) -> bool:
        """Store one message; its receipt time is when our mail server received it (the
        mailbox's INTERNALDATE), so an outage of this server costs no order its deadline."""
        now = self.clock()
        received = min(arrived, now) if arrived is not None else now
        result, reading = self.intake.store(
            raw, received, source, uidvalidity=uidvalidity, uid=uid, size=size
        )
        self._reading.append(reading)
        return result.stored

    def deliver_many(
        self, items: list[tuple[bytes, str, int, int, datetime | None, int | None]]
    ) -> tuple[list[bool], Exception | None]:
        """Store a fetch's messages in one transaction (each as ``deliver`` does): whether
        each is stored, and the failure that stopped them (the database away: none is).
        A subclass with its own ``deliver`` is called once a message, as before."""
        if type(self).deliver is not DatabaseHooks.deliver:
            flags: list[bool] = []
            for raw, source, uidvalidity, uid, arrived, size in items:
                try:
                    flags.append(self.deliver(raw, source, uidvalidity, uid, arrived, size))
                except Exception as exc:
                    return flags, exc
            return flags, None
        now = self.clock()
        messages: list[Incoming] = [
            (raw, min(arrived, now) if arrived is not None else now, source, validity, uid, size)
            for raw, source, validity, uid, arrived, size in items
        ]
        try:
            stored = self.intake.store_many(messages)
        except Exception as exc:  # the database away: the fetch stays in the mailbox
            return [], exc
        self._reading.extend(reading for _, reading in stored)
        return [result.stored for result, _ in stored], None

    def _collect(self, seconds: float) -> None:
        """Wait for this poll's messages to be read (``seconds`` at most, or until
        interrupted), then move their outcomes to ``results`` in stored order; one still
        being read adds its outcome when read."""
        reading, self._reading = self._reading, []
        settle(reading, seconds, self.interrupt)
        for future in reading:
            if future.done():
                self._read(future)
            else:
                future.add_done_callback(self._read)

    def _read(self, future: Future[IngestResult]) -> None:
        if future.exception() is None:  # else logged by the reader; it stays stored
            self.results.append(future.result())
        self.intake.told(future)

    def acquire(self, source: str) -> bool:
        """Take the lease if it is free, ours, expired, or held by a dead process here.
        Called as each poll starts: that moment is what a good poll records."""
        ensure_state(self.db, source)
        now = self.clock()
        self._poll_started = now
        return take_lease(self.db, source, self.owner, now, now + LEASE, dead_here)

    def release(self, source: str) -> None:
        release_lease(self.db, source, self.owner)

    def healthy(self, source: str, uidvalidity: int) -> None:
        """A poll read the mailbox to its end: every message that reached it before the
        poll started is stored (and handed to the readers). ``last_ok_at`` is that start,
        so a round closes only once a poll that started after its deadline has completed;
        the close then has what is still unread read first (``CLOSE_WAIT_SECONDS``). The
        poll then waits for its messages to be read (see the class)."""
        now = self.clock()
        started = min(self._poll_started or now, now)
        record_good_poll(self.db, source, started, now, uidvalidity)
        self._collect(SETTLE_SECONDS)

    def failed(self, source: str, error: str) -> None:
        self._collect(0)
        record_failed_poll(self.db, source, error, self.clock())

    def uidvalidity_changed(self, source: str, old: int | None, new: int) -> None:
        log.warning("%s: UIDVALIDITY %s -> %s", source, old, new)


def imap_poller(
    db: Database, config: Config, hooks: DatabaseHooks | None = None, timeout: float = 30.0
) -> ImapPoller | None:
    """The poller for the configured mailbox, or None when none is configured."""
    imap = config.settings.mail.imap
    if imap is None:
        return None
    password = config.password(imap) or ""
    settings = MailboxConfig(
        host=imap.host,
        port=imap.port,
        tls=imap.tls,
        username=imap.username,
        password=password,
        folder=imap.folder,
        processed_folder=imap.processed_folder,
        poll_interval=imap.poll_interval.total_seconds(),
        timeout=timeout,
        max_message_size=config.settings.mail.max_message_size,
    )
    hooks = hooks or DatabaseHooks(db, config)
    poller = ImapPoller(settings, hooks)
    if isinstance(hooks, DatabaseHooks) and hooks.interrupt is None:
        hooks.interrupt = poller.wake  # a deadline's request for a poll ends the wait
    return poller


def lmtp_receipt_time(config: Config, raw: bytes, now: datetime) -> datetime:
    """When a message delivered over LMTP counts as received: when the MTA named by
    ``mta_hostname`` received it (its topmost ``Received:`` header, within
    ``max_queue_time``), else ``now``."""
    lmtp = config.settings.mail.lmtp
    if lmtp is None or lmtp.mta_hostname is None:
        return now
    at = mta_receipt_time(raw, lmtp.mta_hostname, now, lmtp.max_queue_time)
    if at is None:
        log.warning(
            "a message over LMTP has no Received header by %s dated within %s: timed at receipt",
            lmtp.mta_hostname,
            format_duration(lmtp.max_queue_time),
        )
        return now
    return at


def lmtp_receiver(
    db: Database,
    config: Config,
    clock: Callable[[], datetime] = utcnow,
    intake: Intake | None = None,
) -> ReceiverController | None:
    """The LMTP/SMTP receiver for the configured listener, or None when none is configured.
    Each message goes through ``intake`` as the IMAP poller's do (:class:`DatabaseHooks`)."""
    lmtp = config.settings.mail.lmtp
    if lmtp is None:
        return None
    through = intake or Intake(db, config)

    def submit(raw: bytes, source: str, done: Callable[[object], object]) -> None:
        """Store the message and have it read; the MTA is answered (250) once it is
        committed, as DESIGN's guarantee asks, not once it is read: a session that waited
        for the reading as well delivered one message per store and reading, so an MTA's
        few sessions held the intake to a small fraction of what the readers do with a
        mailbox's fetch. Its reading goes on beside the next delivery, judged by its
        receipt time; a close waits for it as for any message stored before its
        deadline. ``done``: its outcome, once committed (an exception: not stored)."""

        def stored(outcome: tuple[IngestResult, Future[IngestResult]] | BaseException) -> None:
            if isinstance(outcome, BaseException):
                done(outcome)
                return
            result, future = outcome
            if not result.stored:
                done(RuntimeError("message not stored"))
                return
            future.add_done_callback(through.told)  # told once read (at once if known already)
            done(result)

        now = clock()  # when it came; read against its Received headers in the writer
        through.submit(raw, lambda: lmtp_receipt_time(config, raw, now), source, stored)

    handler = GameAddressHandler(
        config.settings.mail.address, submit=submit, lmtp=lmtp.protocol == "lmtp"
    )
    return ReceiverController(
        handler,
        lmtp.host,
        lmtp.port,
        max_size=config.settings.mail.max_message_size,
        lmtp=lmtp.protocol == "lmtp",
        max_sessions=lmtp.max_sessions,
        idle_timeout=lmtp.idle_timeout.total_seconds(),
    )
