"""The outbox sender of ``serve``: the loop that drains the outbox over SMTP, and where it runs.

With SQLite it is a thread of ``serve``. With PostgreSQL it is a process of its own
(:class:`SenderProcess`): while a deadline's rounds close, the closes hold one Python
process's interpreter, and a sender thread beside them got a seventh of the mail out
(1,460 of 10,500 in an experiment of 500 games), the rest only after. The outbox needs
nothing more to be shared between processes: its claims are rows, taken with ``SKIP
LOCKED``, signed by the process that holds them (``snl_pbem.procs.identity``), and freed
at once when that process is dead.

``serve`` and its sender talk over one pipe. A byte written is a kick (mail was
enqueued: drain now); the pipe closed (``serve`` stopping, or gone) tells the sender to
finish the part of a batch it is sending (``drain_outbox``'s stop) and exit. A SIGKILLed
``serve`` takes its sender along (``PR_SET_PDEATHSIG``), as it took the sender thread: a
part sent and not yet recorded is sent again by the next sender, as after any kill.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
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
from multiprocessing import resource_tracker
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
"""How long a stopping ``serve`` waits for its sender to finish the part it is sending."""
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
    file: stop). ``stopped`` looks at the pipe (a drain asks after each part it sends); a
    kick it reads meanwhile is kept for the next ``wait``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        self.kicked = False
        os.set_blocking(fd, False)
        self._poll = select.poll()  # (select's fd numbers stop at 1024)
        self._poll.register(fd, select.POLLIN)

    def stopped(self) -> bool:
        self._read()
        return self.closed

    def clear(self) -> None:
        self._read()
        self.kicked = False

    def wait(self, seconds: float, *, kick: bool) -> None:
        until = time.monotonic() + seconds
        while True:
            self._read()
            left = until - time.monotonic()
            if self.closed or (kick and self.kicked) or left <= 0:
                return
            self._poll.poll(left * 1000)

    def _read(self) -> None:
        """Read what is in the pipe, without waiting."""
        while not self.closed:
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                return
            if not chunk:
                self.closed = True
            else:
                self.kicked = True


def send_loop(
    config: Config,
    db: Database,
    clock: Callable[[], datetime],
    signals: Signals,
    idle: float = SENDER_IDLE_SECONDS,
) -> None:
    """Drain the outbox when kicked (and every ``idle`` seconds) until stopped; while the
    SMTP server is unreachable, try again after a backoff (capped, with jitter). Told to
    stop, a drain ends with the part of a batch it is sending (``drain_outbox``'s stop)."""
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
                stop=signals.stopped,
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
        signals.wait(idle, kick=True)


class SenderProcess:
    """``serve``'s side of a sender process: ``start``, ``kick``, ``alive``, ``stop``."""

    def __init__(self, config: Config, log_level: int, idle: float = SENDER_IDLE_SECONDS) -> None:
        # what sending needs: the mail settings and where the config and the database are
        # (the delivery-failure alert goes to the referee, in English: no game's table);
        # every game's table, thousands of them, pickled at each start, would be dead weight
        self.config = dataclasses.replace(config, games=(), left_out=(), game_files=())
        self.log_level = log_level
        self.idle = idle
        self._process: Any = None
        self._pipe: Connection | None = None
        self._lock = threading.Lock()
        self._started = 0.0

    def start(self) -> None:
        """Spawn the sender (a new interpreter: ``serve`` has threads, which fork must not
        copy), with the read end of a new pipe. SIGINT, SIGTERM and SIGHUP are blocked
        meanwhile, so the child starts with them blocked and sets them before it takes
        them (a terminal's ^C or systemd's stop, sent to every process, would otherwise
        kill it while it imports)."""
        self._started = time.monotonic()  # a start that fails is tried again RESTART_AFTER on
        read, write = self.pipe(multiprocessing.get_context("spawn"))
        try:
            process = spawn(
                _run, (self.config, self.log_level, read, os.getpid(), self.idle), "sender"
            )
        except BaseException:
            write.close()
            self._process = None  # how_it_ended: "did not start", not the one before's end
            raise
        finally:
            read.close()  # the child has its own copy
        with self._lock:
            self._process, self._pipe = process, write
        log.info("outbox: sending from process %d", process.pid)

    @staticmethod
    def pipe(context: Any = multiprocessing) -> tuple[Connection, Connection]:
        """The pipe to a sender: (its read end, ``serve``'s write end, which never blocks)."""
        read, write = context.Pipe(duplex=False)
        os.set_blocking(write.fileno(), False)
        return read, write

    def kick(self) -> None:
        """Drain now. A full pipe already holds a kick: nothing is lost by not writing."""
        with self._lock:
            if self._pipe is not None:
                with contextlib.suppress(BlockingIOError, BrokenPipeError):
                    os.write(self._pipe.fileno(), b"k")

    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def how_it_ended(self) -> str:
        """How it ended, for the log: "exited 1", "was killed by SIGKILL"."""
        return how_it_ended(self._process)

    def may_restart(self) -> bool:
        """Whether to start it again now (see ``RESTART_AFTER``)."""
        return time.monotonic() - self._started >= RESTART_AFTER

    def finish(self) -> None:
        """Have it finish the part it is sending and exit (``stop`` waits for it)."""
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


HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def spawn(target: Callable[..., None], args: tuple[Any, ...], name: str) -> Any:
    """Start one of ``serve``'s processes (``snl-pbem-<name>``), spawned: a new interpreter
    (``serve`` has threads, which fork must not copy). SIGINT, SIGTERM and SIGHUP are
    blocked meanwhile, so the child starts with them blocked and sets them before it takes
    them (``become_child``; a terminal's ^C or systemd's stop, sent to every process, would
    otherwise kill it while it imports)."""
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=target, args=args, name=f"snl-pbem-{name}", daemon=False)
    # the tracker that spawn starts first, the first time, unblocks SIGINT and SIGTERM
    # as it starts: started before the block, it leaves the block alone
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return process


