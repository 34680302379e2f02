"""Benchmark: the game pages ([web]) after a round close, at 1,000 hosted games.

N running postal games (default 10 players each, 3 rounds played) with a [web] dir, on
SQLite and on PostgreSQL (a private server started for the run, as the tests do). The
site is built once (the first build, every game's pages into an empty folder), a pass
with nothing changed is timed, then for --rounds closes, each of another game: the close
(``close_round`` as the scheduler calls it, with the config, so its reports are queued;
without the SQLite backup before it, which the games due at one deadline share) and the
site pass right after it (``Site.update()``), each timed. The property: every such pass
rewrites exactly one game's pages and the index, and no other game's files (checked by
their inodes: every file is renamed into place); the script exits 1 if one did not.

The baseline, in the same run on the same database: a rewrite of every game's pages
(``update(everything=True)``), what rewriting the whole site at each close would cost.
The pass is also timed in its parts (the functions it calls, wrapped with a timer): the
signature scan, reading and writing the closed game, the index, the sweep of the folder
for a killed pass's temporary files, and the rest (lock, stamps, transaction).

Setting up is not timed: the games are started once per size (``sync_games`` and
``start_game``, then every game's first rounds closed) in a seed SQLite database, which
each database gets a copy of (bench_hosting's helpers).

Run: .venv/bin/python tests/benchmarks/bench_site.py [--games 100,1000] [--players 10]
       [--played 3] [--rounds 20] [--db sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

from bench_hosting import copy_sqlite, copy_to_postgres, write_config
from pgserver import PostgresServer, PostgresUnavailable
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.rounds import close_round
from snl_pbem.config import Config, load_config
from snl_pbem.site import writer
from snl_pbem.site.writer import Site
from snl_pbem.store import Database, Game, Round
from snl_pbem.store.migrate import upgrade
from snl_pbem.store.states import RoundPhase

T0 = datetime(2030, 1, 1, tzinfo=UTC)
"""The clock of the whole run: the games start at T0, round 1 is due a day later."""
DAY = timedelta(days=1)
PARTS = ("signatures", "the game", "the index", "sweep")


def say(text: str) -> None:
    """Progress, on stderr (stdout holds the figures)."""
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- set-up (not timed) ------------------------------------------------------------------


def write_site_config(path: Path, url: str, games: int, players: int, site: Path) -> Config:
    """bench_hosting's config of ``games`` games (round 1 due at T0 + 1 day), with [web]."""
    write_config(path, url, games, players, T0 + DAY, port=2525)
    with path.open("a") as f:
        f.write(f'[web]\ndir = "{site}"\nbase_url = "https://games.example.org/snl/"\n')
    return load_config(path)


def build_seed(seed: Path, config: Config, played: int) -> None:
    """Every game started and its first ``played`` rounds closed, in the SQLite at ``seed``."""
    db = Database(f"sqlite:///{seed}")
    try:
        upgrade(db)
        sync_games(db, config, T0, actor="bench")
        for n, game in enumerate(config.games, 1):
            start_game(db, config, game.id, T0, via="bench")
            if n % 500 == 0:
                say(f"{n} of {len(config.games)} games started")
        for number in range(1, played + 1):
            when = T0 + number * DAY + timedelta(minutes=1)
            for game in config.games:
                assert close_round(db, game.id, when, expect_round=number) is not None
            say(f"round {number} closed in every game")
    finally:
        db.dispose()


# -- measuring -------------------------------------------------------------------------


