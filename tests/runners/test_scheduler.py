"""Deadlines, reminders, catch-up, close-when-all-in and the circuit breaker (clock injected)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from mailhelpers import T0, code_in, game_config
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.referee import extend, pause
from snl_pbem.config import load_config
from snl_pbem.runners.mailboxes import DatabaseHooks, imap_poller
from snl_pbem.runners.scheduler import RoundScheduler, make_scheduler
from snl_pbem.store import Database, OutboxMessage, Round
from snl_pbem.store.migrate import upgrade

DEADLINE = T0.replace(year=2030, month=1, day=4, hour=18)


class Clock:
    def __init__(self, now=T0) -> None:
        self.now = now

    def __call__(self):
        return self.now


def setup(tmp_path, extra: str = "", **kwargs):
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    game_config(path, db.url, **kwargs)
    text = path.read_text().replace('round_length = "3d"', 'round_length = "3d"\n' + extra)
    path.write_text(text)
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    return db, config


def order(db, config, who: str, dice: str, at, tag: str) -> None:
    raw = (
        f"From: {who}@example.org\r\nSubject: [g1]\r\nMessage-ID: <{tag}@x.org>\r\n\r\n"
        f"KEY {who}-key-123\r\nDICE {dice}\r\n"
    ).encode()
    ingest(db, config, raw, at, "t")


def kinds(db) -> list[tuple[str, str]]:
    with db.transaction() as s:
        return [
            (m.kind, m.recipient.split("@")[0])
            for m in s.scalars(
                select(OutboxMessage)
                .where(OutboxMessage.kind != "welcome")
                .order_by(OutboxMessage.id)
            )
        ]


def test_plan_deadline_and_reminder_then_close(tmp_path) -> None:
    db, config = setup(tmp_path, extra='remind_before = "24h"')
    clock = Clock()
    rs = RoundScheduler(db, config, clock=clock)
    assert [(p.job_id, p.run_at) for p in rs.plan()] == [
        ("close:g1:1", DEADLINE),
        ("remind:g1:1", DEADLINE - timedelta(hours=24)),
    ]
    order(db, config, "ann", "4", T0, "a")
    order(db, config, "bob", "4 4", T0, "b")  # invalid
    clock.now = DEADLINE - timedelta(hours=25)  # a reminder job from before an extend
    assert rs.on_reminder("g1", 1) == 0  # too early for this deadline: nobody reminded
    clock.now = DEADLINE - timedelta(hours=24)
    assert rs.on_reminder("g1", 1) == 2 and rs.on_reminder("g1", 1) == 0  # once
    assert kinds(db)[-2:] == [("reminder", "bob"), ("reminder", "cy")]
    clock.now = DEADLINE
    outcome = rs.on_deadline("g1", 1)
    assert outcome is not None and outcome.next_round == 2
    assert [k for k, _ in kinds(db)].count("report") == 3
    assert rs.on_deadline("g1", 1) is None  # exactly once
    assert [p.job_id for p in rs.plan()] == ["close:g1:2", "remind:g1:2"]


def test_catch_up_after_downtime_and_paused_games(tmp_path) -> None:
    db, config = setup(tmp_path)
    clock = Clock(DEADLINE + timedelta(days=10))  # the server was down over the deadline
    rs = RoundScheduler(db, config, clock=clock)
    [outcome] = rs.catch_up()
    assert outcome.round == 1 and outcome.next_deadline == clock.now + timedelta(days=3)
    assert rs.catch_up() == []
    pause(db, "g1", clock.now)
    clock.now += timedelta(days=30)
    assert rs.plan() == [] and rs.on_deadline("g1", 2) is None  # a paused deadline never fires


def test_extend_moves_the_job(tmp_path) -> None:
    db, config = setup(tmp_path)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    rs = RoundScheduler(db, config, clock=Clock(), scheduler=scheduler)
    rs.rebuild()
    assert scheduler.get_job("close:g1:1").trigger.run_date == DEADLINE
    extend(db, "g1", T0, by=timedelta(hours=5), config=config)
    rs.rebuild()
    assert scheduler.get_job("close:g1:1").trigger.run_date == DEADLINE + timedelta(hours=5)
    scheduler.shutdown(wait=False)


def test_a_deadline_extended_while_the_server_runs_does_not_close_early(tmp_path) -> None:
    """`extend` from the command line while the server runs: the job planned for the old
    deadline still fires, looks again, and only plans the close for the new time."""
    db, config = setup(tmp_path)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    clock = Clock()
    rs = RoundScheduler(db, config, clock=clock, scheduler=scheduler)
    rs.rebuild()
    assert scheduler.get_job("rescan").trigger.interval == timedelta(seconds=15)
    extend(db, "g1", T0, by=timedelta(hours=5), config=config)  # another process: no rebuild here
    clock.now = DEADLINE
    assert rs.on_deadline("g1", 1) is None  # the old job
    with db.transaction() as s:
        assert s.scalar(select(Round.state).where(Round.number == 1)) == "open"
    assert scheduler.get_job("close:g1:1").trigger.run_date == DEADLINE + timedelta(hours=5)
    clock.now = DEADLINE + timedelta(hours=5)
    assert rs.on_deadline("g1", 1) is not None
    scheduler.shutdown(wait=False)


def test_close_when_all_in_after_the_settle_time(tmp_path) -> None:
    db, config = setup(tmp_path, extra='close_when_all_in = true\nsettle_time = "10m"')
    clock = Clock()
    rs = RoundScheduler(db, config, clock=clock)
    order(db, config, "ann", "1", T0, "a")
    order(db, config, "bob", "2", T0, "b")
    assert rs.check_all_in("g1") is None
    order(db, config, "cy", "3", T0, "c")
    assert rs.check_all_in("g1") == T0 + timedelta(minutes=10)
    order(db, config, "cy", "3 3", T0, "c2")  # cy corrects into something invalid
    clock.now = T0 + timedelta(minutes=10)
    assert rs.on_all_in("g1", 1) is None  # not all in any more: wait for the deadline
    order(db, config, "cy", "5", clock.now, "c3")
    assert rs.on_all_in("g1", 1) is not None


def imap_game(tmp_path):
    """A started game whose server reads an IMAP mailbox (healthy_within 30 minutes)."""
    imap = (
        '\n[mail.imap]\nhost = "127.0.0.1"\nport = 1\ntls = "none"\nusername = "u"\n'
        'password = "p"\nhealthy_within = "30m"\n'
    )
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    game_config(path, db.url)
    text = path.read_text().replace("[[games]]", imap + "\n[[games]]")
    path.write_text(text)
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    return db, config


def test_circuit_breaker_holds_then_releases(tmp_path) -> None:
    db, config = imap_game(tmp_path)
    clock = Clock()
    hooks = DatabaseHooks(db, config, clock=clock)
    source = imap_poller(db, config).config.source
    hooks.acquire(source)
    hooks.healthy(source, 1)  # a good poll at T0 ...
    clock.now = DEADLINE - timedelta(hours=2)
    hooks.failed(source, "ConnectionRefusedError: [Errno 111]")  # ... then the mailbox broke
    rs = RoundScheduler(db, config, clock=clock)
    assert rs.held_check_seconds == 60  # looked at every minute (more often for short limits)
    clock.now = DEADLINE + rs.intake_grace  # when the close job runs (mail read first)
    assert rs.on_deadline("g1", 1) is None and rs.on_deadline("g1", 1) is None
    assert [k for k in kinds(db)] == [("round-held", "ref")]  # the referee, once
    assert rs.check_held() == []
    assert not [p for p in rs.plan() if p.job_id == "close:g1:1"]  # no deadline job now
    clock.now = DEADLINE + timedelta(hours=1)
    hooks.healthy(source, 1)  # intake works again ...
    clock.now += timedelta(minutes=29)
    assert rs.check_held() == []  # ... but not yet for the limit
    assert rs.on_deadline("g1", 1) is None  # nor by a deadline job planned before the hold
    clock.now += timedelta(minutes=1)
    [released] = rs.check_held()
    assert released.round == 1
    with db.transaction() as s:
        assert s.scalar(select(Round.state).where(Round.number == 1)) == "closed"


def test_extending_a_held_round_judges_it_again_at_the_new_deadline(tmp_path) -> None:
    db, config = imap_game(tmp_path)
    rs = RoundScheduler(db, config, clock=Clock(DEADLINE + timedelta(minutes=2)))
    assert rs.on_deadline("g1", 1) is None  # never read: held
    assert not [p for p in rs.plan() if p.job_id == "close:g1:1"]
    extend(db, "g1", DEADLINE, by=timedelta(days=1), config=config)
    [close] = [p for p in rs.plan() if p.job_id == "close:g1:1"]
    assert close.run_at == DEADLINE + timedelta(days=1) + rs.intake_grace
    with db.transaction() as s:
        assert s.scalar(select(Round.held_at).where(Round.number == 1)) is None


def test_apscheduler_really_fires(tmp_path) -> None:
    """One real timer: a deadline two seconds ahead closes the round by itself."""
    from datetime import UTC, datetime

    db, config = setup(tmp_path)
    soon = datetime.now(UTC) + timedelta(seconds=2)
    with db.transaction() as s:
        s.scalar(select(Round)).deadline = soon
    scheduler = make_scheduler()
    rs = RoundScheduler(db, config, scheduler=scheduler)
    rs.rebuild()
    scheduler.start()
    try:
        deadline = time.monotonic() + 120  # a hang detector: the close comes 2 s in
        state, jobs = "open", set()
        while time.monotonic() < deadline and (state == "open" or "close:g1:2" not in jobs):
            time.sleep(0.2)
            with db.transaction() as s:
                state = s.scalar(select(Round.state).where(Round.number == 1))
            jobs = {job.id for job in scheduler.get_jobs()}  # the job's rebuild plans round 2
    finally:
        scheduler.shutdown(wait=True)
    assert state == "closed"
    assert "close:g1:1" not in jobs and "close:g1:2" in jobs  # the next round is planned


def test_a_close_that_fails_is_retried_and_leaves_nothing_half_done(tmp_path) -> None:
    """The SQLite file locked by another process during a close: it fails cleanly, then
    succeeds on the retry."""
    import sqlite3

    db, config = setup(tmp_path)
    locked = Database(db.url, sqlite_busy_ms=200)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    rs = RoundScheduler(locked, config, clock=Clock(DEADLINE), scheduler=scheduler)
    blocker = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        assert rs.on_deadline("g1", 1) is None
        assert rs.failures and "locked" in rs.failures[0]
        retry = scheduler.get_job("close:g1:1")
        assert retry.trigger.run_date == DEADLINE + timedelta(seconds=30)
        blocker.execute("ROLLBACK")
        with db.transaction() as s:  # nothing was half done
            assert s.scalar(select(Round.state).where(Round.number == 1)) == "open"
        assert rs.on_deadline("g1", 1) is not None  # the retry succeeds
    finally:
        blocker.close()
        scheduler.shutdown(wait=False)
        locked.dispose()


def test_a_game_filled_by_mail_has_round_1_planned_at_once(tmp_path) -> None:
    """A CONFIRM that fills a game with starts = "when_full" starts it in the intake's
    transaction; serve plans round 1's close right then, not at its next rescan (up to
    RESCAN_SECONDS later: a demo's round lasts a few seconds)."""
    from snl_pbem.runners.server import Server

    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    path.write_text(
        f'timezone = "UTC"\n[database]\nurl = "{db.url}"\n[mail]\n'
        'address = "snl@example.org"\nreferee = "ref@example.org"\n[[games]]\nid = "full2"\n'
        'board = "standard"\nfirst_deadline = "2029-12-01T12:00"\nround_length = "1h"\n'
        'signup = "open"\nmax_players = 2\nstarts = "when_full"\n'
    )
    config = load_config(path)
    sync_games(db, config, T0)
    server = Server(path, clock=Clock())
    server.config, server.db = config, db
    server.rounds = RoundScheduler(db, config, clock=Clock(), scheduler=make_scheduler())
    server.rounds.rebuild()

    def mail(who: str, body: str) -> str:
        raw = (
            f"From: {who}@example.net\r\nSubject: hi\r\nMessage-ID: <{who}{len(body)}"
            f"{body[:4]}@x.net>\r\n\r\n{body}\r\n"
        ).encode()
        result = ingest(db, config, raw, T0, "t")
        server._after_ingest(result)
        return result.detail

    def code(who: str) -> str:
        with db.transaction() as s:
            text = (
                s.scalars(
                    select(OutboxMessage.message).where(
                        OutboxMessage.recipient == f"{who}@example.net",
                        OutboxMessage.kind == "code",
                    )
                )
                .one()
                .decode()
            )
        return code_in(text)

    def planned() -> list[tuple[str, object]]:
        return [
            (j.id, j.trigger.run_date)
            for j in server.rounds.scheduler.get_jobs()
            if j.id.startswith("close:")
        ]

    for who in ("xa", "xb"):
        assert mail(who, f"JOIN full2 {who}") == "join: code sent"
    assert mail("xa", f"CONFIRM {code('xa')}") == "joined full2 as xa: seated"
    assert planned() == []
    assert mail("xb", f"CONFIRM {code('xb')}") == ("joined full2 as xb: seated; the game started")
    # the first deadline (T0) had come: round 1 is one round length after the start
    assert planned() == [("close:full2:1", T0 + timedelta(hours=1))]