def become_child(log_level: int, parent: int, what: str, killed: str) -> bool:
    """In a process ``spawn`` started: log as ``serve`` does, die with ``serve``, and
    ignore SIGINT, SIGTERM and SIGHUP: ``serve`` takes them (a terminal's ^C and systemd's
    stop reach every process of the service) and tells its children what to do over their
    pipes. False if ``serve`` is gone already. ``what`` names the process in a warning,
    ``killed`` says what a ``serve`` killed outright then leaves it to do."""
    configure_logging(logging.getLevelName(log_level))
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # Linux only
    if prctl is None or prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        log.warning(
            "%s cannot ask to die with serve (prctl: %s): a serve killed outright leaves it %s",
            what,
            os.strerror(ctypes.get_errno()) if prctl is not None else "not on this system",
            killed,
        )
    if os.getppid() != parent:  # serve died before the line above
        return False
    for number in HELD_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
    return True


def how_it_ended(process: Any) -> str:
    """How a process ``spawn`` started ended, for the log: "exited 1", "was killed by
    SIGKILL"."""
    code = None if process is None else process.exitcode
    if code is None:
        return "did not start"
    if code >= 0:
        return f"exited {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def _run(config: Config, log_level: int, pipe: Connection, parent: int, idle: float) -> None:
    """The sender process: die with ``serve``, then send until the pipe is closed, so it
    goes on sending while ``serve`` finishes its closes, until told to stop."""
    what = "outbox: the sender"
    if not become_child(
        log_level, parent, what, "to finish the part it is sending, up to the SMTP timeout"
    ):
        return
    signals = PipeSignals(pipe.fileno())  # (pipe kept: closing it would close the fd)
    db = Database(config.database_url)
    try:
        send_loop(config, db, utcnow, signals, idle)
    finally:
        db.dispose()
