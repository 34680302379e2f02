"""Rounds with at least as many players as spaces: the engine then makes the round's moves
from the board's own (trapdoors aside) all at once. Each move must still be RULES.md's
(R11-R15: the board's resolution of start + die with that round's trapdoors) and the round
must still stop after the turn in which someone reached the last space (R5)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from snl_pbem.rules import Board, BoardError, GameRules, OrderSet, PostalState, adjudicate_round
from snl_pbem.rules.postal.game import game_result


@st.composite
def small_boards(draw: st.DrawFn) -> Board:
    rows, columns = draw(st.integers(3, 5)), draw(st.integers(3, 5))
    last = rows * columns
    snakes = draw(st.dictionaries(st.integers(2, last), st.integers(0, last - 1), max_size=4))
    ladders = draw(st.dictionaries(st.integers(1, last - 1), st.integers(2, last), max_size=4))
    snakes = {s: d for s, d in snakes.items() if d < s}
    ladders = {s: d for s, d in ladders.items() if d > s and s not in snakes}
    try:
        return Board.build(rows, columns, snakes=snakes, ladders=ladders)
    except BoardError:  # loops are legitimately refused; try another board
        reject()


def orders_for(rng: random.Random, state: PostalState, turns: int, last: int) -> dict:
    """Mostly valid orders nominating a few spaces (so that trapdoors open), some with no
    orders or invalid dice (R17, R18) or no space nominated (R16)."""
    favourites = rng.sample(range(1, last + 1), 3)
    orders: dict[str, OrderSet | None] = {}
    for name in state.players:
        roll = rng.random()
        if roll < 0.1:
            orders[name] = None
            continue
        played = list(state.played[name])
        dice = []
        for _ in range(turns):
            used = played[len(played) - len(played) % 6 :]
            dice.append(rng.choice([v for v in range(1, 7) if v not in used]))
            played.append(dice[-1])
        if roll < 0.15:
            dice = [7] * turns
        nomination = rng.choice([*favourites, None, last + 3])
        orders[name] = OrderSet(tuple(dice), nomination)
    return orders


@given(st.integers(0, 2**32), small_boards(), st.integers(1, 3))
@settings(
    max_examples=60, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
def test_every_move_is_the_boards_and_the_round_stops_at_the_last_space(
    seed: int, board: Board, per_space: int
) -> None:
    rng = random.Random(seed)
    rules = GameRules(board, double_from_round=rng.randint(1, 4))
    state = PostalState.start([f"p{i}" for i in range(board.last * per_space)])
    for _ in range(12):
        if state.result is not None:
            break
        turns = rules.turns_in_round(state.rounds_played + 1)
        result, after = adjudicate_round(rules, state, orders_for(rng, state, turns, board.last))
        positions = dict(state.positions)
        for turn in result.turns:
            for name, move in turn.moves.items():
                target = positions[name] + move.die
                final, events = board.resolve(target, result.trapdoors)
                assert move == (move.die, positions[name], target, final, events), name
                positions[name] = final
            ended = game_result(positions, board.last, turn.turn)
            if turn is not result.turns[-1]:
                assert ended is None  # R5: a round goes on while no one has reached the end
        assert after.result == ended  # R5: and stops after the turn in which someone has
        assert len(result.turns) == turns or ended is not None
        assert after.positions == positions
        state = after