# -- the start-up grace with LMTP, and the worker (issue 21) -------------------------------

WAIT = 120  # waits end on their event (a second or so); the limit only detects a hang


def two_games_after_their_deadline(tmp_path, lmtp: str):
    """g1 and g2, each with round 1 open and its deadline just passed (serve was down),
    and a [mail.lmtp] section."""
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    game_config(path, db.url)
    text = path.read_text()
    g2 = text[text.index("[[games]]") :].replace('id = "g1"', 'id = "g2"')
    path.write_text(f"{text}\n{g2}\n[mail.lmtp]\n{lmtp}")
    config = load_config(path)
    sync_games(db, config, T0)
    for game in ("g1", "g2"):
        start_game(db, config, game, T0)
    with db.transaction() as s:
        for round_ in s.scalars(select(Round)):
            round_.deadline = datetime.now(UTC) - timedelta(minutes=1)
    return db, config


def test_rounds_due_at_the_end_of_the_grace_all_close_without_a_warning(tmp_path, caplog):
    """Issue 21: two rounds closing at the end of the start-up grace logged APScheduler's
    "Execution of job ... skipped: maximum number of running instances reached (1)". The
    first close re-plans the rounds, and the second's job, due, was handed to the worker
    again while its first run still waited there. Both close; nothing is logged as a
    warning."""
    caplog.set_level(logging.DEBUG, logger="apscheduler")
    caplog.set_level(logging.INFO)
    db, config = two_games_after_their_deadline(tmp_path, 'redelivery_grace = "2s"\n')
    closed: list[str] = []
    both = threading.Event()

    def after_close(outcome) -> None:
        closed.append(outcome.game)
        if len(closed) == 2:
            both.set()

    scheduler = make_scheduler()
    rs = RoundScheduler(db, config, scheduler=scheduler, after_close=after_close)
    scheduler.start(paused=True)
    try:
        assert rs.catch_up() == []  # the grace: planned for its end, both at the same time
        runs = {
            job.id: job.trigger.run_date
            for job in scheduler.get_jobs()
            if job.id.startswith("close:")
        }
        assert runs["close:g1:1"] == runs["close:g2:1"] == rs.redelivery_until
        scheduler.resume()
        assert both.wait(WAIT), f"closed: {closed}"
    finally:
        scheduler.shutdown(wait=True)
    assert sorted(closed) == ["g1", "g2"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_job_due_again_while_it_runs_or_waits_is_never_skipped(caplog) -> None:
    """A job that falls due while a run of it is under way runs again after it (APScheduler's
    own pool skipped it, with a warning, and a date job skipped so was gone: a close lost
    until the next rescan); one that falls due while a run of it waits for the worker is
    merged into that run (every job reads the database when it runs)."""
    caplog.set_level(logging.DEBUG, logger="apscheduler")
    from apscheduler.events import EVENT_JOB_EXECUTED, EVENT_JOB_SUBMITTED

    scheduler = make_scheduler()
    runs: list[str] = []
    submitted: list[str] = []
    executed = threading.Semaphore(0)
    under_way, release = threading.Event(), threading.Event()

    def close(tag: str) -> None:
        runs.append(tag)
        if tag == "first":
            under_way.set()
            release.wait(WAIT)

    def due(tag: str) -> None:
        count = len(submitted)
        scheduler.add_job(
            close,
            "date",
            run_date=datetime.now(UTC),
            id="close:g1:1",
            args=(tag,),
            replace_existing=True,
        )
        deadline = time.monotonic() + WAIT
        while len(submitted) == count and time.monotonic() < deadline:
            time.sleep(0.01)  # until the scheduler has handed it to the worker
        assert len(submitted) == count + 1

    scheduler.add_listener(lambda e: submitted.append(e.job_id), EVENT_JOB_SUBMITTED)
    scheduler.add_listener(lambda e: executed.release(), EVENT_JOB_EXECUTED)
    scheduler.start()
    try:
        due("first")
        assert under_way.wait(WAIT)
        due("again")  # while "first" is under way
        due("merged")  # while "again" waits for the worker
        release.set()
        assert executed.acquire(timeout=WAIT) and executed.acquire(timeout=WAIT)
    finally:
        scheduler.shutdown(wait=True)
    assert runs == ["first", "again"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_stopping_waits_for_a_close_that_replans(tmp_path) -> None:
    """serve's stop while a close is under way: the close re-plans the rounds (which needs
    the scheduler's job store), and the stop waits for it. APScheduler's own shutdown held
    that store's lock while it waited: neither ended (systemd killed serve)."""
    scheduler = make_scheduler()
    under_way, release = threading.Event(), threading.Event()

    def close() -> None:
        under_way.set()
        release.wait(WAIT)
        scheduler.get_jobs()  # what rebuild does after a close

    scheduler.add_job(close, "date", run_date=datetime.now(UTC), id="close:g1:1")
    scheduler.start()
    assert under_way.wait(WAIT)
    stopping = threading.Thread(target=scheduler.shutdown, kwargs={"wait": True}, daemon=True)
    stopping.start()
    time.sleep(0.2)  # the stop has begun (if it had not, the close ends first: no harm)
    release.set()
    stopping.join(WAIT)
    assert not stopping.is_alive(), "the stop never ended"


def test_the_mta_s_word_ends_the_grace_at_once(tmp_path) -> None:
    """The LMTP receiver says the MTA has delivered its queue (ETRN answered, nothing more
    coming): the rounds waiting on the start-up grace are planned for now, not its end."""
    db, config = two_games_after_their_deadline(tmp_path, "")
    started = datetime.now(UTC)
    clock = Clock(started)
    rs = RoundScheduler(db, config, clock=clock)
    limit = started + timedelta(minutes=11)  # the default grace
    assert rs.catch_up() == [] and rs.redelivery_until == limit
    assert {p.run_at for p in rs.plan()} == {limit}
    clock.now = started + timedelta(seconds=11)
    rs.redelivered()
    assert rs.redelivery_until == clock.now
    assert {p.run_at for p in rs.plan()} == {clock.now}
    assert rs.on_deadline("g1", 1) is not None and rs.on_deadline("g2", 1) is not None
    rs.redelivered()  # once the grace is over, the word changes nothing
    assert rs.redelivery_until == started + timedelta(seconds=11)


def test_the_mta_s_word_is_nothing_without_a_grace(tmp_path) -> None:
    db, config = two_games_after_their_deadline(tmp_path, 'redelivery_grace = "0s"\n')
    rs = RoundScheduler(db, config)
    rs.redelivered()
    assert rs.redelivery_until is None and rs.redelivered_at is None


def test_an_all_in_round_waiting_on_the_grace_closes_once_the_mta_has_delivered(tmp_path):
    """close_when_all_in during the start-up grace: the early close waits for the grace (an
    order may still be in the MTA's queue). The MTA's word ends the grace: the all-in close
    is planned for now, not left at the grace's limit (11 minutes). The word is acted on
    by a job on the worker, one at a time with the closes (two rebuilds at once, one from
    the receiver's thread, could drop a close)."""
    from apscheduler.events import EVENT_JOB_EXECUTED

    db, config = setup(tmp_path, extra='close_when_all_in = true\nsettle_time = "1m"')
    path = tmp_path / "c.toml"
    path.write_text(path.read_text() + "\n[mail.lmtp]\n")
    config = load_config(path)
    clock = Clock(T0)
    scheduler = make_scheduler()
    rs = RoundScheduler(db, config, clock=clock, scheduler=scheduler)
    replanned = threading.Event()
    scheduler.add_listener(
        lambda e: e.job_id == "redelivered" and replanned.set(), EVENT_JOB_EXECUTED
    )
    scheduler.start()  # T0 is years ahead: the planned jobs do not fire by themselves
    try:
        for who, dice in (("ann", "1"), ("bob", "2"), ("cy", "3")):
            order(db, config, who, dice, T0, who)
        assert rs.check_all_in("g1") == T0 + timedelta(minutes=1)
        clock.now = T0 + timedelta(minutes=1)
        assert rs.on_all_in("g1", 1) is None  # the grace: not yet
        limit = T0 + timedelta(minutes=11)
        assert scheduler.get_job("allin:g1:1").next_run_time == limit
        clock.now = T0 + timedelta(seconds=90)
        rs.redelivered()
        assert replanned.wait(WAIT)
        assert scheduler.get_job("allin:g1:1").next_run_time == clock.now
    finally:
        scheduler.shutdown(wait=True)
    assert rs.on_all_in("g1", 1) is not None  # what that job does: the round closes


def test_a_job_handed_over_while_the_worker_stops_is_no_error() -> None:
    """serve stops while a job is being handed to the worker: the stop waits for the hand-
    over (it closed the pool under it: RuntimeError "cannot schedule new futures after
    shutdown", a traceback in the journal)."""
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    worker = scheduler.worker
    ran = threading.Event()
    scheduler.add_job(ran.set, "date", run_date=T0, id="close:g1:1")
    job = scheduler.get_job("close:g1:1")
    hand_over = worker._do_submit_job

    def stopped_meanwhile(job, run_times) -> None:
        stopping = threading.Thread(target=worker.shutdown, daemon=True)
        stopping.start()
        stopping.join(0.5)  # it waits for this hand-over (without the lock: done at once)
        hand_over(job, run_times)

    worker._do_submit_job = stopped_meanwhile
    try:
        worker.submit_job(job, [datetime.now(UTC)])  # raised RuntimeError
        assert ran.wait(WAIT)  # what was handed over still runs
    finally:
        scheduler.shutdown(wait=True)
