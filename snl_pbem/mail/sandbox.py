"""Reading a message in a worker process, bounded in time and memory, from any thread.

One hostile message must never cost other players their orders: a parse that
runs too long (pathological HTML, a slow codec, a huge MIME tree) is killed
after ``seconds``, and one that grows past ``memory`` bytes fails with a
MemoryError in the worker, not in the server. Both raise
:class:`~snl_pbem.mail.parse.ParseTimeout` or :class:`ParseFailed` here, so the
caller can set the message aside with the reason and go on with the next.

Workers are separate processes, kept and reused; a worker that timed out or
died is killed and replaced. A worker is forked while the process has a single
thread (the server warms ``MAX_WORKERS`` up at start-up, before its threads: a fork
costs milliseconds), and spawned otherwise (a fresh interpreter: no lock held by
another thread is inherited); a forked worker closes every descriptor it
inherited but its pipe. Any thread may call :func:`parse`
(the IMAP poller, the LMTP receiver's workers, ``ingest`` from the command
line); at most ``MAX_WORKERS`` parse at once, the others wait their turn.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import pickle
import queue
import select
import signal
import struct
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from snl_pbem.mail.parse import ParsedMail, ParseTimeout, parse_message

log = logging.getLogger("snl_pbem.sandbox")

PARSE_SECONDS = 10.0
"""The hard limit on reading one message (a real one takes milliseconds)."""
MEMORY_BYTES = 768 * 1024 * 1024
"""How much a worker's address space may grow while it reads messages."""
MAX_WORKERS = 4
"""Messages read at once. More than the cores on purpose: the time limit is wall-clock time,
so a message that runs to it holds a worker for ``PARSE_SECONDS`` whatever the machine, and
four such hold four workers, not the whole intake (a real message still takes milliseconds
beside them). Each worker's memory is bounded by ``MEMORY_BYTES`` on its own."""
START_SECONDS = 120.0
DRAIN_NAP = 0.002
"""While a worker reads a batch, the server waits this long whenever it has taken every
answer given so far, so that one wake-up takes several: a message takes its worker about a
quarter of a millisecond, and waking for each cost the server's reading a fifth more CPU
(21-23 us a message against 17-19, timed alone). It adds at most this much to a batch's
reading, once per wait; a message's time limit counts from after it."""
BATCHED_BYTES = 1024 * 1024
"""A larger message is sent to a worker alone, even within a batch (``parse_many``), and a
batch holds at most this much: a batch is received whole, and only a message alone may be
too big to receive."""


class ParseFailed(Exception):
    """The worker could not read the message (out of memory, or it died)."""


