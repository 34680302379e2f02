"""Deadlines without a person: APScheduler wakes the server; the database is the truth.

One job per open round's deadline and one per reminder, with explicit ids,
``replace_existing`` and ``misfire_grace_time=None`` (a job that is late still runs).
The plan costs the same per close however many games there are: after a close only
that game is re-planned; what changes elsewhere (the referee's commands -- a game
started, a round rolled back or extended, a game resumed -- and other servers' closes)
is found in the change feed (``plan_changes``, written by the database's triggers),
read every ``RESCAN_SECONDS``, and only the games it names are re-planned; the whole
plan is rebuilt at start, on a reload, and every ``FULL_RESCAN_SECONDS`` as a safety
net. A job already planned for the same time is never given again (``_apply``). A
deadline missed while the server was down is closed at start, each exactly once (the
guarded close). Every job calls a plain method that takes the time from the injected
clock, so tests drive them directly instead of sleeping. A deadline job looks at the
round again before closing it (``snl_pbem.app.deadline``): if the deadline was moved
later meanwhile (``extend``), it only plans the close for the new time. With LMTP, no
round closes after start-up until the MTA has delivered what it queued while the
server was down (timed by the MTA's own Received header): the LMTP receiver asks for it
(ETRN) and calls ``redelivered`` once it has come, and ``[mail.lmtp]
redelivery_grace`` is the longest wait (``redelivery_until``).

The jobs run on one thread with SQLite and on ``CLOSE_WORKERS`` with PostgreSQL
(``Workers``), and a job due again while an earlier run of it waits its turn is merged
into that run: a due close is never skipped, and nothing routine is logged as a
warning. Several servers on one PostgreSQL each plan every round, a deadline's games in
an order of each server's own (``_spread``); the close's claim, taken first by the job's
decision, lets each skip a game another is closing, and the guarded close makes one of
them close it. On SQLite a close and the outbox's sender take turns at the
one write lock (``snl_pbem.app.turns``), so reports go out during a storm, not after it.

The circuit breaker: when an IMAP mailbox is configured and its last good
poll is older than ``healthy_within`` at a deadline, the round is *held*
(the referee is mailed once) and closes only once intake has been healthy
again for that long, or when the referee runs ``close-round``.

Housekeeping: handled inbound mail older than ``[mail] keep_processed_mail`` is
trimmed to its headers, and mail sent longer ago than ``keep_sent_mail`` to its headers and
fingerprint (``snl_pbem.app.retention``), when the scheduler starts and then once a day,
in short transactions on the same worker thread as the closes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.base import run_job
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler

from snl_pbem.app.deadline import (
    Busy,
    Close,
    Hold,
    HoldWhy,
    Replan,
    Wait,
    decide,
    imap_source,
    intake_problem,
    not_before,
)
from snl_pbem.app.deadline import intake_grace as intake_grace_of
from snl_pbem.app.intake import waiting_sizes
from snl_pbem.app.mailbox_state import intake_health
from snl_pbem.app.retention import purge_batch, purge_sent_batch
from snl_pbem.app.rounds import (
    CloseOutcome,
    RoundBusy,
    close_with_backup,
    due_rounds,
)
from snl_pbem.app.schedule import (
    ChangeFeed,
    OpenRound,
    all_in_close_at,
    feed_start,
    game_rounds,
    held_rounds,
    hold_round,
    open_rounds,
    read_changes,
    reminders_due_at,
    send_reminders,
    trim_changes,
)
from snl_pbem.app.signup import start_due_games
from snl_pbem.app.turns import write_turns
from snl_pbem.config import Config
from snl_pbem.rules.words import agree, counted
from snl_pbem.runners.mailboxes import Readers, default_readers
from snl_pbem.store import Database
from snl_pbem.timeutil import format_duration, utcnow

log = logging.getLogger("snl_pbem.scheduler")

HELD_CHECK_SECONDS = 60
RESCAN_SECONDS = 15
"""How often the change feed is read (the referee's commands, other servers' closes)."""
FULL_RESCAN_SECONDS = 600
"""How often the whole plan is rebuilt anyway: the safety net under the change feed."""
SPREAD_MICROSECONDS = 1000
"""PostgreSQL: a close is put off by less than this, to order a deadline's closes by
server (``RoundScheduler._spread``)."""
CLOSE_WORKERS = 4
"""Closes run in parallel on PostgreSQL, each game's in its own transaction: on a small
machine the database and the report rendering share its cores, so more buys little."""
CATCH_UP_SECONDS = 1
"""How often a close waiting for the mailbox to be read to its end looks again."""
RETRY_SECONDS = 30
LOOK_AGAIN_SECONDS = 5
"""How soon a close that found another server closing the game looks again (in case that
server dies before it commits: its claim goes with its connection)."""
CLOSE_WAIT_SECONDS = 30.0
"""How late slow messages may make a close. The close has the stored messages received
before its deadline read first, in parallel, the small first
(``snl_pbem.runners.mailboxes.Readers``), and waits until they are read; once this long has
passed, it stops waiting as soon as the readers stop getting through ordinary mail (none
read in under ``IN_ORDER_SECONDS`` for that long). Ordinary mail is thus always read in
time, however much of it; slow messages add this much at most, shared by every game closing
at that deadline. A message still unread then is read afterwards, judged by its receipt
time: orders in it are refused, with a reply saying so (their round has closed); the
referee's round summary lists it. A message of at most ALWAYS_AWAITED_BYTES is always
waited for (``Readers.wait_for_close``), so the verdict never depends on the machine's
speed. Three times the sandbox's limit, so a slow message that
was already being read when the close began still finishes in time."""
PURGE_EVERY = timedelta(days=1)
PURGE_RETRY = timedelta(hours=1)
PURGE_BATCH = 500
"""Messages trimmed per transaction: a long first purge never holds a lock for long."""


@dataclass(frozen=True)
class Planned:
    job_id: str
    run_at: datetime


class Workers(ThreadPoolExecutor):  # type: ignore[misc]
    """APScheduler's thread pool (one thread on SQLite, whose writes take turns anyway;
    CLOSE_WORKERS on PostgreSQL, each game's close in its own transaction), which never
    refuses a job that falls due.

    APScheduler counts a job as running from the moment it is handed to the pool, and a
    job that falls due again meanwhile is skipped, with a warning ("maximum number of
    running instances reached"); a skipped date job is gone. Two rounds due at the same
    time did that: the first close re-plans the rounds, the second's job is due again
    while it still waits for the thread. Here a job due again while an earlier run of it
    waits for the thread is merged into that run (every job reads the database when it
    runs, so that run does what this one would), and one due while a run of it is under
    way runs after it.

    APScheduler's shutdown waits for the job under way while it holds the lock that the
    job needs to re-plan the rounds (``rebuild``): a close under way at a stop hung
    ``serve`` until systemd killed it. Here ``shutdown`` only stops taking jobs, and
    ``join`` (``Scheduler.shutdown``) waits for them without that lock."""

    def __init__(self, threads: int = 1) -> None:
        super().__init__(threads)
        self._waiting: set[str] = set()
        self._stopped = False

    def shutdown(self, wait: bool = True) -> None:
        # under the lock: a submit racing the stop must not reach the closed pool
        with self._lock:
            self._stopped = True
            self._pool.shutdown(wait=False)  # what was handed to the pool still runs

    def join(self) -> None:
        """Wait for every job handed to the pool (after ``shutdown``)."""
        self._pool.shutdown(wait=True)

    def submit_job(self, job: Any, run_times: list[datetime]) -> None:
        assert self._lock is not None, "the executor has not been started"
        with self._lock:
            if self._stopped:
                return  # serve is stopping: the next start plans the job again
            if job.id in self._waiting:
                return  # merged into the run that waits
            self._waiting.add(job.id)
            self._do_submit_job(job, run_times)
            self._instances[job.id] += 1

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        def run() -> Any:
            with self._lock:
                self._waiting.discard(job.id)
            return run_job(job, job._jobstore_alias, run_times, self._logger.name)

        def done(future: Any) -> None:
            error = future.exception()
            if error is None:
                self._run_job_success(job.id, future.result())
            else:
                self._run_job_error(job.id, error, error.__traceback__)

        try:
            self._pool.submit(run).add_done_callback(done)
        except BaseException:
            self._waiting.discard(job.id)
            raise


class Scheduler(BackgroundScheduler):  # type: ignore[misc]
    """APScheduler's background scheduler on ``Workers``."""

    def __init__(self, threads: int = 1) -> None:
        self.worker = Workers(threads)
        super().__init__(
            executors={"default": self.worker},
            timezone="UTC",
            job_defaults={"coalesce": True, "misfire_grace_time": None},
        )

    def shutdown(self, wait: bool = True) -> None:
        """Stop; with ``wait``, once the job under way (a close) and those handed to the
        worker have finished."""
        super().shutdown(wait=False)
        if wait:
            self.worker.join()


def make_scheduler(threads: int = 1) -> Scheduler:
    """A scheduler whose jobs run on ``threads`` worker threads (``Workers``)."""
    return Scheduler(threads)


class RoundScheduler:
    def __init__(
        self,
        db: Database,
        config: Config,
        *,
        clock: Callable[[], datetime] = utcnow,
        scheduler: BaseScheduler | None = None,
        after_close: Callable[[CloseOutcome], None] | None = None,
        readers: Readers | None = None,
        close_wait: float | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.after_close = after_close
        self.on_change = on_change
        """Told when a rescan finds a game started at its time, or games changed elsewhere
        (the referee's commands, another server's closes): the game pages follow."""
        self.readers = readers or default_readers()
        self.close_wait = CLOSE_WAIT_SECONDS if close_wait is None else close_wait
        """Seconds a close waits for stored messages still unread (CLOSE_WAIT_SECONDS)."""
        self.unread_at_close: list[int] = []
        """Messages received before a deadline and still unread when its round closed."""
        self.failures: list[str] = []
        """Closes that failed and will be retried (for the log and tests)."""
        self.request_poll: Callable[[], None] | None = None
        """Asks this process's IMAP poller to read the mailbox now (the server sets it)."""
        self.started_at = clock()
        """When this scheduler (the server) started: see ``redelivery_until``."""
        self.redelivered_at: datetime | None = None
        """When the MTA had delivered what it queued while the server was down (``redelivered``)."""
        self._all_in_waiting: set[tuple[str, int]] = set()
        """All-in rounds whose early close waits on the start-up grace (``on_deadline``)."""
        self._lock = threading.RLock()
        self._planned: dict[str, tuple[datetime, bool]] = {}
        """The close and reminder jobs given to the scheduler whose run has not begun: job
        id -> (when, planned by a run of its own for shortly after)."""
        self._feed: ChangeFeed | None = None
        self._full_at = time.monotonic()
        self._rescanning = threading.Lock()
        self._game_locks: dict[str, threading.RLock] = {}
        """One per game: two runs of a game's close job never overlap in this process."""
        self._trim_mark = 0
        """The newest change-feed row at the last daily trim (the next one deletes up to it)."""
        self._backup_at: datetime | None = None
        """When this server last wrote a backup before a close (``_close``)."""
        self._order = os.urandom(16)
        """The key of this server's own order of closes due at one moment (``_spread``)."""

    # -- planning ---------------------------------------------------------------------

    def plan(self) -> list[Planned]:
        """The jobs the database calls for now: deadlines, reminders, held rounds' checks."""
        return self._jobs_for(open_rounds(self.db))

    def _jobs_for(self, rounds: list[OpenRound]) -> list[Planned]:
        planned: list[Planned] = []
        now = self.clock()
        for round_ in rounds:
            if not round_.held:  # a held round is released by check_held only
                planned.append(
                    Planned(
                        f"close:{round_.game}:{round_.number}",
                        self._not_before(round_.deadline + self.intake_grace)
                        + self._spread(round_.game),
                    )
                )
            if round_.remind_at is not None:
                planned.append(
                    Planned(f"remind:{round_.game}:{round_.number}", max(round_.remind_at, now))
                )
        return planned

    def _spread(self, game_name: str) -> timedelta:
        """PostgreSQL: the games due at one moment closed in an order of this server's own.
        APScheduler runs the jobs due at one time in the order of their ids, so several
        servers walked a deadline's games alike, one behind the other: at 1,000 games x 4
        servers, three in four of each server's jobs found the game being closed by another
        (a look again 5 s later each). Each game's close is put off by under a millisecond,
        by an amount drawn from the game's name and a key of this process (the same at every
        plan it makes). Nothing on SQLite: one server, in the order it always had."""
        if self.db.is_sqlite:
            return timedelta(0)
        drawn = hashlib.blake2b(game_name.encode(), key=self._order, digest_size=4).digest()
        return timedelta(microseconds=int.from_bytes(drawn, "big") % SPREAD_MICROSECONDS)

    @property
    def held_check_seconds(self) -> float:
        """How often held rounds are looked at: every minute, or more often when intake
        need only be healthy for less than two minutes before they are released."""
        imap = self.config.settings.mail.imap
        if imap is None:
            return HELD_CHECK_SECONDS
        return min(HELD_CHECK_SECONDS, max(1.0, imap.healthy_within.total_seconds() / 2))

    @property
    def intake_grace(self) -> timedelta:
        """How long after a deadline the close is first tried. With IMAP, the close then
        waits until a poll that began after the deadline has read the mailbox to its end
        (the poller is asked to read at once), so mail that reached the mailbox before the
        deadline counts; stored messages not yet processed are processed first (slow
        ones for CLOSE_WAIT_SECONDS at most). LMTP delivery is synchronous: no wait."""
        return intake_grace_of(self.config)

    @property
    def redelivery_until(self) -> datetime | None:
        """With LMTP, no round closes after start-up until the MTA has delivered what it
        queued while this server was down (timed by the MTA's own Received header, it may
        still count for a round whose deadline has passed): until ``redelivered`` is
        called, or ``redelivery_grace`` after start-up at the latest (the MTA could not
        be asked; its next retry may be later still: Postfix's is up to about 10 minutes
        after a short outage)."""
        lmtp = self.config.settings.mail.lmtp
        if lmtp is None or lmtp.redelivery_grace <= timedelta(0):
            return None
        limit = self.started_at + lmtp.redelivery_grace
        ended = self.redelivered_at
        return limit if ended is None else min(ended, limit)

    def redelivered(self) -> None:
        """The LMTP receiver's word that the MTA has delivered its queue: the start-up
        grace ends now, and the rounds that wait on it are planned for now. Called from
        the receiver's thread: the re-planning runs as a job on the workers."""
        until = self.redelivery_until
        now = self.clock()
        if until is None or now >= until:
            return
        self.redelivered_at = now
        if self.scheduler is None:
            self._replan_redelivered()
            return
        self.scheduler.add_job(
            self._replan_redelivered,
            "date",
            run_date=datetime.now(UTC),
            id="redelivered",
            replace_existing=True,
            misfire_grace_time=None,
        )

    def _replan_redelivered(self) -> None:
        now = self.clock()
        for game_name, number in sorted(self._all_in_waiting):
            self._all_in_at(game_name, number, now)  # on_all_in looks at the round again
        self._all_in_waiting.clear()
        due = self._due()
        if due:
            log.info(
                "the MTA has delivered what it queued while the server was down: %s past "
                "the deadline %s now",
                counted(len(due), "round"),
                agree(len(due), "closes", "close"),
            )
        self.rebuild()

    def _not_before(self, at: datetime) -> datetime:
        return not_before(at, self.redelivery_until)

    def rebuild(self) -> list[Planned]:
        """The whole plan from the rounds table: at start, on a reload, when the start-up
        grace ends, and every FULL_RESCAN_SECONDS as a safety net under the change feed.
        Only what differs from what is planned is touched (``_apply``)."""
        if self.scheduler is None:
            return self.plan()
        feed = feed_start(self.db)  # first: what changes after the read below is in it
        planned = self.plan()
        with self._lock:
            self._feed = feed
            self._apply(planned, None)
            self._standing_jobs()
        return planned

    def replan(self, names: Collection[str] = (), ids: Collection[int] = ()) -> list[Planned]:
        """Re-plan these games only (after one closes, or when the change feed names them):
        what a close costs does not grow with the number of games."""
        if self.scheduler is None or not (names or ids):
            return []
        found, rounds = game_rounds(self.db, names=names, ids=ids)
        return self._replan_with(found, rounds)

    def _replan_with(self, games: Collection[str], rounds: list[OpenRound]) -> list[Planned]:
        """Re-plan ``games`` from their open ``rounds``, as read by the caller."""
        planned = self._jobs_for(rounds)
        with self._lock:
            self._apply(planned, set(games))
        return planned

    def _apply(self, planned: list[Planned], games: set[str] | None) -> None:
        """Make the scheduler's close and reminder jobs of ``games`` (None: every game) the
        ``planned`` ones. A job already planned for the same time is left alone, whether it
        waits for its time or has fired and waits for the worker: it is never given twice.
        A job a run planned for itself (trying again shortly) stands until it runs."""
        assert self.scheduler is not None
        wanted = {item.job_id for item in planned}
        for job_id, (_, own) in list(self._planned.items()):
            if own or job_id in wanted:
                continue
            if games is None or job_id.split(":")[1] in games:
                del self._planned[job_id]
                with contextlib.suppress(JobLookupError):  # fired: its run looks again
                    self.scheduler.remove_job(job_id)
        for item in planned:
            known = self._planned.get(item.job_id)
            if known is None or (not known[1] and known[0] != item.run_at):
                self._add(item.job_id, item.run_at)

    def _add(self, job_id: str, run_at: datetime, *, own: bool = False) -> None:
        """Give the scheduler a close or reminder job (replacing one of the same id)."""
        assert self.scheduler is not None
        kind, game_name, number = job_id.split(":")
        with self._lock:
            self.scheduler.add_job(
                self.on_deadline if kind == "close" else self.on_reminder,
                "date",
                run_date=run_at,
                id=job_id,
                args=(game_name, int(number)),
                replace_existing=True,
                misfire_grace_time=None,
            )
            self._planned[job_id] = (run_at, own)

    def _running(self, job_id: str) -> None:
        """A close or reminder job has begun (or its method was called by itself, as at
        catch-up): from now on a re-plan may give it again."""
        with self._lock:
            if self._planned.pop(job_id, None) is not None and self.scheduler is not None:
                with contextlib.suppress(JobLookupError):  # the usual case: it has fired
                    self.scheduler.remove_job(job_id)

    def _standing_jobs(self) -> None:
        """The interval jobs: the rescan, the daily purge, the held rounds' check."""
        assert self.scheduler is not None
        if self.scheduler.get_job("rescan") is None:
            self.scheduler.add_job(
                self._rescan,
                "interval",
                seconds=RESCAN_SECONDS,
                id="rescan",
                replace_existing=True,
            )
        if self.scheduler.get_job("purge-mail") is None:  # now (start-up), then daily
            self.scheduler.add_job(
                self._purge_job,
                "interval",
                seconds=PURGE_EVERY.total_seconds(),
                next_run_time=datetime.now(UTC),
                id="purge-mail",
                replace_existing=True,
            )
        held_check = self.scheduler.get_job("held-check")
        every = self.held_check_seconds
        if held_check is None or held_check.trigger.interval.total_seconds() != every:
            self.scheduler.add_job(
                self.check_held,
                "interval",
                seconds=every,
                id="held-check",
                replace_existing=True,
            )

    def _rescan(self) -> None:
        """Every RESCAN_SECONDS: games whose ``starts`` time has come start, and the games
        the change feed names (the referee's commands, another server's closes, a reload)
        are re-planned; every FULL_RESCAN_SECONDS the whole plan is rebuilt, in case. A
        database that is down for a while is one log line each time."""
        if not self._rescanning.acquire(blocking=False):
            return  # one under way (several workers on PostgreSQL)
        try:
            started = start_due_games(self.db, self.config, self.clock())
            for line in started:
                log.info("%s", line)
            if started and self.on_change is not None:
                self.on_change()
            now = time.monotonic()
            if self._feed is None or now - self._full_at >= FULL_RESCAN_SECONDS:
                self._full_at = now
                self.rebuild()
                return
            changed = read_changes(self.db, self._feed)
            if changed:
                self.replan(ids=changed)
                if self.on_change is not None:
                    self.on_change()
        except Exception as exc:
            self._feed = None  # what it read may not be planned: the next rescan rebuilds
            log.warning("rescanning the rounds failed (%s: %s)", type(exc).__name__, exc)
        finally:
            self._rescanning.release()

    # -- jobs ---------------------------------------------------------------------------

    def purge_mail(self) -> int:
        """Trim handled inbound mail older than keep_processed_mail to its headers (in
        transactions of PURGE_BATCH messages); logs and returns how many were trimmed."""
        keep = self.config.settings.mail.keep_processed_mail
        if keep is None:
            log.info("inbound mail is kept whole (keep_processed_mail = false)")
            return 0
        total = self._purge_all(purge_batch, keep)
        log.info(
            "trimmed %s received more than %s ago to their headers",
            counted(total, "handled inbound message"),
            format_duration(keep),
        )
        return total

    def purge_sent(self) -> int:
        """Cut mail sent longer ago than keep_sent_mail to its headers and fingerprint (in
        transactions of PURGE_BATCH messages); logs and returns how many were cut."""
        keep = self.config.settings.mail.keep_sent_mail
        if keep is None:
            log.info("sent mail is kept whole (keep_sent_mail = false)")
            return 0
        total = self._purge_all(purge_sent_batch, keep)
        log.info(
            "trimmed %s sent more than %s ago to their headers and fingerprints",
            counted(total, "message"),
            format_duration(keep),
        )
        return total

    def _purge_all(
        self,
        batch: Callable[[Database, datetime, timedelta, int, int], tuple[int, int | None]],
        keep: timedelta,
    ) -> int:
        """Every row due, a batch at a time, each batch going on after the last row the one
        before looked at (each row read once a purge)."""
        now = self.clock()
        total, after = 0, 0
        while True:
            trimmed, last = batch(self.db, now, keep, PURGE_BATCH, after)
            total += trimmed
            if last is None:
                return total
            after = last

    def _purge_job(self) -> None:
        """The daily purge: each part on its own (one failing does not stop the others);
        a failure (the database down) is one log line, and the purge is tried again in an
        hour."""
        failed = False
        for what, part in (
            ("old inbound mail", self.purge_mail),
            ("old sent mail", self.purge_sent),
            ("the change feed", self._trim_feed),
        ):
            try:
                part()
            except Exception as exc:
                failed = True
                log.warning(
                    "trimming %s failed (%s: %s); trying again in %s",
                    what,
                    type(exc).__name__,
                    exc,
                    format_duration(PURGE_RETRY),
                )
        if failed and self.scheduler is not None:
            self.scheduler.add_job(
                self._purge_job,
                "date",
                run_date=datetime.now(UTC) + PURGE_RETRY,
                id="purge-mail-retry",
                replace_existing=True,
                misfire_grace_time=None,
            )

    def _trim_feed(self) -> None:
        self._trim_mark = trim_changes(self.db, self._trim_mark)

    def catch_up(self) -> list[CloseOutcome]:
        """At start: close every round whose deadline passed while nothing ran (with LMTP,
        once the MTA has delivered its queue: they are planned for ``redelivery_until``,
        and for now once ``redelivered`` is called)."""
        until = self.redelivery_until
        if until is not None and self.clock() < until:
            due = self._due()
            if due:
                log.info(
                    "%s past the deadline %s once the MTA has delivered what it queued "
                    "while the server was down, at %s at the latest",
                    counted(len(due), "round"),
                    agree(len(due), "closes", "close"),
                    until.isoformat(timespec="seconds"),
                )
            self.rebuild()
            return []
        if self.intake_unhealthy() is not None:
            for game_name, number, _ in self._due():
                self.on_deadline(game_name, number)
            return []
        outcomes = []
        # oldest deadline first, each game on its own, all with one backup (written after
        # every deadline passed, before the first close)
        for game_name, number, deadline in self._in_own_order(self._due()):
            try:  # one game's failing close must not keep the others (or the server) down
                outcome = self._close(game_name, number, "catch-up", deadline)
            except RoundBusy:
                self._look_again(game_name, number)
                continue
            except Exception as exc:
                self._retry_later(game_name, number, exc)
                continue
            if outcome is not None:
                outcomes.append(outcome)
        self.rebuild()
        return outcomes

    def on_deadline(
        self, game_name: str, number: int, *, early: bool = False, all_in: bool = False
    ) -> CloseOutcome | None:
        """A round's deadline: close it, unless mail intake is unhealthy (then hold it).

        A paused game's deadline does nothing (the referee may still close-round it). A
        deadline moved later since the job was planned (``extend`` while the server runs)
        only re-plans the close; ``early`` is for close-when-all-in, which closes before
        the deadline on purpose. If the database fails (locked, disk full), nothing is half
        done (one transaction) and the deadline is tried again shortly. What to do is
        ``snl_pbem.app.deadline.decide``'s (from one transaction); this acts on it.
        """
        with self._game_lock(game_name):  # a second run of it (several workers) waits its turn
            return self._on_deadline(game_name, number, early, all_in)

    def _game_lock(self, game_name: str) -> threading.RLock:
        with self._lock:
            return self._game_locks.setdefault(game_name, threading.RLock())

    def _on_deadline(
        self, game_name: str, number: int, early: bool, all_in: bool
    ) -> CloseOutcome | None:
        if not early:
            self._running(f"close:{game_name}:{number}")
        try:
            decision = decide(
                self.db,
                self.config,
                game_name,
                number,
                self.clock(),
                early=early,
                all_in=all_in,
                redelivery_until=self.redelivery_until,
                claim=True,  # another server closing the game: Busy, at the cost of one read
            )
            match decision:
                case Close(deadline=deadline, waiting=waiting):
                    self._process_stragglers(game_name, number, waiting)
                    backup_after = min(deadline, self.clock())  # an early close: now
                    return self._close(game_name, number, "scheduler", backup_after)
                case Hold(why=HoldWhy.INTAKE_UNHEALTHY, problem=problem):
                    self._hold(game_name, number, problem)
                case Hold(why=HoldWhy.MAILBOX_BEHIND):
                    if self.request_poll is not None:
                        self.request_poll()
                    self._close_soon(game_name, number)
                case Wait(until=until):  # an order may be in the MTA's queue
                    self._all_in_at(game_name, number, until)
                    self._all_in_waiting.add((game_name, number))  # for now once redelivered
                case Replan(close_at=None):
                    pass  # nothing to plan: the rounds table leaves this job out
                case Replan(close_at=datetime() as at):
                    log.info(
                        "%s: round %d is not due yet (deadline moved, or the MTA's redelivery "
                        "grace after start-up); closing at %s",
                        game_name,
                        number,
                        at.isoformat(timespec="seconds"),
                    )
                    self.replan(names=[game_name])
                case Busy():
                    self._look_again(game_name, number, early=early)
            return None
        except RoundBusy:  # taken by another process between the decision and the close
            self._look_again(game_name, number, early=early)
            return None
        except Exception as exc:
            self._retry_later(game_name, number, exc)
            return None

    def _close_soon(self, game_name: str, number: int) -> None:
        """Try the close again in a moment (the mailbox is being read to its end)."""
        log.info("%s: round %d: reading the mailbox to its end before closing", game_name, number)
        if self.scheduler is not None:
            at = self.clock() + timedelta(seconds=CATCH_UP_SECONDS)
            self._add(f"close:{game_name}:{number}", at, own=True)

    def _process_stragglers(self, game_name: str, number: int, ids: Collection[int]) -> None:
        """Have every stored message received before the deadline that is still unprocessed
        (being read by an intake, queued behind others, or left by a failure) read first,
        in parallel and ahead of other mail, the smallest first whoever sent them (a slow
        message forged 'from' a player never holds her real orders), so that none is judged
        after the round it was meant for has closed; but slow ones for ``close_wait``
        seconds at most (see CLOSE_WAIT_SECONDS). A message still unread then is read
        afterwards and judged as late for this round (never applied to it: the round is
        closed, and the next one opened after the message came)."""
        if not ids:  # (``ids``: the stored messages still unprocessed, read by ``decide``)
            return
        futures = self.readers.submit_urgent(
            self.db, self.config, waiting_sizes(self.db, list(ids))
        )
        log.info(
            "%s: round %d: reading %s received before the deadline first",
            game_name,
            number,
            counted(len(futures), "message"),
        )
        unread = self.readers.wait_for_close(self.db, futures, self.close_wait)
        for inbound_id in unread:
            log.warning(
                "%s: round %d closes without inbound %d, received before the deadline but "
                "not read within %g s: it is judged when read, as too late for this round",
                game_name,
                number,
                inbound_id,
                self.close_wait,
            )
        self.unread_at_close = [*self.unread_at_close, *unread][-1000:]  # the latest

    def _look_again(self, game_name: str, number: int, *, early: bool = False) -> None:
        """Another process holds the game's close claim (several servers on one PostgreSQL:
        another server closing the round, or deciding whether to; the referee's
        close-round): look again in LOOK_AGAIN_SECONDS, in case it dies before it commits,
        or decides not to close. ``early``: close-when-all-in's job, whose look again is
        one of its own (a deadline's job would find the round not yet due)."""
        log.info(
            "%s: round %d is being closed, or looked at, by another server; looking again in %ds",
            game_name,
            number,
            LOOK_AGAIN_SECONDS,
        )
        again = self.clock() + timedelta(seconds=LOOK_AGAIN_SECONDS)
        if early:
            self._all_in_at(game_name, number, again)
        elif self.scheduler is not None:
            self._add(f"close:{game_name}:{number}", again, own=True)

    def _retry_later(self, game_name: str, number: int, exc: Exception) -> None:
        log.error(
            "%s: closing round %d failed (%s: %s); retrying in %ds",
            game_name,
            number,
            type(exc).__name__,
            exc,
            RETRY_SECONDS,
        )
        self.failures.append(f"{type(exc).__name__}: {exc}")
        if self.scheduler is not None:
            at = self.clock() + timedelta(seconds=RETRY_SECONDS)
            self._add(f"close:{game_name}:{number}", at, own=True)

    def check_held(self) -> list[CloseOutcome]:
        """Release held rounds once intake has been healthy for the limit again."""
        imap = self.config.settings.mail.imap
        if imap is None:
            return []
        limit = imap.healthy_within
        _, since = self._health()
        if since is None or self.clock() - since < limit:
            return []
        closed = []
        released = self.clock()  # one backup for the rounds released together
        for game_name, number in held_rounds(self.db):
            try:
                outcome = self._close(game_name, number, "scheduler (released)", released)
            except RoundBusy:
                # another process holds the claim: closing the round, or deciding whether to
                # (a held round, it leaves alone); the next check looks again
                continue
            if outcome is not None:
                closed.append(outcome)
        return closed

    def on_reminder(self, game_name: str, number: int) -> int:
        """Remind each player without valid orders (and only them); returns how many.

        A reminder whose deadline was moved later since it was planned only re-plans. If
        the database fails, the reminder is tried again in RETRY_SECONDS."""
        job_id = f"remind:{game_name}:{number}"
        self._running(job_id)
        try:
            due = reminders_due_at(self.db, game_name, number)
            if due is not None and self.clock() < due:
                self.replan(names=[game_name])
                return 0
            return self._remind(game_name, number)
        except Exception as exc:
            log.error(
                "%s: round %d: sending reminders failed (%s: %s); retrying in %ds",
                game_name,
                number,
                type(exc).__name__,
                exc,
                RETRY_SECONDS,
            )
            if self.scheduler is not None:
                self._add(job_id, self.clock() + timedelta(seconds=RETRY_SECONDS), own=True)
            return 0

    def _remind(self, game_name: str, number: int) -> int:
        sent = send_reminders(self.db, self.config, game_name, number, self.clock())
        log.info("%s: round %d reminders sent to %s", game_name, number, counted(sent, "player"))
        return sent

    def check_all_in(self, game_name: str) -> datetime | None:
        """close_when_all_in: once every player has valid orders, close after the settle time.

        Called after orders arrive; returns when the early close is planned (or None).
        """
        found = all_in_close_at(self.db, game_name, self.clock())
        if found is None:
            return None
        number, at = found
        self._all_in_at(game_name, number, at)
        return at

    def _all_in_at(self, game_name: str, number: int, at: datetime) -> None:
        if self.scheduler is not None:
            self.scheduler.add_job(
                self.on_all_in,
                "date",
                run_date=at,
                id=f"allin:{game_name}:{number}",
                args=(game_name, number),
                replace_existing=True,
                misfire_grace_time=None,
            )

    def on_all_in(self, game_name: str, number: int) -> CloseOutcome | None:
        """The settle time after everyone's orders: close if all are still valid."""
        return self.on_deadline(game_name, number, early=True, all_in=True)

    # -- the circuit breaker ---------------------------------------------------------------

    def intake_unhealthy(self) -> str | None:
        """Why intake cannot be trusted now, or None (also None with no IMAP configured)."""
        imap = self.config.settings.mail.imap
        if imap is None:
            return None
        last_ok, since = self._health()
        return intake_problem(imap, last_ok, since, self.clock())

    def _health(self) -> tuple[datetime | None, datetime | None]:
        imap = self.config.settings.mail.imap
        return intake_health(self.db, imap_source(imap)) if imap else (None, None)

    def _hold(self, game_name: str, number: int, problem: str) -> None:
        imap = self.config.settings.mail.imap
        assert imap is not None
        held = hold_round(
            self.db, self.config, game_name, number, problem, self.clock(), imap.healthy_within
        )
        if held:
            log.error("%s: round %d held: %s", game_name, number, problem)

    # -- helpers ----------------------------------------------------------------------------

    def _close(
        self, game_name: str, number: int, actor: str, backup_after: datetime | None = None
    ) -> CloseOutcome | None:
        """Close the round and re-plan its game (only: the cost of a close does not grow
        with the number of games).

        SQLite: a backup is written first, unless ``backup_after`` (a scheduled close: the
        round's deadline) is given and this server wrote one at or after it: that copy
        already holds the game as it stood when its orders stopped counting. So the games
        due at one deadline share one backup, written before the first of them closes."""
        turns = write_turns(self.db)  # SQLite: the sender gets the write lock between closes
        with turns.closing() if turns is not None else contextlib.nullcontext():
            now = self.clock()
            last = self._backup_at
            backup = backup_after is None or last is None or last < backup_after
            outcome = close_with_backup(
                self.db,
                game_name,
                now,
                actor=actor,
                expect_round=number,
                config=self.config,
                skip_locked=True,  # another server closing it: skipped (RoundBusy), not waited
                plan=self.scheduler is not None,  # the re-plan's read in the close's transaction
                **self._backup(backup),
            )
        if backup:
            self._backup_at = now
        if outcome is not None:
            self._closed(outcome)
            if outcome.open_rounds is not None:
                self._replan_with([game_name], outcome.open_rounds)
        return outcome

    def _closed(self, outcome: CloseOutcome) -> None:
        if self.after_close is not None:
            self.after_close(outcome)

    def _due(self) -> list[tuple[str, int, datetime]]:
        return due_rounds(self.db, self.clock())

    def _in_own_order(
        self, due: list[tuple[str, int, datetime]]
    ) -> list[tuple[str, int, datetime]]:
        """The rounds due, oldest deadline first, those of one deadline in this server's
        own order (``_spread``): servers started together after an outage do not walk
        the same games one behind the other. Two games drawn the same microsecond go as
        APScheduler runs them: in the order of their jobs' ids."""
        return sorted(due, key=lambda r: (r[2], self._spread(r[0]), f"close:{r[0]}:{r[1]}"))

    def _backup(self, write: bool) -> dict[str, Any]:
        database = self.config.settings.database
        return {"backups": database.backups if write else 0, "backup_dir": database.backup_dir}
