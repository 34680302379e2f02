"""Benchmark: close one two-turn round for 1,000 / 10,000 / 100,000 players.

On SQLite and on PostgreSQL (a private server started for the run, as the
tests do). Each player has orders in; the round is round 8 (turns 9 and 10),
so the current set's dice are loaded too. The baseline, measured in the same
run on the same database, inserts the same number of result rows with one
bare DBAPI ``executemany`` (then rolls back). Goal: a round close within 3x
the baseline, and linear in players.

Run: .venv/bin/python tests/benchmarks/bench_close.py [--sizes 1000,10000] [--no-postgres]
"""

from __future__ import annotations

import argparse
import platform
import random
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select

sys.path.insert(0, str(Path(__file__).parents[1]))

from snl_pbem.app.rounds import close_round
from snl_pbem.store import Database, Game, OrderRecord, Player, Round, TurnRecord
from snl_pbem.store.migrate import upgrade

T0 = datetime(2030, 1, 1, tzinfo=UTC)
BOARD = {
    "snakes": {
        "17": 7,
        "54": 34,
        "62": 19,
        "64": 60,
        "87": 24,
        "93": 73,
        "95": 75,
        "98": 79,
        "49": 11,
        "36": 6,
    },
    "ladders": {
        "1": 38,
        "4": 14,
        "9": 31,
        "21": 42,
        "28": 84,
        "51": 67,
        "71": 91,
        "80": 94,
        "40": 59,
        "33": 47,
    },
}


def populate(db: Database, n: int, seed: int = 1) -> None:
    """A game at round 8 with n players: turn 7-8 results stored, one order each."""
    rng = random.Random(seed)
    with db.transaction() as s:
        game = Game(
            name="bench",
            title="bench",
            state="running",
            timezone="UTC",
            board=BOARD,
            schedule={"first": T0.isoformat(), "explicit": [], "round_length_s": 86400},
            order_key_salt="00" * 16,
            rounds_played=7,
            turns_played=8,
            created_at=T0,
        )
        s.add(game)
        s.flush()
        s.execute(
            insert(Player),
            [
                {
                    "game_id": game.id,
                    "name": f"p{i:06d}",
                    "email": f"p{i}@example.org",
                    "order_key_hash": f"h1${i:064x}",
                    "joined_at": T0,
                }
                for i in range(n)
            ],
        )
        ids = s.scalars(
            select(Player.id).where(Player.game_id == game.id).order_by(Player.id)
        ).all()
        old = Round(game_id=game.id, number=7, turns=2, deadline=T0, state="closed", opened_at=T0)
        current = Round(
            game_id=game.id, number=8, turns=2, deadline=T0 + timedelta(days=1), opened_at=T0
        )
        s.add_all([old, current])
        s.flush()
        history, orders = [], []
        for pid in ids:
            dice = rng.sample(range(1, 7), 4)
            position = rng.randint(0, 60)
            for turn, die in zip((7, 8), dice[:2], strict=True):
                history.append(
                    {
                        "game_id": game.id,
                        "round_id": old.id,
                        "player_id": pid,
                        "turn": turn,
                        "die": die,
                        "start": position,
                        "target": position + die,
                        "final": position + die,
                        "events": "",
                    }
                )
                position += die
            orders.append(
                {
                    "round_id": current.id,
                    "player_id": pid,
                    "received_at": T0,
                    "source": "email",
                    "dice": f"{dice[2]} {dice[3]}",
                    "valid": True,
                    "problems": [],
                    "nomination": rng.choice((12, 23, 37, 45, 56, 66, 72, 77, 83, 90)),
                    "withdrawn": False,
                }
            )
        s.execute(insert(TurnRecord), history)
        s.execute(insert(OrderRecord), orders)


def baseline(db: Database, rows: int) -> float:
    """One bare executemany of ``rows`` result rows into turn_results, rolled back."""
    with db.transaction() as s:
        game_id, round_id = s.execute(
            select(Round.game_id, Round.id).where(Round.number == 8)
        ).one()
        player_ids = s.scalars(select(Player.id).order_by(Player.id)).all()
    params = [
        (game_id, round_id, pid, turn, 3, 10, 13, 13, "") for pid in player_ids for turn in (9, 10)
    ][:rows]
    mark = "?" if db.is_sqlite else "%s"
    sql = (
        "INSERT INTO turn_results (game_id, round_id, player_id, turn, die, start, target, "
        f"final, events) VALUES ({', '.join([mark] * 9)})"
    )
    raw = db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if db.is_sqlite:
            cursor.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        cursor.executemany(sql, params)
        elapsed = time.perf_counter() - started
        raw.rollback()
    finally:
        raw.close()
    return elapsed


def measure(url: str, n: int) -> tuple[float, float]:
    db = Database(url)
    try:
        upgrade(db)
        populate(db, n)
        base = baseline(db, 2 * n)
        started = time.perf_counter()
        outcome = close_round(db, "bench", T0 + timedelta(days=2))
        elapsed = time.perf_counter() - started
        assert outcome is not None and len(outcome.result.turns) == 2
        assert len(outcome.result.trapdoors) == 10
        return elapsed, base
    finally:
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    kinds = [("sqlite", None)]
    server = None
    if not args.no_postgres:
        from pgserver import PostgresServer

        server = PostgresServer().start()
        kinds.append(("postgresql", server))
    print(
        f"bench_close: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
        + (f", PostgreSQL from {server.bin}" if server else "")
    )
    print(
        f"{'database':<10} {'players':>8} {'close s':>8} {'baseline s':>10} {'ratio':>6} "
        f"{'us/player':>9}"
    )
    try:
        for kind, pg in kinds:
            for n in sizes:
                with tempfile.TemporaryDirectory() as tmp:
                    if pg is None:
                        url = f"sqlite:///{tmp}/bench.db"
                    else:
                        url = pg.url(pg.create_database())
                    close, base = measure(url, n)
                print(
                    f"{kind:<10} {n:>8} {close:>8.3f} {base:>10.3f} {close / base:>5.1f}x "
                    f"{close / n * 1e6:>9.1f}"
                )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