def _serve(conn: Connection, memory: int) -> None:
    """The worker's loop: read (raw, address) pairs, answer ParsedMail or an error."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # not the server's handlers
        signal.signal(signum, signal.SIG_DFL)
    # a forked worker holds copies of the server's descriptors (database and mail sockets):
    # closed here at the OS level, so nothing in this process can ever use them
    keep = conn.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, _max_fd())
    try:  # the address space as it stands (a forked worker starts as big as the server)
        import resource  # here: POSIX only, and the ImportError is caught below

        with open("/proc/self/statm") as statm:
            in_use = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (in_use + memory, in_use + memory))
    except (ImportError, ValueError, OSError):  # not on this platform: time still bounds it
        pass
    try:
        _answer(conn, ("ready", None))
    except (EOFError, OSError):
        return
    while True:
        try:
            operation, raw, argument = conn.recv()
        except (EOFError, OSError):  # the server went away
            return
        except MemoryError:
            # receiving it needed more than the limit: the rest of it is still in the pipe,
            # so nothing after it can be read here. Say so and stop: the server reads this
            # answer (its send fails when we are gone) and starts another worker. Reading
            # on would take that rest for messages, and answer each 4 bytes of it, until the
            # pipe back was full and both sides waited on each other for good.
            with contextlib.suppress(EOFError, OSError):
                _answer(conn, ("error", "reading it needed more memory than the limit"))
            return
        if operation == "parse many":  # a batch: one answer per message, as each is read
            address, sents = argument
            items = list(zip(raw, sents, strict=True))
        else:
            address, sent = argument if operation == "parse" else ("", ())
            items = [(raw, sent)]
        for one, sent in items:
            try:
                answer: tuple[str, Any] = ("ok", parse_message(one, address, sent))
            except MemoryError:
                answer = ("error", "reading it needed more memory than the limit")
            except BaseException as exc:  # parse_message should never raise; report, live on
                answer = ("error", f"{type(exc).__name__}: {exc}"[:500])
            try:
                _answer(conn, answer)
            except (EOFError, OSError):
                return


def _last_word(worker: _Worker) -> str | None:
    """What a worker that stopped reading a message said before it went (the error it
    answered), or None when it said nothing."""
    try:
        said = worker.answers.next(1)
    except (EOFError, OSError, ValueError, pickle.UnpicklingError):
        return None
    if said is None:
        return None
    status, value = said
    return str(value) if status == "error" else None


_FRAME = struct.Struct("!Q")
"""A worker's answer on its pipe: its length, then the answer pickled."""
_READ_BYTES = 1 << 20
"""Bytes taken from a worker's pipe at most at once (a batch's answers, or part of one)."""
_JOINED_BYTES = 64 * 1024
"""An answer up to this long is written with its length in one system call; a longer one
after it, not copied to join them (a worker near its memory limit)."""


def _answer(conn: Connection, answer: object) -> None:
    """Send the server one answer (the worker's side of :class:`_Answers`), whole."""
    payload = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    length = _FRAME.pack(len(payload))
    pieces = [length + payload] if len(payload) <= _JOINED_BYTES else [length, payload]
    fd = conn.fileno()
    for piece in pieces:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view) :]


class _Answers:
    """A worker's answers as the server receives them: every byte the pipe holds read at
    once, and the answers in it taken one by one. ``Connection.recv`` made a wait and two
    reads of each answer, and the reading thread had to win Python's lock back after each
    of the three from the thread writing a batch, which keeps it: beside a thread that
    never waits, a batch's reading took 2.1-2.7 ms a message on the clock, against
    0.5-0.6 so (0.22-0.31 alone either way).

    Waits with ``poll``, as ``Connection.poll`` does (``select`` refuses a descriptor past
    1023, which a server with many connections open may give a worker)."""

    def __init__(self, conn: Connection) -> None:
        self._fd = conn.fileno()
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._buffer = bytearray()
        self._start = 0

    def next(self, seconds: float, nap: float = 0.0) -> Any | None:
        """The next answer; None when none came whole within ``seconds`` (of waiting on
        the pipe: ``nap`` is slept first when no answer is already here). Raises EOFError
        when the worker has gone, OSError once closed (``close``)."""
        answer = self._take()
        if answer is not None:
            return answer
        if nap:
            time.sleep(nap)
        deadline = time.monotonic() + seconds
        while True:
            left = max(0.0, deadline - time.monotonic())
            if self._fd < 0:
                raise OSError("the worker's pipe is closed")
            if not self._poll.poll(left * 1000):
                return None
            if self._fd < 0:  # (closed meanwhile: its number may be another's now)
                raise OSError("the worker's pipe is closed")
            data = os.read(self._fd, _READ_BYTES)
            if not data:
                raise EOFError("the worker closed its pipe")
            self._buffer += data
            answer = self._take()
            if answer is not None:
                return answer

    def empty(self) -> bool:
        """Whether nothing the worker sent is left here (of what has been read)."""
        return self._start == len(self._buffer)

    def close(self) -> None:
        """Read no more: the pipe is closed, and its number may be given to another."""
        self._fd = -1

    def _take(self) -> Any | None:
        start, buffer = self._start, self._buffer
        if len(buffer) - start < _FRAME.size:
            return None
        (size,) = _FRAME.unpack_from(buffer, start)
        end = start + _FRAME.size + size
        if len(buffer) < end:
            if start:  # (a long answer is read over several calls: keep what is left)
                del buffer[:start]
                self._start = 0
            return None
        with memoryview(buffer) as view:
            answer = pickle.loads(view[start + _FRAME.size : end])
        if end == len(buffer):
            buffer.clear()
            self._start = 0
        else:
            self._start = end
        return answer


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 4096


