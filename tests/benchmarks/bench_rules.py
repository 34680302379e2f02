"""Benchmark: adjudicate one two-turn round for 1,000 / 10,000 / 100,000 players.

The board has 20 snakes and ladders and the round has 10 active trapdoors.
The baseline, run in the same process over the same data, is a bare Python
loop doing only ``p += d; p = features.get(p, p)`` for each turn: the least
any adjudicator written in Python could do (it does no R18 check, no trapdoor
tally, and builds none of the per-player results the engine must hand back: the
moves, positions and dice by player name). Goal: the engine within 10x of the
baseline, and linear in players. The engine and the baseline take turns; each
figure is the best of its runs, in wall time and (the last column) in CPU time,
which a busy machine disturbs less.

Run: .venv/bin/python tests/benchmarks/bench_rules.py [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from snl_pbem.rules import Board, GameRules, OrderSet, PostalState, adjudicate_round

SNAKES = {17: 7, 54: 34, 62: 19, 64: 60, 87: 24, 93: 73, 95: 75, 98: 79, 49: 11, 36: 6}
LADDERS = {1: 38, 4: 14, 9: 31, 21: 42, 28: 84, 51: 67, 71: 91, 80: 94, 40: 59, 33: 47}
TRAPDOORS = (12, 23, 37, 45, 56, 66, 72, 77, 83, 90)


def make_round(n: int, seed: int = 1) -> tuple[GameRules, PostalState, dict[str, OrderSet | None]]:
    """Round 7 (two turns) with set 1 complete: 90% valid orders, 10% invalid (R18).

    Every order nominates one of 10 spaces, so exactly those become trapdoors;
    a player with no orders would nominate their target (R16) and add more.
    """
    rng = random.Random(seed)
    names = tuple(f"player{i:06d}" for i in range(n))
    positions = {name: rng.randint(0, 70) for name in names}
    played = {}
    orders: dict[str, OrderSet | None] = {}
    for name in names:
        first_set = list(range(1, 7))
        rng.shuffle(first_set)
        played[name] = tuple(first_set)
        roll = rng.random()
        nomination = rng.choice(TRAPDOORS)  # every vote on one of 10 spaces: 10 trapdoors
        if roll < 0.05:
            orders[name] = OrderSet((4,), nomination)
        elif roll < 0.10:
            orders[name] = OrderSet((3, 3), nomination)
        else:
            orders[name] = OrderSet(tuple(rng.sample(range(1, 7), 2)), nomination)
    board = Board.build(snakes=SNAKES, ladders=LADDERS)
    assert len(board.features) == 20
    state = PostalState(names, positions, played, rounds_played=6, turns_played=6)
    return GameRules(board), state, orders


def engine(
    rules: GameRules, state: PostalState, orders: dict[str, OrderSet | None]
) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    result, _ = adjudicate_round(rules, state, orders, keep_history=False)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    assert result.trapdoors == TRAPDOORS and len(result.turns) == 2
    return elapsed


def baseline(
    positions: list[int], dice: list[tuple[int, int]], features: dict[int, int]
) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    finals = []
    for p, (d1, d2) in zip(positions, dice, strict=True):
        p += d1
        p = features.get(p, p)
        p += d2
        p = features.get(p, p)
        finals.append(p)
    return time.perf_counter() - started, time.process_time() - cpu


def best_of(repeats: int, *runs: Callable[[], tuple[float, float]]) -> list[tuple[float, float]]:
    """Each run's best wall and best CPU time; the runs take turns, so a busy machine
    slows them alike."""
    times: list[list[tuple[float, float]]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, kept in zip(runs, times, strict=True):
            gc.collect()
            kept.append(run())
    return [(min(w for w, _ in kept), min(c for _, c in kept)) for kept in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"bench_rules: Python {platform.python_version()} on {platform.machine()}, "
        f"best of {args.repeats}"
    )
    print(
        f"{'players':>8} {'engine s':>9} {'engine pt/s':>12} {'baseline s':>10} "
        f"{'baseline pt/s':>14} {'ratio':>6} {'us/player':>9} {'CPU ratio':>9}"
    )
    per_player = []
    for n in sizes:
        rules, state, orders = make_round(n)
        features = {**SNAKES, **LADDERS}
        dice = [
            o.dice if o is not None and len(set(o.dice)) == 2 else (1, 2)
            for o in (orders[name] for name in state.players)
        ]
        positions = [state.positions[name] for name in state.players]
        (t_engine, c_engine), (t_base, c_base) = best_of(
            args.repeats,
            partial(engine, rules, state, orders),
            partial(baseline, positions, dice, features),
        )
        turns = 2 * n
        per_player.append(t_engine / n * 1e6)
        print(
            f"{n:>8} {t_engine:>9.4f} {turns / t_engine:>12,.0f} {t_base:>10.4f} "
            f"{turns / t_base:>14,.0f} {t_engine / t_base:>5.1f}x {per_player[-1]:>9.2f} "
            f"{c_engine / c_base:>8.1f}x"
        )
    spread = max(per_player) / min(per_player)
    print(
        f"linearity: time per player varies {spread:.2f}x across sizes "
        f"(median {statistics.median(per_player):.2f} us)"
    )


if __name__ == "__main__":
    main()