class PartTimer:
    """Time spent in the functions a site pass calls, by part (wrapped once, for the run)."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)

    def wrap(self, owner: Any, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent[part] += time.perf_counter() - started

        setattr(owner, name, timed)

    def install(self) -> None:
        self.wrap(writer, "signatures", "signatures")
        self.wrap(writer, "game_page", "the game")
        self.wrap(Site, "_write_game", "the game")
        self.wrap(writer, "index_entries", "the index")
        self.wrap(Site, "_write_index", "the index")
        self.wrap(Site, "_sweep", "sweep")

    @contextlib.contextmanager
    def measure(self) -> Iterator[dict[str, float]]:
        """The parts of what runs inside: filled in (seconds) when it ends."""
        self.spent = dict.fromkeys(PARTS, 0.0)
        found: dict[str, float] = {}
        yield found
        found.update(self.spent)


TIMER = PartTimer()


def files(root: Path) -> dict[str, int]:
    """Every file under the site folder (relative path) and its inode: a rewritten file is
    a new inode (written beside, renamed over)."""
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            found[str(path.relative_to(root))] = path.stat().st_ino
    return found


@dataclass
class Result:
    database: str
    games: int
    first_s: float = 0.0
    idle_ms: float = 0.0
    closes_ms: list[float] = field(default_factory=list)
    passes_ms: list[float] = field(default_factory=list)
    parts_ms: list[dict[str, float]] = field(default_factory=list)
    checked: int = 0
    everything_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def close_ms(self) -> float:
        return statistics.median(self.closes_ms)

    @property
    def pass_ms(self) -> float:
        return statistics.median(self.passes_ms)

    def part_ms(self, part: str) -> float:
        return statistics.median(p[part] for p in self.parts_ms)


def site_pass(db: Database, config: Config, clock: datetime, everything: bool = False) -> Any:
    """One timed ``Site.update``: its report, seconds, and parts (ms)."""
    with TIMER.measure() as parts:
        started = time.perf_counter()
        report = Site(db, config, lambda: clock).update(everything=everything)
        elapsed = time.perf_counter() - started
    spent = {part: seconds * 1000 for part, seconds in parts.items()}
    spent["rest"] = elapsed * 1000 - sum(spent.values())
    return report, elapsed, spent


def measure(url: str, database: str, config: Config, rounds: int, played: int) -> Result:
    games = [game.id for game in config.games]
    result = Result(database, len(games))
    web = config.settings.web
    assert web is not None
    root = web.dir
    shutil.rmtree(root, ignore_errors=True)
    db = Database(url)
    try:
        clock = T0 + played * DAY + timedelta(minutes=1)
        report, elapsed, _ = site_pass(db, config, clock)
        result.first_s = elapsed
        if report.games != len(games) or not report.index:
            result.problems.append(
                f"the first build wrote {report.games} games, index {report.index}"
            )
        report, elapsed, _ = site_pass(db, config, clock)
        result.idle_ms = elapsed * 1000
        if report.games or report.index:
            result.problems.append(
                f"a pass with nothing changed wrote {report.games} games, index {report.index}"
            )
        for n in range(rounds):
            name = games[n * len(games) // rounds]  # spread over the games (more closes: again)
            with db.transaction() as s:
                number, deadline = s.execute(
                    select(Round.number, Round.deadline)
                    .join(Game, Game.id == Round.game_id)
                    .where(Game.name == name, Round.state == RoundPhase.OPEN)
                ).one()
            clock = deadline + timedelta(minutes=1)
            before = files(root)
            started = time.perf_counter()
            outcome = close_round(
                db,
                name,
                clock,
                expect_round=number,
                config=config,
                skip_locked=True,
                plan=True,
            )
            close_s = time.perf_counter() - started
            assert outcome is not None and outcome.round == number, outcome
            report, elapsed, parts = site_pass(db, config, clock)
            result.closes_ms.append(close_s * 1000)
            result.passes_ms.append(elapsed * 1000)
            result.parts_ms.append(parts)
            after = files(root)
            changed = {path for path, inode in after.items() if before.get(path) != inode}
            folder = f"games/{name}/"
            mine = {f"{folder}index.html", f"{folder}feed.xml"}
            allowed = mine | {f"{folder}board.svg", "index.html", writer.CSS, writer.STAMPS}
            if report.games != 1 or not report.index:
                result.problems.append(
                    f"close {n + 1} ({name} round {number}): the pass wrote "
                    f"{report.games} game(s), index {report.index}; should be 1 and the index"
                )
            elif not mine | {"index.html"} <= changed or changed - allowed:
                result.problems.append(
                    f"close {n + 1} ({name} round {number}): files rewritten: "
                    f"{', '.join(sorted(changed))}"
                )
            else:
                result.checked += 1
        report, elapsed, _ = site_pass(db, config, clock, everything=True)
        result.everything_s = elapsed
        if report.games != len(games):
            result.problems.append(f"the full rewrite wrote {report.games} games, not all")
    finally:
        db.dispose()
    return result


# -- printing ----------------------------------------------------------------------------


def print_measured(r: Result, rounds: int) -> None:
    """One size's figures, as soon as they are measured."""
    head = f"{r.database}, {r.games} games:"
    print(f"{head} first build, all {r.games} games: {r.first_s:.3f} s")
    print(f"{head} a pass with nothing changed: {r.idle_ms:.1f} ms")
    if r.closes_ms:
        parts = ", ".join(f"{p} {r.part_ms(p):.1f}" for p in (*PARTS, "rest"))
        print(
            f"{head} {rounds} closes (medians): close {r.close_ms:.1f} ms, then the site "
            f"pass {r.pass_ms:.1f} ms ({r.pass_ms / r.close_ms:.1f}x the close; {parts} ms); "
            f"1 game and the index rewritten, no other file: {r.checked} of {rounds}"
        )
        print(
            f"{head} baseline: a full rewrite of all {r.games} games (everything=True): "
            f"{r.everything_s:.3f} s = {r.everything_s * 1000 / r.pass_ms:.0f}x the pass, "
            f"{r.everything_s * 1000 / r.close_ms:.0f}x the close"
        )
    for problem in r.problems:
        print(f"{head} PROPERTY BROKEN: {problem}")
    sys.stdout.flush()


