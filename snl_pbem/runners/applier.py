"""PostgreSQL: the readers' transactions in a process of their own (``serve``).

The readers read a batch (parse it in the sandbox) in ``serve`` and write it in one
transaction (``apply_batch``). Through LMTP, ``serve``'s one interpreter also runs the
sessions' loop and the store's writer, and it was busy: a tenth of a millisecond more of
its work a message, anywhere, cost about a tenth of the orders a second (SQLite). On
PostgreSQL, where nothing makes the stores wait for the readers, that interpreter was the
limit, so there the transactions run here, in a process of their own, one batch at a time,
in the order the readers hand them over (``bench_ingest``, 8 LMTP sessions, four pairs:
938-1,035 orders a second against 764-841; through Dovecot 1,261-1,336 against
1,132-1,166). SQLite keeps them in ``serve``: there its one write lock, which the stores
and the readers' transactions take turns for (``snl_pbem.store.db``, one process's
threads), is the limit, not the interpreter (the LMTP side in a process of its own:
999-1,047 a second against 968-1,005).

What a batch guarantees is ``apply_batch``'s, unchanged: each row locked and its status
checked in its transaction, all of the batch committed or none. Should the process end
with a batch in it, the batch is written again in ``serve``, where what the process did
commit is found handled and not applied twice (and told as its rows say: ``context.told_again``);
the next batch starts a new process (at most once in ``RESTART_AFTER``; meanwhile ``serve``
writes them itself, as before). ``serve`` stopping waits for the batch in the process
``STOP_SECONDS`` at most, then kills it: a batch waiting on a row another holds never
holds the stop up.
``serve`` and the process talk over one pipe: a batch (and the config, when it changed)
one way, each message's result the other; the pipe closed tells it to exit.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from multiprocessing import get_context
from multiprocessing.connection import Connection
from typing import Any

from snl_pbem.app.intake.batch import ReadBatch, apply_batch, as_read
from snl_pbem.app.intake.context import IngestResult, Results, told_again
from snl_pbem.config import Config
from snl_pbem.procs import settle_collector
from snl_pbem.runners.sending import RESTART_AFTER, become_child, how_it_ended, spawn
from snl_pbem.store import Database

log = logging.getLogger("snl_pbem.server")

STOP_SECONDS = 10.0
"""How long a stopping ``serve`` waits for the process to finish its batch (the readers
have finished theirs before: ``Readers.finish``)."""


class Applier:
    """``serve``'s side: ``start``, ``apply`` (as ``apply_batch``), ``stop``."""

    def __init__(self, log_level: int) -> None:
        self.log_level = log_level
        self._lock = threading.Lock()  # one batch at a time (transactions go in turn)
        self._process: Any = None
        self._pipe: Connection | None = None
        self._sent: list[Config] = []
        """The configs the process holds, the latest last (``KEPT_CONFIGS``; each by its
        ``id``, which holding it here keeps its own)."""
        self._up = False  # (its first word read: ``_await_up``)
        self._started = float("-inf")
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """The process's id (None before its start)."""
        return None if self._process is None else int(self._process.pid)

    def start(self) -> None:
        """Start the process, unless one runs (its interpreter's start-up then costs the
        first batch nothing). Raises if it cannot be started. (A process started by a
        thread dies with that thread, ``PR_SET_PDEATHSIG``'s way: serve's readers and its
        main thread live as long as serve.)"""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if self._pipe is not None and self._process.is_alive():
            return
        self._started = time.monotonic()  # a start that fails is tried again RESTART_AFTER on
        ours, theirs = get_context("spawn").Pipe()
        try:
            self._process = spawn(_run, (theirs, self.log_level, os.getpid()), "applier")
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the child has its own copy
        self._pipe, self._sent, self._up = ours, [], False
        log.info("intake: writing batches from process %d", self._process.pid)

    def wait_ready(self, seconds: float) -> bool:
        """Wait until the process is ready for batches (its interpreter started), ``seconds``
        at most: whether it is. (Not needed: a batch handed over first waits for it.)"""
        with self._lock:
            pipe = self._pipe
            if pipe is None or self._up:
                return self._up
            try:
                if pipe.poll(seconds):
                    self._await_up(pipe)
            except (EOFError, OSError):
                return False
            return self._up

    def _await_up(self, pipe: Connection) -> None:
        """The process's first word: it is ready."""
        if not self._up:
            word = pipe.recv_bytes()
            if word != _UP:
                raise EOFError(f"not the process's first word: {word[:20]!r}")
            self._up = True

    def apply(self, db: Database, config: Config, batch: ReadBatch) -> Results:
        """``apply_batch(db, config, batch)``, in the process; in ``serve`` on SQLite, once
        stopped, and when the process cannot be had. One that ended with the batch in it
        (whether or not it committed it): the batch is written here again; serve stopping
        meanwhile, its messages stay stored, unprocessed (read at the next start)."""
        if db.is_sqlite:
            return apply_batch(db, config, batch)
        with self._lock:
            pipe = None if self._stopping else self._ready()
            if pipe is not None:
                try:
                    return self._round_trip(pipe, db, config, batch)
                except _Unsendable as exc:  # (a bug of ours: it is written here, as before)
                    log.error(
                        "intake: a batch could not be handed over (%s): written in serve", exc
                    )
                except Exception as exc:  # the process ended (or the pipe broke) with it
                    self._drop()
                    if self._stopping:
                        log.warning("intake: serve stopping, a batch of %d left", len(batch.ids))
                        return dict.fromkeys(batch.ids, RuntimeError("serve stopped"))
                    log.error(
                        "intake: the process writing batches %s (%s): its batch of %d is "
                        "written in serve (what it committed is found handled)",
                        how_it_ended(self._process),
                        type(exc).__name__,
                        len(batch.ids),
                    )
                    new = {inbound_id for inbound_id, _, _ in batch.todo}
                    return told_again(db, new, apply_batch(db, config, batch), _LOST)
        return apply_batch(db, config, batch)

    def _ready(self) -> Connection | None:
        if self._pipe is not None and self._process.is_alive():
            return self._pipe
        if self._pipe is not None:  # ended between batches
            self._drop()
            log.error("intake: the process writing batches %s", how_it_ended(self._process))
        if time.monotonic() - self._started < RESTART_AFTER:
            return None
        try:
            self._start()
        except Exception as exc:  # written in serve meanwhile; tried again RESTART_AFTER on
            log.error("intake: cannot start a process to write batches: %s", exc)
            return None
        return self._pipe

    def _round_trip(
        self, pipe: Connection, db: Database, config: Config, batch: ReadBatch
    ) -> Results:
        # each reading as apply_batch reads it (an exception of the sandbox's, as its
        # words): what crosses is mail, text and numbers. The config crosses once: then
        # its id (a reload's new config and the old one, which the intake may still hand
        # over, are both kept there)
        read = ReadBatch(batch.ids, batch.known, batch.todo, [as_read(r) for r in batch.read])
        known = any(config is kept for kept in self._sent)
        try:
            data = pickle.dumps((db.url, id(config), None if known else config, read))
        except Exception as exc:
            raise _Unsendable(f"{type(exc).__name__}: {exc}") from exc
        self._await_up(pipe)
        pipe.send_bytes(data)
        if not known:
            self._sent = [*self._sent, config][-KEPT_CONFIGS:]
        results: Results = pipe.recv()
        return results

    def _drop(self) -> None:
        """The process gone (or to be): the pipe closed, the process reaped (killed if it
        still runs: its pipe is unknown ground now)."""
        if self._pipe is not None:
            self._pipe.close()
        self._pipe, self._sent = None, []
        process = self._process
        if process is not None:
            process.join(1)
            if process.is_alive():
                process.kill()
                process.join()

    def stop(self, seconds: float = STOP_SECONDS) -> None:
        """Take no more batches. Wait for the batch in the process, then close the pipe, and
        the process ends; ``seconds`` at most in all, then kill it (a batch not committed is
        undone: its messages are read again at the next start). A batch waiting that long (a row
        lock another holds, a database gone quiet) never holds serve's stop up."""
        self._stopping = True
        ends = time.monotonic() + seconds
        if self._lock.acquire(timeout=seconds):  # no batch in the process (any more)
            try:
                pipe, self._pipe = self._pipe, None
                if pipe is not None:
                    pipe.close()  # its end of file: it exits
            finally:
                self._lock.release()
        process = self._process
        if process is None:
            return
        process.join(max(0.0, ends - time.monotonic()))
        if process.is_alive():
            log.warning("intake: the process writing batches did not stop: killed")
            process.kill()  # (a batch in it: its round trip ends, the batch left stored)
            process.join()


