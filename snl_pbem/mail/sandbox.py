"""Reading a message in a worker process, bounded in time and memory, from any thread.

One hostile message must never cost other players their orders: a parse that
runs too long (pathological HTML, a slow codec, a huge MIME tree) is killed
after ``seconds``, and one that grows past ``memory`` bytes fails with a
MemoryError in the worker, not in the server. Both raise
:class:`~snl_pbem.mail.parse.ParseTimeout` or :class:`ParseFailed` here, so the
caller can set the message aside with the reason and go on with the next.

Workers are separate processes (started with ``spawn``, so no lock held by
another of the server's threads is inherited), kept and reused; a worker that
timed out or died is killed and replaced. Any thread may call :func:`parse`
(the IMAP poller, the LMTP receiver's workers, ``ingest`` from the command
line); at most ``MAX_WORKERS`` parse at once, the others wait their turn.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import queue
import threading
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from snl_pbem.mail.parse import ParsedMail, ParseTimeout, parse_message, redact_secrets

log = logging.getLogger("snl_pbem.sandbox")

PARSE_SECONDS = 10.0
"""The hard limit on reading one message (a real one takes milliseconds)."""
MEMORY_BYTES = 1024 * 1024 * 1024
"""The worker's address-space limit (the interpreter itself takes a fraction of it)."""
MAX_WORKERS = 2
START_SECONDS = 120.0


class ParseFailed(Exception):
    """The worker could not read the message (out of memory, or it died)."""


def _serve(conn: Connection, memory: int) -> None:
    """The worker's loop: read (raw, address) pairs, answer ParsedMail or an error."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ImportError, ValueError, OSError):  # not on this platform: time still bounds it
        pass
    try:
        conn.send(("ready", None))
    except (EOFError, OSError):
        return
    while True:
        try:
            operation, raw, argument = conn.recv()
        except (EOFError, OSError):  # the server went away
            return
        try:
            if operation == "redact":
                answer: tuple[str, Any] = ("ok", redact_secrets(raw, argument))
            else:
                answer = ("ok", parse_message(raw, argument))
        except MemoryError:
            answer = ("error", "reading it needed more memory than the limit")
        except BaseException as exc:  # parse_message should never raise; report, live on
            answer = ("error", f"{type(exc).__name__}: {exc}"[:500])
        try:
            conn.send(answer)
        except (EOFError, OSError):
            return


class _Worker:
    def __init__(self, memory: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=_serve, args=(child, memory), name="snl-pbem-parse", daemon=True
        )
        self.process.start()
        child.close()
        # the first start imports the parser: waited for apart from a message's time limit
        if not self.conn.poll(START_SECONDS) or self.conn.recv()[0] != "ready":
            self.kill()
            raise ParseFailed(f"the reading process did not start within {START_SECONDS:g} s")

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(5)
        except Exception:
            pass
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

    def parse(self, raw: bytes, game_address: str) -> ParsedMail:
        """Read one message; raises ParseTimeout or ParseFailed, never hangs."""
        value = self._run("parse", raw, game_address)
        assert isinstance(value, ParsedMail)
        return value

    def redact(self, raw: bytes, secrets: list[str]) -> bytes:
        """The message with every secret in its text replaced (see ``redact_secrets``)."""
        value = self._run("redact", raw, secrets)
        assert isinstance(value, bytes)
        return value

    def _run(self, operation: str, raw: bytes, argument: object) -> object:
        with self._slots:
            worker = self._take()
            try:
                worker.conn.send((operation, raw, argument))
                if not worker.conn.poll(self.seconds):
                    self._discard(worker)
                    raise ParseTimeout(
                        f"reading it took longer than {self.seconds:g} s (stopped)"
                    )
                status, value = worker.conn.recv()
            except (EOFError, OSError, BrokenPipeError) as exc:
                self._discard(worker)
                raise ParseFailed(f"the reading process died ({type(exc).__name__})") from exc
            except BaseException:
                self._discard(worker)
                raise
            self._idle.put(worker)
        if status != "ok":
            raise ParseFailed(str(value))
        return value

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


def parse(raw: bytes, game_address: str) -> ParsedMail:
    """Read one message in the shared sandbox (see the module's docstring)."""
    return default_sandbox().parse(raw, game_address)


def redact(raw: bytes, secrets: list[str]) -> bytes:
    """A stored message with its order keys replaced, in the shared sandbox."""
    return default_sandbox().redact(raw, secrets)
