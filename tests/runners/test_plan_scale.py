"""The schedule at scale (issue 23): what a close costs does not grow with the number of
games; a job already due is never given again; the referee's changes and other servers'
closes are found in the change feed (``plan_changes``), which re-plans those games only;
games due at one deadline share one backup. Counted in SQL statements, jobs given to
APScheduler and log lines, never in seconds."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from mailhelpers import T0
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from snl_pbem.app.close_claim import claim_closing
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.referee import extend
from snl_pbem.app.rounds import close_with_backup
from snl_pbem.app.schedule import feed_start, read_changes, trim_changes
from snl_pbem.config import load_config
from snl_pbem.runners import scheduler as scheduler_module
from snl_pbem.runners.scheduler import (
    LOOK_AGAIN_SECONDS,
    SPREAD_MICROSECONDS,
    RoundScheduler,
    make_scheduler,
)
from snl_pbem.store import Database, Game
from snl_pbem.store.migrate import upgrade

DEADLINE = T0.replace(year=2030, month=1, day=4, hour=18)


class Clock:
    def __init__(self, now=T0) -> None:
        self.now = now

    def __call__(self):
        return self.now


def games_config(path: Path, url: str, n: int, backups: int = 0) -> None:
    games = "".join(
        f"""
[[games]]
id = "g{i}"
board = {{ snakes = {{ "47" = 26 }}, ladders = {{ "4" = 14 }} }}
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann{i}@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob{i}@example.org", key = "bob-key-123" }},
]
"""
        for i in range(1, n + 1)
    )
    path.write_text(f"""