def _start_method() -> str:
    """``fork`` while this process has a single thread (fast: no new interpreter, and safe:
    no lock can be held by another thread), else ``spawn``. The server warms its workers
    up at start-up, before its threads; a worker replaced later is spawned."""
    if hasattr(os, "fork") and threading.active_count() == 1:
        return "fork"
    return "spawn"


class _Worker:
    def __init__(self, memory: int) -> None:
        context: Any = multiprocessing.get_context(_start_method())
        self.conn, child = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=_serve, args=(child, memory), name="snl-pbem-parse", daemon=True
        )
        self.answers = _Answers(self.conn)
        self.process.start()
        child.close()
        # the first start imports the parser: waited for apart from a message's time limit
        try:
            said = self.answers.next(START_SECONDS)
            started = said is not None and said[0] == "ready"
        except (EOFError, OSError, pickle.UnpicklingError):  # it died starting: not a crash
            started = False
        if not started:
            self.kill()
            raise ParseFailed(f"the reading process did not start within {START_SECONDS:g} s")

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(5)
        except Exception:
            pass
        self.answers.close()
        self.conn.close()


class Sandbox:
    """A small pool of parse workers."""

    def __init__(
        self,
        seconds: float = PARSE_SECONDS,
        memory: int = MEMORY_BYTES,
        workers: int = MAX_WORKERS,
    ) -> None:
        self.seconds = seconds
        self.memory = memory
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(workers)
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()

    def parse(self, raw: bytes, game_address: str, sent: tuple[str, ...] = ()) -> ParsedMail:
        """Read one message; raises ParseTimeout or ParseFailed, never hangs. ``sent``:
        the fingerprints of our mail to its sender (see ``parse_message``)."""
        value = self._run("parse", raw, (game_address, sent))
        assert isinstance(value, ParsedMail)
        return value

    def parse_many(
        self, raws: list[bytes], game_address: str, sents: list[tuple[str, ...]]
    ) -> list[ParsedMail | Exception]:
        """Read several messages in one round trip: each its ParsedMail, or the
        ParseTimeout or ParseFailed it met. Each is bounded as ``parse`` bounds one (the
        worker answers each as it is read): one that runs to the time limit costs its
        worker, and the messages after it are read by the next worker, never lost.

        One worker at a time reads a batch (in round trips of ``BATCHED_BYTES`` at most;
        after one that failed, the next worker goes on). The intake reads a batch while it
        writes the one before (``Readers``), and the server writes on one core at a time:
        a second worker reading half of it took that core's time from the writer and the
        LMTP sessions more than it saved the reading. On two cores, three runs each taking
        turns, two workers against one (``bench_ingest``, 3,000 orders): on SQLite through
        Dovecot 1,036-1,141 orders a second against 1,174-1,220, through LMTP 654-705
        against 729-843; on PostgreSQL through Dovecot 789-840 against 831-856; level where
        the reading is heavier (each sender sent forty of our messages, SQLite through
        Dovecot: 909-1,010 against 871-942). Issue 23."""
        results: list[ParsedMail | Exception] = []
        while len(results) < len(raws):
            start = len(results)
            if len(raws[start]) > BATCHED_BYTES:  # alone: receiving it may need the limit
                try:
                    results.append(self.parse(raws[start], game_address, sents[start]))
                except (ParseTimeout, ParseFailed) as exc:
                    results.append(exc)
                continue
            end, size = start + 1, len(raws[start])
            while end < len(raws) and size + len(raws[end]) <= BATCHED_BYTES:
                size += len(raws[end])  # a batch, like a message, is received whole
                end += 1
            with self._slots:
                worker = self._take()
                failed = False
                try:
                    batch = ("parse many", raws[start:end], (game_address, sents[start:end]))
                    worker.conn.send(batch)
                    for index in range(start, end):
                        nap = DRAIN_NAP if index > start else 0.0
                        said = worker.answers.next(self.seconds, nap)
                        if said is None:
                            self._discard(worker)
                            results.append(
                                ParseTimeout(
                                    f"reading it took longer than {self.seconds:g} s (stopped)"
                                )
                            )
                            break
                        status, value = said
                        if status == "ok":
                            results.append(value)
                        else:
                            results.append(ParseFailed(str(value)))
                            failed = True
                    else:
                        if failed or not worker.answers.empty():
                            # (one that ran out of memory may run out again; one seen to
                            # answer more than it was asked is not to be trusted)
                            self._discard(worker)
                        else:
                            self._idle.put(worker)
                except (EOFError, OSError) as exc:
                    self._discard(worker)
                    results.append(ParseFailed(f"the reading process died ({type(exc).__name__})"))
                except BaseException:
                    self._discard(worker)
                    raise
        return results

    def _run(self, operation: str, raw: bytes, argument: object) -> object:
        with self._slots:
            worker = self._take()
            try:
                try:
                    worker.conn.send((operation, raw, argument))
                except OSError:  # it stopped reading (too big for it): its last word says why
                    said = _last_word(worker)
                    if said is None:
                        raise
                    raise ParseFailed(said) from None  # (the worker is discarded below)
                said = worker.answers.next(self.seconds)
                if said is None:
                    self._discard(worker)
                    raise ParseTimeout(f"reading it took longer than {self.seconds:g} s (stopped)")
                status, value = said
            except (EOFError, OSError, BrokenPipeError) as exc:
                self._discard(worker)
                raise ParseFailed(f"the reading process died ({type(exc).__name__})") from exc
            except BaseException:
                self._discard(worker)
                raise
            if status == "ok" and worker.answers.empty():
                self._idle.put(worker)
            else:  # a worker that failed (out of memory, say) is not trusted with more
                self._discard(worker)
        if status != "ok":
            raise ParseFailed(str(value))
        return value

    def warm(self, count: int = MAX_WORKERS) -> None:
        """Start ``count`` workers now (the server does, before it starts its threads)."""
        started = []
        with self._lock:
            missing = count - len(self._all)
        for _ in range(max(0, missing)):
            worker = _Worker(self.memory)
            with self._lock:
                self._all.add(worker)
            started.append(worker)
        for worker in started:
            self._idle.put(worker)

    def _take(self) -> _Worker:
        try:
            worker = self._idle.get_nowait()
            if worker.process.is_alive():
                return worker
            self._discard(worker)
        except queue.Empty:
            pass
        worker = _Worker(self.memory)
        with self._lock:
            self._all.add(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def close(self) -> None:
        with self._lock:
            workers, self._all = list(self._all), set()
        for worker in workers:
            worker.kill()


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
            atexit.register(_default.close)
        return _default


def parse(raw: bytes, game_address: str, sent: tuple[str, ...] = ()) -> ParsedMail:
    """Read one message in the shared sandbox (see the module's docstring)."""
    return default_sandbox().parse(raw, game_address, sent)


def parse_many(
    raws: list[bytes], game_address: str, sents: list[tuple[str, ...]]
) -> list[ParsedMail | Exception]:
    """Read several messages in the shared sandbox, one round trip (``Sandbox.parse_many``)."""
    return default_sandbox().parse_many(raws, game_address, sents)
