"""The outbox sender of ``serve``: the loop that drains the outbox over SMTP, and where it runs.

With SQLite it is a thread of ``serve``. With PostgreSQL it is a process of its own
(:class:`SenderProcess`): one Python process's closes hold its interpreter while a
deadline's rounds close, and a sender thread beside them sent a seventh of what a sender
alone sends in that time. The outbox needs nothing more to be shared between processes:
its claims are rows, taken with ``SKIP LOCKED``, signed by the process that holds them
(``snl_pbem.procs.identity``), and freed at once when that process is dead.

``serve`` and its sender talk over one pipe. A byte written is a kick (mail was
enqueued: drain now); the pipe closed (``serve`` stopping, or gone) tells the sender to
finish the drain in progress and exit. A SIGKILLed ``serve`` takes its sender along
(``PR_SET_PDEATHSIG``), as it took the sender thread: a part of a batch sent and not yet
recorded is sent again by the next sender, as after any kill.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import random
import select
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any, Protocol

from snl_pbem.app.outbox import drain_parallel
from snl_pbem.config import Config
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.procs import identity
from snl_pbem.store import Database
from snl_pbem.timeutil import utcnow

log = logging.getLogger("snl_pbem.server")

SENDER_IDLE_SECONDS = 15.0
"""A drain at least this often, kicked or not (mail deferred comes due)."""
SMTP_DOWN_LONGEST = 300.0
"""The longest wait between tries while the SMTP server is unreachable."""
STOP_SECONDS = 20.0
"""How long a stopping ``serve`` waits for its sender to finish the drain in progress."""
RESTART_AFTER = 10.0
"""A sender process that exits this soon after it started is started again only this long
after: one that cannot start (say, its interpreter cannot) is not spawned every second."""
PR_SET_PDEATHSIG = 1
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """One line per event on stderr (journald adds the time): ``serve``'s and its sender's."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), format=LOG_FORMAT, force=True
    )
    for noisy in ("apscheduler", "mail.log", "alembic", "imapclient"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


class Signals(Protocol):
    """How the send loop is told to drain now, or to stop."""

    def stopped(self) -> bool: ...

    def clear(self) -> None:
        """Forget the kicks so far: the drain about to start sends what they were for."""

    def wait(self, seconds: float, *, kick: bool) -> None:
        """Wait ``seconds`` at most: until a kick (``kick``) or until told to stop."""


class ThreadSignals:
    """The sender as a thread of ``serve``: two events."""

    def __init__(self, kick: threading.Event, stop: threading.Event) -> None:
        self.kick, self.stop = kick, stop

    def stopped(self) -> bool:
        return self.stop.is_set()

    def clear(self) -> None:
        self.kick.clear()

    def wait(self, seconds: float, *, kick: bool) -> None:
        (self.kick if kick else self.stop).wait(seconds)


class PipeSignals:
    """The sender as a process: the read end of ``serve``'s pipe (a byte: a kick; end of
    file: stop), and SIGTERM (systemd stops the whole service at once) as a stop too."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        os.set_blocking(fd, False)

    def stopped(self) -> bool:
        return self.closed

    def clear(self) -> None:
        self._read()

    def wait(self, seconds: float, *, kick: bool) -> None:
        until = time.monotonic() + seconds
        while not self.closed and (left := until - time.monotonic()) > 0:
            # a second at most: SIGTERM sets ``closed`` and select goes on waiting (PEP 475)
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready and self._read() and kick:
                return

    def _read(self) -> bool:
        """Read what is in the pipe; True if it held a kick."""
        kicked = False
        while not self.closed:
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                self.closed = True
                break
            kicked = True
        return kicked


def send_loop(
    config: Config, db: Database, clock: Callable[[], datetime], signals: Signals
) -> None:
    """Drain the outbox when kicked (and every ``SENDER_IDLE_SECONDS``) until stopped; while
    the SMTP server is unreachable, try again after a backoff (capped, with jitter)."""
    smtp = config.settings.mail.smtp
    assert smtp is not None

    def make_sender() -> SmtpSender:
        assert smtp is not None
        return SmtpSender(
            SmtpConfig(smtp.host, smtp.port, smtp.tls, smtp.username, config.password(smtp)),
            config.settings.mail.address,
        )

    down = 0  # drains in a row that found the SMTP server unreachable
    while not signals.stopped():
        signals.clear()
        try:
            report = drain_parallel(
                db,
                config,
                make_sender,
                clock,
                connections=smtp.connections,
                worker=identity(),
                give_up_after=smtp.give_up_after,
            )
            if report.sent or report.failed or (report.deferred and not report.unreachable):
                log.info(
                    "outbox: %d sent, %d deferred, %d failed",
                    report.sent,
                    report.deferred,
                    report.failed,
                )
            if report.unreachable is not None:
                # wait for the server (not for a kick): backoff, capped, with jitter
                down += 1
                delay = min(SMTP_DOWN_LONGEST, 2.0 ** min(down, 9)) * random.uniform(0.5, 1)
                log.warning(
                    "outbox: SMTP server unreachable (%s); trying again in %.0fs",
                    report.unreachable,
                    delay,
                )
                signals.wait(delay, kick=False)
                continue
            if down:
                log.info("outbox: SMTP server reachable again after %d failed tries", down)
                down = 0
        except Exception as exc:  # the database or the network: try again shortly
            log.error("outbox: %s: %s", type(exc).__name__, exc)
        signals.wait(SENDER_IDLE_SECONDS, kick=True)


class SenderProcess:
    """``serve``'s side of a sender process: ``start``, ``kick``, ``alive``, ``stop``."""

    def __init__(self, config: Config, log_level: int) -> None:
        self.config = config
        self.log_level = log_level
        self._process: Any = None
        self._pipe: Connection | None = None
        self._lock = threading.Lock()
        self._started = 0.0

    def start(self) -> None:
        """Spawn the sender (a new interpreter: ``serve`` has threads, which fork must not
        copy), with the read end of a new pipe."""
        context = multiprocessing.get_context("spawn")
        read, write = context.Pipe(duplex=False)
        process = context.Process(
            target=_run,
            args=(self.config, self.log_level, read, os.getpid()),
            name="snl-pbem-sender",
            daemon=False,
        )
        try:
            process.start()
        finally:
            read.close()  # the child has its own copy
        os.set_blocking(write.fileno(), False)
        with self._lock:
            self._process, self._pipe = process, write
        self._started = time.monotonic()
        log.info("outbox: sending from process %d", process.pid)

    def kick(self) -> None:
        """Drain now. A full pipe already holds a kick: nothing is lost by not writing."""
        with self._lock:
            if self._pipe is not None:
                with contextlib.suppress(BlockingIOError, BrokenPipeError):
                    os.write(self._pipe.fileno(), b"k")

    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def exited(self) -> int | None:
        """Its exit status once it has exited, else None."""
        return None if self._process is None else self._process.exitcode

    def may_restart(self) -> bool:
        """Whether to start it again now (see ``RESTART_AFTER``)."""
        return time.monotonic() - self._started >= RESTART_AFTER

    def finish(self) -> None:
        """Have it finish the drain in progress and exit (``stop`` waits for it)."""
        with self._lock:
            pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()  # end of file

    def stop(self, seconds: float = STOP_SECONDS) -> None:
        """``finish``, and wait for it ``seconds`` at most; then kill it (the claims of a
        process gone are freed at once; what it sent and did not record goes again, as
        after a crash)."""
        self.finish()
        process = self._process
        if process is None:
            return
        process.join(seconds)
        if process.is_alive():
            log.warning("outbox: the sender did not stop within %.0fs: killed", seconds)
            process.kill()
            process.join()


def _run(config: Config, log_level: int, pipe: Connection, parent: int) -> None:
    """The sender process: die with ``serve``, then send until the pipe is closed."""
    with contextlib.suppress(OSError, AttributeError):  # not on Linux: the pipe's end suffices
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # serve died before the line above
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C: serve stops us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # serve reloads, and restarts us if need be
    configure_logging(logging.getLevelName(log_level))
    signals = PipeSignals(pipe.fileno())  # (pipe kept: closing it would close the fd)

    def terminate(_signum: int, _frame: object) -> None:
        signals.closed = True

    signal.signal(signal.SIGTERM, terminate)
    db = Database(config.database_url)
    try:
        send_loop(config, db, utcnow, signals)
    finally:
        db.dispose()
