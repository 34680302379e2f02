"""C7 with many pieces on a small board: a piece coming to rest bumps every other racing
piece on its space, in the player list's order (C1), however crowded the board is."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from snl_pbem.rules import Board
from snl_pbem.rules.classic.game import BUMPED, FINISHED, ClassicState, play_round, seeded_throws
from snl_pbem.rules.classic.options import ClassicOptions, Finish

BOARD = Board.from_mapping({"rows": 3, "columns": 5, "snakes": {"13": 3}, "ladders": {"2": 9}})


@given(st.integers(0, 2**32), st.integers(2, 40), st.sampled_from(list(Finish)))
@settings(max_examples=40)
def test_a_piece_at_rest_bumps_the_others_on_its_space_in_list_order(
    seed: int, players: int, finish: Finish
) -> None:
    options = ClassicOptions(bump=True, finish=finish)
    names = [f"p{i}" for i in range(players)]
    # a crowded start (as a state restored or replayed may be): several pieces a space
    rng = random.Random(seed)
    state = ClassicState(tuple(names), {p: rng.choice([0, 3, 4, 5]) for p in names})
    for number in range(1, 30):
        if state.over:
            break
        played = play_round(BOARD, options, state, seeded_throws(seed, number, options.dice))
        assert played is not None
        round_, after = played
        positions = dict(state.positions)
        finished = set(state.finished)
        for throw in round_.throws:
            positions[throw.player] = throw.end
            bumped = [e[len(BUMPED) :] for e in throw.events if e.startswith(BUMPED)]
            if FINISHED in throw.events:
                finished.add(throw.player)
            elif throw.end != 0:
                there = [
                    p
                    for p in names
                    if p != throw.player and p not in finished and positions[p] == throw.end
                ]
                assert bumped == there
            for other in bumped:
                positions[other] = 0
        assert dict(after.positions) == positions
        state = after
