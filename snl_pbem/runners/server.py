"""``snl-pbem serve``: intake, scheduler and outbox sender in one process (on PostgreSQL
the sender in a child process of its own: ``snl_pbem.runners.sending``).

The main thread watches over the parts and handles signals: SIGTERM/SIGINT
stop taking new work, let the transaction in progress finish, close the
connections and exit 0; SIGHUP reloads the config (new games and players,
changed deadlines and mail settings) and logs what changed. With systemd,
readiness and a watchdog are notified on ``$NOTIFY_SOCKET``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from snl_pbem.app.games import sync_games
from snl_pbem.app.intake import IngestResult, process_pending
from snl_pbem.app.rounds import CloseOutcome
from snl_pbem.config import load_config, load_for_serve
from snl_pbem.errors import ConfigError, StartupError
from snl_pbem.mail.imap import ImapPoller
from snl_pbem.mail.lmtp import ReceiverController
from snl_pbem.mail.sandbox import default_sandbox
from snl_pbem.procs import settle_collector
from snl_pbem.rules.words import counted
from snl_pbem.runners.applier import Applier
from snl_pbem.runners.mailboxes import (
    DatabaseHooks,
    Intake,
    default_readers,
    imap_poller,
    lmtp_receiver,
)
from snl_pbem.runners.scheduler import CLOSE_WORKERS, RoundScheduler, make_scheduler
from snl_pbem.runners.sending import (
    SENDER_IDLE_SECONDS,
    STOP_SECONDS,
    SenderProcess,
    ThreadSignals,
    configure_logging,
    send_loop,
)
from snl_pbem.runners.sitekeeper import SiteKeeper
from snl_pbem.store import Database, SchemaOutOfDate
from snl_pbem.store.migrate import check_schema
from snl_pbem.store.states import InboundStatus
from snl_pbem.timeutil import utcnow

log = logging.getLogger("snl_pbem.server")


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) how we are; a no-op without $NOTIFY_SOCKET."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as exc:
        log.warning("could not notify systemd: %s", exc)


@dataclass
class Server:
    config_path: Path
    clock: Callable[[], datetime] = utcnow
    on_close: Callable[[CloseOutcome], None] | None = None
    sender_idle: float = SENDER_IDLE_SECONDS
    """How often the sender drains the outbox when not kicked (tests: that kicks arrive)."""
    stop_event: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    """Set once every part is running."""
    _reload: threading.Event = field(default_factory=threading.Event)
    _kick: threading.Event = field(default_factory=threading.Event)
    _threads: dict[str, threading.Thread] = field(default_factory=dict)
    _mail_stop: threading.Event = field(default_factory=threading.Event)
    _receiver: ReceiverController | None = None
    _poller: ImapPoller | None = None
    _sender: SenderProcess | None = None
    _applier: Applier | None = None
    """PostgreSQL: the process that writes the readers' batches (``snl_pbem.runners.applier``)."""
    _retiring: list[SenderProcess] = field(default_factory=list)
    """Senders told to stop (a reload changed the mail settings), finishing their part."""

    def __post_init__(self) -> None:
        self.site = SiteKeeper(lambda: self.db, lambda: self.config, self.clock)  # [web]

    # -- start -------------------------------------------------------------------------

    def start(self) -> None:
        """Load, check, sync, catch up, then start every part. Raises StartupError."""
        try:
            self.config = load_for_serve(self.config_path)  # a bad game file: that game left out
        except ConfigError as exc:
            raise StartupError(str(exc)) from None
        self.db = Database(self.config.database_url)
        try:
            check_schema(self.db)
        except SchemaOutOfDate as exc:
            self.db.dispose()
            raise StartupError(str(exc)) from None
        for line in sync_games(self.db, self.config, self.clock(), actor="serve").lines:
            log.info("config: %s", line)
        # the parse workers, forked now, while this process has one thread (milliseconds;
        # a worker spawned later, from a threaded process, costs a new interpreter)
        default_sandbox().warm()
        for result in process_pending(self.db, self.config):
            log.info("inbound %s processed after a restart: %s", result.inbound_id, result.status)
        if not self.db.is_sqlite and self.clock is utcnow:  # (a test's clock cannot cross)
            self._applier = Applier(logging.getLogger().level)
            try:
                self._applier.start()
            except Exception as exc:  # written here meanwhile; tried again RESTART_AFTER on
                log.error("intake: cannot start a process to write batches: %s", exc)
            default_readers().applier = self._applier
        self.scheduler = make_scheduler(1 if self.db.is_sqlite else CLOSE_WORKERS)
        self.rounds = RoundScheduler(
            self.db,
            self.config,
            clock=self.clock,
            scheduler=self.scheduler,
            after_close=self._closed,
            on_change=self.site.now,
        )
        self._start_mail(first_poll=True)
        self.scheduler.start(paused=True)
        for outcome in self.rounds.catch_up():
            log.info("%s: round %d closed on catch-up", outcome.game, outcome.round)
        self.rounds.rebuild()
        for game in self.config.games:  # all in while down, or by the mail read above
            if game.settings.close_when_all_in:
                self.rounds.check_all_in(game.id)
        self.scheduler.resume()
        self._send_now()
        games = counted(len(self.config.games), "game")
        log.info("serving %s from %s", games, self.config_path)

    def _start_mail(self, first_poll: bool = False) -> None:
        self._mail_stop = threading.Event()
        intake = Intake(self.db, self.config, on_result=self._after_ingest)  # IMAP and LMTP
        hooks = DatabaseHooks(self.db, self.config, clock=self.clock, intake=intake)
        self._poller = imap_poller(self.db, self.config, hooks)
        if self.rounds is not None:  # a deadline asks the poller to read the mailbox now
            self.rounds.request_poll = self._poller.wake.set if self._poller else None
        if self._poller is not None:
            if first_poll:  # read what arrived while we were down before catching up
                try:
                    self._poller.poll_once()
                except Exception as exc:  # the circuit breaker holds rounds if it stays down
                    log.warning("first poll failed: %s: %s", type(exc).__name__, exc)
                    self._poller.close()
            self._spawn("imap", self._poll_loop)
        self._receiver = lmtp_receiver(self.db, self.config, clock=self.clock, intake=intake)
        if self._receiver is not None:
            self._receiver.start()
            lmtp = self.config.settings.mail.lmtp
            assert lmtp is not None
            log.info("receiving %s on %s:%d", lmtp.protocol.upper(), lmtp.host, lmtp.port)
            self._ask_for_queued_mail(self._receiver)
        if self.config.settings.mail.smtp is None:
            log.warning("no [mail.smtp] configured: mail is queued in the outbox, not sent")
        elif not self.db.is_sqlite and self.clock is utcnow:
            # its own process (a clock of a test's own cannot cross into it; on SQLite one
            # process's threads take turns for the write lock: snl_pbem.store.db)
            self._sender = SenderProcess(self.config, logging.getLogger().level, self.sender_idle)
            try:
                self._sender.start()
            except Exception as exc:  # tried again by _mind_threads
                log.error("outbox: cannot start the sender: %s: %s", type(exc).__name__, exc)
        else:
            self._spawn("sender", self._send_loop)
        self._spawn("site", self._site_loop)

    def _ask_for_queued_mail(self, receiver: ReceiverController) -> None:
        """Have the MTA deliver now what it queued while the listener was down (ETRN), and
        end the start-up grace once it has (``RoundScheduler.redelivered``)."""
        lmtp = self.config.settings.mail.lmtp
        assert lmtp is not None
        if lmtp.etrn is None:
            log.info("etrn_server is off: mail the MTA queued comes at its next retry")
            return
        domain = self.config.settings.mail.address.rpartition("@")[2]
        receiver.redeliver(
            lmtp.etrn, [domain], lmtp.redelivery_settle.total_seconds(), self.rounds.redelivered
        )

    def _spawn(self, name: str, target: Callable[[], Any]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads[name] = thread
        thread.start()

    # -- running -----------------------------------------------------------------------

    def serve_forever(self, install_signals: bool = True) -> int:
        """Start, then watch over the parts until stopped; returns the exit status."""
        if install_signals:
            signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
            signal.signal(signal.SIGINT, lambda *_: self.stop_event.set())
            signal.signal(signal.SIGHUP, lambda *_: self._reload.set())
        try:
            self.start()
            settle_collector()
            self.ready.set()
            sd_notify("READY=1\nSTATUS=serving")
            watchdog = int(os.environ.get("WATCHDOG_USEC", "0")) / 2e6
            last_ping = time.monotonic()
            while not self.stop_event.wait(1.0):
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
                self._mind_threads()
                if watchdog and time.monotonic() - last_ping >= watchdog:
                    sd_notify("WATCHDOG=1")
                    last_ping = time.monotonic()
            sd_notify("STOPPING=1")
            self.shutdown()
        finally:  # whatever ended it: a process of ours left running would hold up the exit
            self._stop_senders()
            self._stop_applier()
        return 0

    def _mind_threads(self) -> None:
        for name, thread in list(self._threads.items()):
            if not thread.is_alive() and not self._mail_stop.is_set():
                log.error("%s stopped unexpectedly; restarting it", name)
                loops = {"sender": self._send_loop, "site": self._site_loop}
                self._spawn(name, loops.get(name, self._poll_loop))
        self._retiring = [old for old in self._retiring if old.alive()]
        sender = self._sender
        if sender is None or sender.alive() or self._mail_stop.is_set():
            return
        if sender.may_restart() and not self.stop_event.is_set():
            log.error("the sender process %s; restarting it", sender.how_it_ended())
            sender.stop(0)
            try:
                sender.start()
            except Exception as exc:  # tried again RESTART_AFTER on
                log.error("outbox: cannot start the sender: %s: %s", type(exc).__name__, exc)

    def _stop_senders(self) -> None:
        """Stop every sender process (its part in progress ends, or it is killed): at the
        end, and whatever ended ``serve`` (a child of ours must not hold up its exit)."""
        if self._sender is not None:
            self._retiring.append(self._sender)
            self._sender = None
        until = time.monotonic() + STOP_SECONDS
        for sender in self._retiring:
            sender.stop(max(0.0, until - time.monotonic()))
        self._retiring = []

    def _stop_applier(self) -> None:
        """The readers' batches written in this process again, and the process that wrote
        them stopped (the readers have finished theirs: ``shutdown``)."""
        applier, self._applier = self._applier, None
        if applier is not None:
            if default_readers().applier is applier:
                default_readers().applier = None
            applier.stop()

    def _send_now(self) -> None:
        """Mail was enqueued: have the sender drain the outbox now."""
        self._kick.set()
        if self._sender is not None:
            self._sender.kick()

    def _poll_loop(self) -> None:
        if self._poller is not None:
            self._poller.run(self._mail_stop)

    def _send_loop(self) -> None:
        signals = ThreadSignals(self._kick, self._mail_stop)
        send_loop(self.config, self.db, self.clock, signals, self.sender_idle)

    def _site_loop(self) -> None:
        self.site.run(self._mail_stop)

    def _after_ingest(self, result: IngestResult) -> None:
        """A message was read: send its reply; plan round 1 of a game it started, and the
        early close of a round it made all in (that game's only)."""
        self._send_now()  # a reply may be waiting
        if result.status != InboundStatus.PROCESSED:
            return
        if result.started:  # a sign-up or START started a game: plan its round 1 now
            self.site.now()
            if result.game is not None:
                self.rounds.replan(names=[result.game])
            else:
                self.rounds.rebuild()
        else:
            self.site.soon()  # a sign-up, a resignation... (orders change no page)
        if result.all_in and result.game is not None:
            self.rounds.check_all_in(result.game)

    def _closed(self, outcome: CloseOutcome) -> None:
        log.info(
            "%s: round %d closed%s",
            outcome.game,
            outcome.round,
            f"; round {outcome.next_round} open" if outcome.next_round else "; game over",
        )
        self._send_now()
        self.site.now()
        if self.on_close is not None:
            self.on_close(outcome)

    # -- reload and stop ---------------------------------------------------------------------

    def reload(self) -> None:
        """SIGHUP: read the config again; a bad one is logged and the old one kept."""
        try:
            new = load_for_serve(self.config_path, running=self.config)  # bad game file: kept
        except ConfigError as exc:
            log.error("reload refused, keeping the running config:\n%s", exc)
            return
        mail_changed = new.settings.mail != self.config.settings.mail
        self.config = new
        self.rounds.config = new
        for line in sync_games(self.db, new, self.clock(), actor="reload").lines:
            log.info("config: %s", line)
        self.rounds.rebuild()
        self.site.now()
        if mail_changed:
            log.info("mail settings changed: restarting intake and sender")
            self._stop_mail()
            self._start_mail()
        log.info("config reloaded: %s", counted(len(new.games), "game"))

    def _stop_mail(self) -> None:
        self._mail_stop.set()
        self._kick.set()
        self.site.stop()
        if self._sender is not None:
            # it finishes the part it is sending, then exits: a reload neither waits for it
            # nor kills it (a kill sends again what it had sent and not yet recorded)
            self._sender.finish()
            self._retiring.append(self._sender)
            self._sender = None
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None
        for thread in self._threads.values():
            thread.join(timeout=20)
        self._threads.clear()
        if self._poller is not None:
            self._poller.close()

    def shutdown(self) -> None:
        """Stop taking work, let the transaction in progress finish, close everything."""
        log.info("stopping")
        self.scheduler.shutdown(wait=True)  # a close in progress completes
        self._stop_mail()
        self._stop_senders()
        default_readers().finish(20)  # so does the reading of a stored message
        self._stop_applier()
        self.db.dispose()
        log.info("stopped")


def serve(config_path: Path, log_level: str | None = None) -> int:
    try:
        config = load_config(config_path, leave_out_bad_games=True)  # Server.start logs them
    except ConfigError as exc:
        print(f"snl-pbem serve: cannot start:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(log_level or config.settings.log_level)
    server = Server(config_path)
    try:
        return server.serve_forever()
    except StartupError as exc:
        log.error("cannot start: %s", exc)
        return 2
