"""Benchmark: the intake under a backlog (an IMAP poll after an outage, a deadline's close
waiting for thousands of messages): the readers' queue and the two waits on it, linear in
the messages, not in their square (issue 23).

Three parts, each at two sizes, each beside a baseline run in the same process that does
the same thing the way the server did before:

- **Taking a backlog's batches** (``Readers._next`` and ``_take``, nothing read): the CPU a
  message. Baseline: the queue sorted for each batch (its head the smallest id queued).
- **A poll's wait for its messages** (``settle``), done one by one at a steady rate: the
  waiting thread's CPU. Baseline: ``concurrent.futures.wait`` on all those pending, every
  0.2 s.
- **A close's wait for its messages** (``Readers.wait_for_close``), likewise. Baseline:
  ``wait(..., FIRST_COMPLETED)`` on all those pending, again for each one done.

Goal: the cost a message at the larger size within 1.5x that at the smaller (the
baselines show the square: ten times the messages, ten times the cost a message).

Run: .venv/bin/python tests/benchmarks/bench_backlog.py [--sizes 3000,30000]
     [--close-sizes 500,5000] [--rate 3000]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[2]))

from snl_pbem.runners.mailboxes import Readers, settle
from snl_pbem.store import Database

BATCH = 100
BUSY: list[float] = []
"""The waiting thread's CPU as a share of each wait (the GIL the readers need meanwhile)."""


def take_all(n: int) -> float:
    """CPU seconds taking every batch of ``n`` queued messages (the readers' own code)."""
    readers = Readers(threads=0, pace=0.0)
    db = Database("sqlite://")
    config: Any = None
    for inbound_id in range(1, n + 1):
        readers.submit(db, config, inbound_id, size=500, sender=f"p{inbound_id % 500}@x.example")
    started = time.process_time()
    while True:
        jobs, _ = readers._next()
        if jobs is None:
            break
        readers._take(jobs)
        for job in jobs:
            del readers._running[(id(job.db), job.inbound_id)]
    assert readers.idle()
    return time.process_time() - started


def take_all_sorted(n: int) -> float:
    """The baseline: the same batches, the queue sorted for each (as before)."""
    queued = {i: (i, 500, f"p{i % 500}@x.example") for i in range(1, n + 1)}
    started = time.process_time()
    while queued:
        head = min(queued.values(), key=lambda job: job[0])
        following = sorted((job for job in queued.values() if job is not head), key=lambda j: j[0])
        for job in [head, *following[: BATCH - 1]]:
            del queued[job[0]]
    return time.process_time() - started


def old_settle(futures: list[Future[int]], seconds: float) -> bool:
    pending = {f for f in futures if not f.done()}
    until = time.monotonic() + seconds
    while pending:
        left = until - time.monotonic()
        if left <= 0:
            return False
        pending = wait(pending, timeout=min(left, 0.2)).not_done
    return True


def old_close_wait(futures: list[Future[int]], seconds: float) -> list[Future[int]]:
    pending = set(futures)
    until = time.monotonic() + seconds
    while pending and time.monotonic() < until:
        pending = wait(pending, timeout=until - time.monotonic(), return_when=FIRST_COMPLETED)[1]
    return list(pending)


def waited(n: int, rate: float, waiting: Callable[[list[Future[int]]], object]) -> float:
    """The waiting thread's CPU seconds while ``n`` futures are done one by one, ``rate``
    a second, from another thread (and its share of the wait, printed)."""
    futures: list[Future[int]] = [Future() for _ in range(n)]

    def finish() -> None:
        started = time.monotonic()
        for i, future in enumerate(futures):
            ahead = started + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            future.set_result(i)

    worker = threading.Thread(target=finish)
    cpu, wall = time.thread_time(), time.monotonic()
    worker.start()
    waiting(futures)
    cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
    worker.join()
    assert all(f.done() for f in futures)
    BUSY.append(cpu / wall)
    return cpu


def close_wait(db: Database) -> Callable[[list[Future[int]]], object]:
    def waiting(futures: list[Future[int]]) -> object:
        unread = Readers().wait_for_close(db, dict(enumerate(futures)), 600)  # type: ignore[arg-type]
        assert unread == []
        return unread

    return waiting


def report(label: str, sizes: list[int], ours: list[float], base: list[float]) -> None:
    busy = BUSY[-2 * len(sizes) :]
    BUSY.clear()
    per = [1e6 * t / n for t, n in zip(ours, sizes, strict=True)]
    base_per = [1e6 * t / n for t, n in zip(base, sizes, strict=True)]
    print(f"  {label}:")
    for n, p, b in zip(sizes, per, base_per, strict=True):
        print(f"    {n:>6,} messages: {p:7.2f} us a message (baseline {b:9.2f})")
    print(
        f"    larger/smaller, a message: {per[-1] / per[0]:.2f}x (goal <= 1.5x); "
        f"baseline {base_per[-1] / base_per[0]:.2f}x"
    )
    if busy:
        print(
            f"    the waiting thread busy {100 * busy[len(sizes) - 1]:.1f}% of the larger wait "
            f"(baseline {100 * busy[-1]:.1f}%)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3000,30000")
    parser.add_argument("--close-sizes", default="500,5000")
    parser.add_argument("--rate", type=float, default=3000.0, help="messages done a second")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    close_sizes = [int(s) for s in args.close_sizes.split(",")]
    db = Database("sqlite://")  # (only its identity: nothing is stored)
    print(f"bench_backlog: {BATCH} messages a batch; waits while {args.rate:g} a second are done")
    report(
        "taking a backlog's batches (CPU)",
        sizes,
        [take_all(n) for n in sizes],
        [take_all_sorted(n) for n in sizes],
    )
    report(
        "a poll's wait for its messages (the waiting thread's CPU)",
        sizes,
        [waited(n, args.rate, lambda f: settle(f, 600)) for n in sizes],
        [waited(n, args.rate, lambda f: old_settle(f, 600)) for n in sizes],
    )
    report(
        "a close's wait for its messages (the waiting thread's CPU)",
        close_sizes,
        [waited(n, args.rate, close_wait(db)) for n in close_sizes],
        [waited(n, args.rate, lambda f: old_close_wait(f, 600)) for n in close_sizes],
    )


if __name__ == "__main__":
    main()