def print_tables(results: list[Result], rounds: int) -> None:
    print(
        f"\n{'database':<10} {'games':>6} {'first s':>8} {'idle ms':>8} {'close ms':>9} "
        f"{'pass ms':>8} {'pass/close':>10} {'all s':>7} {'all/pass':>8} {'checked':>8}"
    )
    for r in results:
        if not r.closes_ms:
            continue
        print(
            f"{r.database:<10} {r.games:>6} {r.first_s:>8.3f} {r.idle_ms:>8.1f} "
            f"{r.close_ms:>9.1f} {r.pass_ms:>8.1f} {r.pass_ms / r.close_ms:>9.1f}x "
            f"{r.everything_s:>7.3f} {r.everything_s * 1000 / r.pass_ms:>7.0f}x "
            f"{f'{r.checked}/{rounds}':>8}"
        )
    print(
        "  first s: the first build, every game's pages into an empty folder; idle ms: a pass\n"
        f"  with nothing changed; close ms, pass ms: medians of {rounds} closes, each of another\n"
        "  game, and the site pass after each; all s: the baseline, a rewrite of every game\n"
        "  (everything=True); checked: passes that rewrote 1 game and the index, no other file"
    )
    print(
        f"\nthe pass after a close, in parts (medians, ms)\n{'database':<10} {'games':>6} "
        + " ".join(f"{p:>11}" for p in (*PARTS, "rest"))
    )
    for r in results:
        if r.parts_ms:
            print(
                f"{r.database:<10} {r.games:>6} "
                + " ".join(f"{r.part_ms(p):>11.1f}" for p in (*PARTS, "rest"))
            )
    print(
        "  signatures: every game's, in four queries; the game: its page read and written\n"
        "  (page, feed); the index: read and written; sweep: the folder searched for a killed\n"
        "  pass's temporary files; rest: the lock, the stamps read and written, the transaction"
    )


# -- main --------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default="1000", help="sizes, comma-separated")
    parser.add_argument("--players", type=int, default=10, help="players a game")
    parser.add_argument("--played", type=int, default=3, help="rounds closed before the run")
    parser.add_argument("--rounds", type=int, default=20, help="closes timed a size")
    parser.add_argument("--db", default="sqlite,postgresql", help="sqlite, postgresql or both")
    args = parser.parse_args()
    args.sizes = [int(n) for n in args.games.split(",")]
    args.dbs = [d.strip() for d in args.db.split(",") if d.strip()]
    if unknown := set(args.dbs) - {"sqlite", "postgresql"}:
        parser.error(f"--db: not sqlite or postgresql: {', '.join(sorted(unknown))}")
    if args.rounds < 1 or args.played < 0:
        parser.error("--rounds must be at least 1, --played at least 0")
    return args


def main() -> None:
    args = parse_args()
    logging.getLogger("snl_pbem").setLevel(logging.WARNING)  # a log line per close: noise
    TIMER.install()
    postgres: PostgresServer | None = None
    pg_note = "no PostgreSQL"
    if "postgresql" in args.dbs:
        try:
            postgres = PostgresServer().start()
            pg_note = f"PostgreSQL from {postgres.bin}"
        except PostgresUnavailable as exc:
            pg_note = f"PostgreSQL not available ({exc}): its runs are left out"
    print(
        f"bench_site: Python {platform.python_version()}, {os.cpu_count()} cores, SQLite "
        f"{sqlite3.sqlite_version}, {pg_note}\n{args.players} players a game, "
        f"{args.played} rounds played in each; {args.rounds} closes a size, each of another "
        "game, each followed by a site pass",
        flush=True,
    )
    results: list[Result] = []
    folder = Path(tempfile.mkdtemp(prefix="snl-site-"))
    try:
        for games in args.sizes:
            size_dir = folder / f"g{games}"
            size_dir.mkdir()
            seed = size_dir / "seed.db"
            config_path = size_dir / "config.toml"
            config = write_site_config(
                config_path, f"sqlite:///{seed}", games, args.players, size_dir / "site"
            )
            say(f"{games} games: the seed database")
            started = time.monotonic()
            build_seed(seed, config, args.played)
            say(f"{games} games: seed built in {time.monotonic() - started:.0f} s")
            for database in args.dbs:
                if database == "sqlite":
                    run = size_dir / "run.db"
                    copy_sqlite(seed, run)
                    url = f"sqlite:///{run}"
                elif postgres is not None:
                    url = postgres.url(postgres.create_database())
                    copy_to_postgres(seed, url)
                else:
                    continue
                say(f"{games} games on {database}: measuring")
                result = measure(url, database, config, args.rounds, args.played)
                results.append(result)
                print_measured(result, args.rounds)
            shutil.rmtree(size_dir, ignore_errors=True)
    finally:
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print_tables(results, args.rounds)
    broken = [p for r in results for p in r.problems]
    if broken:
        print(f"\nPROPERTY BROKEN in {len(broken)} place(s): see above")
        sys.exit(1)
    print("\nproperty held: each close's pass rewrote its game's pages and the index, nothing else")


if __name__ == "__main__":
    main()
