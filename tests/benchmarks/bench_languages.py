"""Benchmark: what a round's mail costs in Chinese and Thai, against English.

One postal game of ``--players`` players on SQLite, every player played by the no-orders
default (R17), closed round by round through the scheduler's deadline (adjudication, the
turn records, and every player's report and the referee's summary rendered and queued,
in one transaction), three times over: all its players reading English, all Chinese, all
Thai. The baseline is the English game, run in the same process, the three taking turns
``--repeats`` times (a busy machine slows them alike); each figure is the best of its runs.
Thai costs most: its lines are broken between words found by PyThaiNLP's dictionary.
Goal: a Chinese or Thai round within 1.5x the English one.

Run: .venv/bin/python tests/benchmarks/bench_languages.py [--players 200] [--rounds 4]
[--repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from sqlalchemy import func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import load_config
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.store import Database, Game, OutboxMessage, Round
from snl_pbem.store.migrate import upgrade

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LANGUAGES = ("en", "zh-Hans", "th")


def config_text(url: str, language: str, players: int) -> str:
    rows = "\n".join(
        f'  {{ name = "p{n:03d}", email = "p{n:03d}@example.org" }},' for n in range(players)
    )
    return f"""
timezone = "Asia/Bangkok"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "g1"
title = "Benchmark"
board = "standard"
language = "{language}"
first_deadline = "2030-01-02T18:00"
round_length = "1d"
players = [
{rows}
]
"""


def one_game(folder: Path, language: str, players: int, rounds: int) -> tuple[float, int]:
    """Seconds to close ``rounds`` rounds (each close's own time, summed) and the mails
    they queued."""
    db = Database(f"sqlite:///{folder / f'{language}.db'}")
    upgrade(db)
    path = folder / f"{language}.toml"
    path.write_text(config_text(db.url, language, players))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    with db.transaction() as s:
        before = s.scalar(select(func.count()).select_from(OutboxMessage)) or 0
    now = [T0]
    scheduler = RoundScheduler(db, config, clock=lambda: now[0])
    spent = 0.0
    for _ in range(rounds):
        with db.transaction() as s:
            game_id = s.scalar(select(Game.id).where(Game.name == "g1"))
            open_ = s.scalars(select(Round).where(Round.game_id == game_id, Round.state == "open"))
            round_ = open_.one()
            number, deadline = round_.number, round_.deadline
        now[0] = deadline + timedelta(seconds=1)
        started = time.perf_counter()
        assert scheduler.on_deadline("g1", number) is not None
        spent += time.perf_counter() - started
    with db.transaction() as s:
        mails = (s.scalar(select(func.count()).select_from(OutboxMessage)) or 0) - before
    db.dispose()
    return spent, mails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--players", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"bench_languages: Python {platform.python_version()}, SQLite, one postal game of "
        f"{args.players} players, {args.rounds} rounds closed (no orders: R17), best of "
        f"{args.repeats} runs taking turns"
    )
    best: dict[str, float] = {}
    runs: dict[str, list[float]] = {code: [] for code in LANGUAGES}
    mails: dict[str, int] = {}
    for repeat in range(args.repeats):
        for code in LANGUAGES:
            with tempfile.TemporaryDirectory(prefix=f"bench-lang-{repeat}-") as folder:
                spent, mails[code] = one_game(Path(folder), code, args.players, args.rounds)
            runs[code].append(spent)
            best[code] = min(best.get(code, spent), spent)
    base = best["en"]
    print(f"{'language':<9} {'closes s':>9} {'mails':>6} {'ms/mail':>8} {'ratio':>6}  runs")
    for code in LANGUAGES:
        ratio = best[code] / base
        shown = ", ".join(f"{r:.2f}" for r in runs[code])
        print(
            f"{code:<9} {best[code]:>9.2f} {mails[code]:>6} "
            f"{best[code] / mails[code] * 1000:>8.2f} {ratio:>5.2f}x  {shown}"
        )
    print("goal: Chinese and Thai within 1.5x English (baseline: the English game, same run)")


if __name__ == "__main__":
    main()
