"""Properties of the engine that must hold for every board, history and set of orders."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from snl_pbem.offline.replay import Replay, outcome_json, run_replay
from snl_pbem.rules import (
    Board,
    BoardError,
    GameRules,
    OrderSet,
    PostalState,
    adjudicate_round,
    check_dice,
    lowest_legal_dice,
)

spaces = st.integers(1, 100)


@st.composite
def boards(draw: st.DrawFn) -> Board:
    snakes = draw(st.dictionaries(st.integers(2, 100), st.integers(-20, 99), max_size=15))
    ladders = draw(st.dictionaries(st.integers(1, 99), st.integers(2, 130), max_size=15))
    snakes = {s: d for s, d in snakes.items() if d < s}
    ladders = {s: d for s, d in ladders.items() if d > s and s not in snakes}
    try:
        return Board.build(snakes=snakes, ladders=ladders)
    except BoardError:  # loops are legitimately refused; try another board
        reject()


histories = st.lists(st.permutations([1, 2, 3, 4, 5, 6]), max_size=4).flatmap(
    lambda sets: st.integers(0, 5).flatmap(
        lambda extra: st.permutations([1, 2, 3, 4, 5, 6]).map(
            lambda last: tuple(v for s in sets for v in s) + tuple(last[:extra])
        )
    )
)


@given(boards(), st.sets(spaces, max_size=30), st.integers(0, 106))
@settings(
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow], max_examples=300
)
def test_resolution_always_ends(board: Board, trapdoors: set[int], target: int) -> None:
    outcome = board.resolve(target, trapdoors)
    # Each trapdoor works once and a snake/ladder chain cannot loop, so the path is short.
    assert len(outcome.events) <= len(trapdoors) + 2 * len(board.features) + 1
    assert outcome.final >= 0


@given(histories, st.integers(1, 2))
def test_nmr_dice_are_always_legal(played: tuple[int, ...], turns: int) -> None:
    dice = lowest_legal_dice(played, turns)
    assert check_dice(played, dice, turns).valid


def random_orders(rng: random.Random, state: PostalState, turns: int) -> dict:
    orders: dict[str, OrderSet | None] = {}
    for name in state.players:
        roll = rng.random()
        if roll < 0.15:
            orders[name] = None
        elif roll < 0.3:
            orders[name] = OrderSet(
                tuple(rng.randint(0, 7) for _ in range(rng.randint(0, 3))),
                rng.choice([None, rng.randint(-5, 110)]),
            )
        else:
            played = list(state.played[name])
            dice = []
            for _ in range(turns):
                used = played[len(played) - len(played) % 6 :]
                dice.append(rng.choice([v for v in range(1, 7) if v not in used]))
                played.append(dice[-1])
            orders[name] = OrderSet(tuple(dice), rng.choice([None, rng.randint(1, 100)]))
    return orders


@given(st.integers(0, 2**32), st.integers(1, 12), boards())
@settings(
    max_examples=60, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
def test_every_completed_set_is_a_permutation(seed: int, players: int, board: Board) -> None:
    rng = random.Random(seed)
    rules = GameRules(board, double_from_round=rng.randint(1, 8))
    state = PostalState.start([f"p{i}" for i in range(players)])
    for _ in range(25):
        if state.result is not None:
            break
        turns = rules.turns_in_round(state.rounds_played + 1)
        _, state = adjudicate_round(rules, state, random_orders(rng, state, turns))
    for name, played in state.played.items():
        assert len(played) == state.turns_played, name
        for start in range(0, len(played) - len(played) % 6, 6):
            assert sorted(played[start : start + 6]) == [1, 2, 3, 4, 5, 6]


@given(st.integers(0, 2**32), st.integers(2, 10))
@settings(max_examples=40)
def test_player_order_does_not_change_any_result(seed: int, players: int) -> None:
    rng = random.Random(seed)
    board = Board.build(snakes={47: 26, 98: 12}, ladders={4: 56, 33: 70})
    names = [f"p{i}" for i in range(players)]
    rounds = []
    state = PostalState.start(names)
    rules = GameRules(board)
    for _ in range(12):
        orders = random_orders(rng, state, rules.turns_in_round(state.rounds_played + 1))
        rounds.append(orders)
        if state.result is None:
            _, state = adjudicate_round(rules, state, orders)
    forward = run_replay(Replay(rules, tuple(names), tuple(rounds)))
    shuffled_names = names[:]
    rng.shuffle(shuffled_names)
    shuffled_rounds = []
    for orders in rounds:
        items = list(orders.items())
        rng.shuffle(items)
        shuffled_rounds.append(dict(items))
    backward = run_replay(Replay(rules, tuple(shuffled_names), tuple(shuffled_rounds)))
    assert outcome_json(forward, detail=True) == outcome_json(backward, detail=True)
    assert forward.state.positions == state.positions


@given(st.integers(0, 2**32))
@settings(max_examples=30)
def test_same_input_same_output(seed: int) -> None:
    rng = random.Random(seed)
    rules = GameRules(Board.build(ladders={3: 60}, snakes={64: 2}), seed=seed)
    names = ("a", "b", "c")
    state = PostalState.start(names)
    rounds = []
    for _ in range(10):
        rounds.append(random_orders(rng, state, rules.turns_in_round(state.rounds_played + 1)))
        if state.result is None:
            _, state = adjudicate_round(rules, state, rounds[-1])
    replay = Replay(rules, names, tuple(rounds))
    assert outcome_json(run_replay(replay), detail=True) == outcome_json(
        run_replay(replay), detail=True
    )