timezone = "Europe/London"
[database]
url = "{url}"
backups = {backups}
[mail]
address = "snl@example.org"
referee = "ref@example.org"
{games}""")


def started(tmp_path: Path, url: str, n: int, backups: int = 0):
    db = Database(url)
    upgrade(db)
    path = tmp_path / f"c{n}.toml"
    games_config(path, url, n, backups)
    config = load_config(path)
    sync_games(db, config, T0)
    for i in range(1, n + 1):
        start_game(db, config, f"g{i}", T0)
    return db, config


class Counter:
    """SQL statements run and jobs given to APScheduler."""

    def __init__(self, db: Database, scheduler) -> None:
        self.statements = 0
        self.jobs: list[str] = []
        event.listen(db.engine, "before_cursor_execute", self._statement)
        add_job = scheduler.add_job

        def counted_add_job(*args, **kwargs):
            self.jobs.append(kwargs.get("id", "?"))
            return add_job(*args, **kwargs)

        scheduler.add_job = counted_add_job

    def _statement(self, *_args) -> None:
        self.statements += 1

    def take(self) -> tuple[int, list[str]]:
        taken = self.statements, self.jobs
        self.statements, self.jobs = 0, []
        return taken


def planned_at(scheduler, job_id: str, at, db: Database) -> bool:
    """The job runs at ``at``: on PostgreSQL, put off by under SPREAD_MICROSECONDS (each
    server closes a deadline's games in an order of its own)."""
    run_date = scheduler.get_job(job_id).trigger.run_date
    if db.is_sqlite:
        return run_date == at
    return at <= run_date < at + timedelta(microseconds=SPREAD_MICROSECONDS)


def scheduled(db: Database, config, now=T0) -> tuple[object, Clock, RoundScheduler]:
    """A paused APScheduler and a RoundScheduler on it, its plan built, at ``now``."""
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    clock = Clock(now)
    rs = RoundScheduler(db, config, clock=clock, scheduler=scheduler)
    rs.rebuild()
    return scheduler, clock, rs


def claimed_by_another(db: Database, game_name: str) -> Session:
    """Another server, mid-close of the game: its transaction holds the game's close claim
    (roll it back: the server died before it committed)."""
    other = Session(db.engine)
    other.begin()
    assert claim_closing(other, game_name, wait=True)
    return other


def storm(tmp_path: Path, url: str, n: int, caplog) -> tuple[int, int, int]:
    """n games due at one deadline, each closed by its job: the most SQL statements and
    jobs given in one close, and the log records per game."""
    db, config = started(tmp_path, url, n)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    clock = Clock()
    rs = RoundScheduler(db, config, clock=clock, scheduler=scheduler)
    rs.rebuild()
    counter = Counter(db, scheduler)
    clock.now = DEADLINE
    caplog.clear()
    most_statements = most_jobs = 0
    for i in range(1, n + 1):
        counter.take()
        outcome = rs.on_deadline(f"g{i}", 1)
        assert outcome is not None and outcome.next_round == 2
        statements, jobs = counter.take()
        assert jobs == [f"close:g{i}:2"]  # its next round's close: nothing of other games
        most_statements = max(most_statements, statements)
        most_jobs = max(most_jobs, len(jobs))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    lines = len(caplog.records)
    assert {job.id for job in scheduler.get_jobs() if job.id.startswith("close:")} == {
        f"close:g{i}:2" for i in range(1, n + 1)
    }
    scheduler.shutdown(wait=False)
    db.dispose()
    return most_statements, most_jobs, lines


def test_a_close_costs_the_same_with_3_games_or_30(db_url, tmp_path, caplog) -> None:
    """The probe's storm was quadratic: every close re-planned every game. Now a close
    re-plans its own game only: the SQL it runs, the jobs it gives and the lines it logs
    are the same per game whatever the number of games."""
    caplog.set_level(logging.INFO)
    (tmp_path / "small").mkdir()
    small = storm(tmp_path / "small", db_url, 3, caplog)
    if db_url.startswith("postgresql"):  # a fresh database for the second size
        with Database(db_url).engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    else:
        db_url = db_url.replace(".db", "-big.db")
    big = storm(tmp_path, db_url, 30, caplog)
    assert big[0] <= small[0] and big[1] == small[1] == 1
    assert big[2] / 30 <= small[2] / 3  # log lines in proportion to the games


def test_a_job_already_due_is_never_given_again(tmp_path) -> None:
    """APScheduler drops a date job once it has fired; re-planning used to give it again,
    so it fired again (half a million skipped runs and warnings at 1,000 games)."""
    db, config = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", 3)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    clock = Clock(DEADLINE)
    rs = RoundScheduler(db, config, clock=clock, scheduler=scheduler)
    rs.rebuild()
    counter = Counter(db, scheduler)
    scheduler.remove_job("close:g1:1")  # as APScheduler does when it hands the job to a worker
    rs.rebuild()
    rs.replan(names=["g1", "g2", "g3"])
    assert counter.take()[1] == []
    assert scheduler.get_job("close:g1:1") is None
    rs.on_deadline("g1", 1)  # the run begins, closes round 1: round 2 is planned
    assert counter.take()[1] == ["close:g1:2"]
    scheduler.shutdown(wait=False)


def test_the_change_feed_replans_the_changed_game_only(db_url, tmp_path) -> None:
    """`extend` from the command line while the server runs (another process): the rescan
    finds it in the change feed and moves that game's job, and gives no other job."""
    db, config = started(tmp_path, db_url, 3)
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    told: list[str] = []  # the game pages are told (snl_pbem.runners.sitekeeper)
    rs = RoundScheduler(
        db, config, clock=Clock(), scheduler=scheduler, on_change=lambda: told.append("now")
    )
    rs.rebuild()
    counter = Counter(db, scheduler)
    rs._rescan()
    assert counter.take()[1] == []  # nothing changed: nothing given
    assert told == []
    extend(db, "g2", T0, by=timedelta(hours=5), config=config)
    rs._rescan()
    assert counter.take()[1] == ["close:g2:1"]
    assert told == ["now"]
    assert planned_at(scheduler, "close:g2:1", DEADLINE + timedelta(hours=5), db)
    assert planned_at(scheduler, "close:g1:1", DEADLINE, db)
    rs._rescan()
    assert counter.take()[1] == []  # read once
    scheduler.shutdown(wait=False)


def test_the_feed_sees_a_change_committed_after_a_later_one(postgres, tmp_path) -> None:
    """PostgreSQL: a transaction that began first may commit last, its rows' ids below rows
    already read. The feed still reads it, once."""
    url = postgres.url(postgres.create_database())
    db, _ = started(tmp_path, url, 2)
    with db.transaction() as s:
        ids = dict(s.execute(text("SELECT key, id FROM games")).all())
    feed = feed_start(db)
    slow = db.engine.connect()
    slow_tx = slow.begin()
    slow.execute(text("UPDATE rounds SET deadline = deadline WHERE game_id = :g"), {"g": ids["g1"]})
    with db.transaction() as s:  # begins later, commits first
        s.execute(
            text("UPDATE rounds SET deadline = deadline WHERE game_id = :g"), {"g": ids["g2"]}
        )
    assert read_changes(db, feed) == {ids["g2"]}
    slow_tx.commit()
    slow.close()
    assert read_changes(db, feed) == {ids["g1"]}
    assert read_changes(db, feed) == set()


def test_games_due_at_one_deadline_share_one_backup(tmp_path) -> None:
    """SQLite: one backup before the first close of a storm (it holds every game as it stood
    at the deadline), not one per game; a close the referee makes gets its own."""
    db, config = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", 4, backups=10)
    clock = Clock(DEADLINE)
    rs = RoundScheduler(db, config, clock=clock)
    for i in range(1, 4):
        assert rs.on_deadline(f"g{i}", 1) is not None
    backups = sorted((tmp_path / "backups").glob("*.sqlite"))
    assert [b.name.split("-", 2)[2] for b in backups] == ["g1-before-close.sqlite"]
    clock.now += timedelta(minutes=1)
    close_with_backup(db, "g4", clock.now, backups=10, actor="referee")
    assert len(list((tmp_path / "backups").glob("*.sqlite"))) == 2
    clock.now = DEADLINE + timedelta(days=3)  # the next deadline: a new backup
    assert rs.on_deadline("g1", 2) is not None
    assert len(list((tmp_path / "backups").glob("*.sqlite"))) == 3
    with db.transaction() as s:
        assert s.query(Game).count() == 4


def test_a_round_another_server_is_closing_is_looked_at_again(postgres, tmp_path, caplog) -> None:
    """Several servers on one PostgreSQL: a close finding the game locked by another server
    skips it (no waiting, no error) and looks again in LOOK_AGAIN_SECONDS, so that a server
    killed mid-close still gets its round closed by another."""
    url = postgres.url(postgres.create_database())
    db, config = started(tmp_path, url, 1)
    scheduler, clock, rs = scheduled(db, config, DEADLINE)
    other = claimed_by_another(db, "g1")
    caplog.set_level(logging.INFO)
    again = DEADLINE + timedelta(seconds=LOOK_AGAIN_SECONDS)
    assert rs.on_deadline("g1", 1) is None
    assert scheduler.get_job("close:g1:1").trigger.run_date == DEADLINE + timedelta(
        seconds=LOOK_AGAIN_SECONDS
    )
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "being closed, or looked at, by another server" in caplog.text
    other.rollback()  # it died before it committed
    other.close()
    rs.rebuild()  # a re-plan leaves the look-again job as it is
    assert scheduler.get_job("close:g1:1").trigger.run_date == DEADLINE + timedelta(
        seconds=LOOK_AGAIN_SECONDS
    )
    clock.now = again
    outcome = rs.on_deadline("g1", 1)
    assert outcome is not None and outcome.next_round == 2
    scheduler.shutdown(wait=False)


def test_a_game_another_server_is_closing_costs_one_transaction(postgres, tmp_path) -> None:
    """The close's claim is the first thing the job's decision reads: a game another server
    holds is found busy in one transaction and one statement after BEGIN (before, the
    decision read the game and its waiting mail, and a close's transaction then found the
    claim taken: two transactions, three statements). A game free of claims closes as ever."""
    url = postgres.url(postgres.create_database())
    db, config = started(tmp_path, url, 2)
    scheduler, _, rs = scheduled(db, config, DEADLINE)
    counter = Counter(db, scheduler)
    begins: list[object] = []
    event.listen(db.engine, "begin", begins.append)
    other = claimed_by_another(db, "g1")
    counter.take()
    begins.clear()
    assert rs.on_deadline("g1", 1) is None
    assert len(begins) == 1
    assert counter.take() == (1, ["close:g1:1"])  # the claim; the look again
    other.rollback()
    other.close()
    assert rs.on_deadline("g2", 1) is not None  # nobody holds g2: closed
    scheduler.shutdown(wait=False)
    db.dispose()


def test_each_server_closes_a_deadlines_games_in_an_order_of_its_own(
    db_url, tmp_path, monkeypatch
) -> None:
    """Several servers on one PostgreSQL: APScheduler runs jobs due at one time in the
    order of their ids, so every server walked a storm's games alike and found most of
    them being closed by another. Each server now has an order of its own (every game put
    off by under a millisecond), the same at every plan it makes, and APScheduler hands
    the jobs out in it; catch-up after an outage walks the same order, two games drawn the
    same microsecond included (the third server draws 30 games in 3 microseconds, so ties
    are certain). SQLite: one server, the deadline itself, in the order of the jobs' ids."""
    db, config = started(tmp_path, db_url, 30)
    orders = []
    for server in range(3):
        if server == 2:
            monkeypatch.setattr(scheduler_module, "SPREAD_MICROSECONDS", 3)
        scheduler, clock, rs = scheduled(db, config)
        assert rs.plan() == rs.plan()  # the same times at every plan of one server
        jobs = [job for job in scheduler.get_jobs() if job.id.startswith("close:")]
        assert len(jobs) == 30
        for job in jobs:
            assert planned_at(scheduler, job.id, DEADLINE, db)
        order = [job.id.split(":")[1] for job in jobs]  # as APScheduler hands them out
        clock.now = DEADLINE + timedelta(minutes=1)
        caught_up = [name for name, _, _ in rs._in_own_order(rs._due())]
        if db.is_sqlite:  # the order of the jobs' ids
            assert order == sorted(order, key=lambda name: f"close:{name}:1")
        assert caught_up == order
        orders.append(order)
        scheduler.shutdown(wait=False)
    if db.is_sqlite:
        assert orders[0] == orders[1] == orders[2]
    else:
        # not the same games first (by chance: 1 in 17 million)
        assert orders[0][:5] != orders[1][:5]
    db.dispose()


def test_a_claim_taken_between_the_decision_and_the_close_is_looked_at_again(
    postgres, tmp_path, monkeypatch
) -> None:
    """The decision found the game free, then another server took its claim before the
    close did: the close skips it (RoundBusy) and looks again, as when the decision finds
    it taken."""
    url = postgres.url(postgres.create_database())
    db, config = started(tmp_path, url, 1)
    scheduler, _, rs = scheduled(db, config, DEADLINE)
    others: list[Session] = []
    real_decide = scheduler_module.decide

    def decide_then_lose_the_claim(*args, **kwargs):
        decision = real_decide(*args, **kwargs)
        others.append(claimed_by_another(db, "g1"))  # another server's close begins
        return decision

    monkeypatch.setattr(scheduler_module, "decide", decide_then_lose_the_claim)
    assert rs.on_deadline("g1", 1) is None
    assert scheduler.get_job("close:g1:1").trigger.run_date == DEADLINE + timedelta(
        seconds=LOOK_AGAIN_SECONDS
    )
    assert rs.failures == []
    (other,) = others
    other.rollback()
    other.close()
    scheduler.shutdown(wait=False)
    db.dispose()


def test_an_all_in_close_finding_the_game_busy_looks_again_as_itself(postgres, tmp_path) -> None:
    """close-when-all-in's job finding the claim taken (another server deciding, perhaps
    not to close) looks again with a job of its own kind: a deadline's job would find the
    round not yet due and leave the early close to the deadline."""
    url = postgres.url(postgres.create_database())
    db, config = started(tmp_path, url, 1)
    settled = DEADLINE - timedelta(hours=3)
    scheduler, _, rs = scheduled(db, config, settled)
    deadline_job = scheduler.get_job("close:g1:1").trigger.run_date
    other = claimed_by_another(db, "g1")
    assert rs.on_all_in("g1", 1) is None
    again = scheduler.get_job("allin:g1:1")
    assert again is not None
    assert again.trigger.run_date == settled + timedelta(seconds=LOOK_AGAIN_SECONDS)
    assert scheduler.get_job("close:g1:1").trigger.run_date == deadline_job  # untouched
    other.rollback()
    other.close()
    scheduler.shutdown(wait=False)
    db.dispose()


def test_the_daily_trim_never_makes_the_feed_miss_a_change(db_url, tmp_path) -> None:
    """The trim deletes what every scheduler has read long since; on SQLite, emptying the
    table made it hand out ids from 1 again, below where the feed had got to, and the
    referee's next change went unseen until the full rebuild."""
    db, config = started(tmp_path, db_url, 2)
    with db.transaction() as s:
        ids = dict(s.execute(text("SELECT key, id FROM games")).all())
    feed = feed_start(db)
    extend(db, "g1", T0, by=timedelta(hours=1), config=config)
    assert read_changes(db, feed) == {ids["g1"]}
    mark = trim_changes(db, 0)
    mark = trim_changes(db, mark)  # a quiet day: the next trim has nothing newer
    mark = trim_changes(db, mark)
    extend(db, "g2", T0, by=timedelta(hours=1), config=config)
    assert read_changes(db, feed) == {ids["g2"]}