KEPT_CONFIGS = 2
"""Configs the process keeps: the running one and the one before a reload."""


_LOST = "written by the process writing batches, which ended before it answered"

_UP = b"up"
"""The process's first word: started, ready for batches."""


class _Unsendable(Exception):
    """A batch (or the config) that cannot be pickled: nothing was written to the pipe."""


def _run(pipe: Connection, log_level: int, parent: int) -> None:
    """The process: write each batch it is given, until the pipe is closed."""
    what = "intake: the process writing batches"
    if not become_child(log_level, parent, what, "to finish the batch it is writing"):
        return
    settle_collector()  # as serve's own process, once started
    pipe.send_bytes(_UP)
    dbs: dict[str, Database] = {}
    configs: dict[int, Config] = {}
    try:
        while True:
            try:
                url, key, new, batch = pipe.recv()
            except (EOFError, OSError):  # serve closed its end (a reset, if our word was unread)
                return
            if new is not None:
                configs[key] = new
                for old in list(configs)[:-KEPT_CONFIGS]:
                    del configs[old]
            config = configs[key]  # (brought the first time)
            db = dbs.get(url) or dbs.setdefault(url, Database(url))
            try:
                results: Results = apply_batch(db, config, batch)
            except Exception as exc:  # (apply_batch returns its failures: a bug of ours)
                log.exception("intake: a batch could not be written")
                results = dict.fromkeys(batch.ids, exc)
            pipe.send({inbound_id: _sendable(r) for inbound_id, r in results.items()})
    finally:
        for db in dbs.values():
            db.dispose()


def _sendable(result: IngestResult | Exception) -> IngestResult | Exception:
    """A result as it can cross the pipe: an exception that cannot, as its words."""
    if isinstance(result, Exception):
        try:
            pickle.loads(pickle.dumps(result))
        except Exception:
            return RuntimeError(f"{type(result).__name__}: {result}")
    return result
