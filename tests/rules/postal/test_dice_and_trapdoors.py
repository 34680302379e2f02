"""Dice sets (R6, R17, R18) and the trapdoor tally (R8, R9, R16, trapdoor_rule)."""

from __future__ import annotations

import random

import pytest
from helpers import plain_board, state_at

from snl_pbem.rules import (
    DiceProblemKind,
    GameRules,
    OrderSet,
    TrapdoorRule,
    adjudicate_round,
    check_dice,
    default_nomination,
    lowest_legal_dice,
    open_values,
    tally_trapdoors,
    vote_threshold,
)


def test_open_values_follow_the_current_set() -> None:
    assert open_values(()) == (1, 2, 3, 4, 5, 6)
    assert open_values((4, 1)) == (2, 3, 5, 6)
    assert open_values((1, 2, 3, 4, 5, 6)) == (1, 2, 3, 4, 5, 6)
    assert open_values((1, 2, 3, 4, 5, 6, 3)) == (1, 2, 4, 5, 6)


@pytest.mark.parametrize(
    ("played", "dice", "turns", "kinds", "text"),
    [
        ((), (7,), 1, [DiceProblemKind.NOT_A_DIE], "7 is not a die value (1 to 6)"),
        ((), (0,), 1, [DiceProblemKind.NOT_A_DIE], "0 is not a die value"),
        (
            (3,),
            (3,),
            1,
            [DiceProblemKind.ALREADY_USED],
            "3 is already used in this set of six (still open: 1, 2, 4, 5, 6)",
        ),
        ((1,), (4, 4), 2, [DiceProblemKind.REPEATED], "4 is given twice in one set of six"),
        (
            (),
            (1, 2),
            1,
            [DiceProblemKind.WRONG_COUNT],
            "this round needs 1 die, one per turn; 2 given",
        ),
        ((), (), 2, [DiceProblemKind.WRONG_COUNT], "this round needs 2 dice, one per turn; 0"),
        ((1, 2, 3, 4, 6), (6, 5), 2, [DiceProblemKind.ALREADY_USED], "(still open: 5)"),
    ],
)
def test_invalid_dice_give_every_reason(
    played: tuple[int, ...],
    dice: tuple[int, ...],
    turns: int,
    kinds: list[DiceProblemKind],
    text: str,
) -> None:
    check = check_dice(played, dice, turns)
    assert not check.valid
    assert [p.kind for p in check.problems] == kinds
    assert text in str(check.problems[0])


def test_valid_dice() -> None:
    assert check_dice((), (6,), 1).valid
    assert check_dice((1, 2, 3), (6, 4), 2).valid
    assert check_dice((1, 2, 3, 4, 5, 6), (6, 6), 2).valid is False
    assert check_dice((2, 3, 4, 5, 6), (1, 1), 2).valid  # 1 closes set 1, 1 opens set 2


def test_lowest_legal_dice() -> None:
    assert lowest_legal_dice((), 1) == (1,)
    assert lowest_legal_dice((1, 2, 3, 4, 5), 2) == (6, 1)
    assert lowest_legal_dice((1, 3), 2) == (2, 4)
    assert lowest_legal_dice((1, 2, 3, 4, 5, 6), 2) == (1, 2)


def test_threshold_is_two_up_to_eight_players() -> None:
    assert [vote_threshold(n) for n in (1, 2, 8, 9, 500)] == [2, 2, 2, 3, 3]


def test_default_nomination_stops_at_the_last_space() -> None:
    assert default_nomination(100, 100) == 100  # the last space is a space like any other
    assert default_nomination(101, 100) is None
    assert default_nomination(0, 100) is None


def test_most_voted_keeps_only_the_leader() -> None:
    tally = tally_trapdoors([40, 40, 40, 50, 50, None], 6, TrapdoorRule.MOST_VOTED)
    assert tally.active == (40,) and tally.votes == {40: 3, 50: 2} and not tally.by_lot
    assert tally_trapdoors([40, 40, 40, 50, 50], 6).active == (40, 50)
    assert tally_trapdoors([40, 50], 6, TrapdoorRule.MOST_VOTED).active == ()


def test_most_voted_tie_is_broken_by_lot_repeatably() -> None:
    votes = [40, 40, 50, 50, 60, 60]
    chosen = {
        seed: tally_trapdoors(votes, 6, TrapdoorRule.MOST_VOTED, random.Random(seed)).active
        for seed in range(30)
    }
    assert all(len(active) == 1 and active[0] in (40, 50, 60) for active in chosen.values())
    assert len(set(chosen.values())) > 1  # the lot really varies with the seed
    again = tally_trapdoors(votes, 6, TrapdoorRule.MOST_VOTED, random.Random(7))
    assert again.active == chosen[7] and again.by_lot


def test_most_voted_in_a_game_depends_on_the_seed_only() -> None:
    state = state_at({"a": 10, "b": 10, "c": 10, "d": 10})
    orders = {
        "a": OrderSet((1,), 40),
        "b": OrderSet((2,), 40),
        "c": OrderSet((3,), 60),
        "d": OrderSet((4,), 60),
    }
    picks = set()
    for seed in range(20):
        rules = GameRules(plain_board(), trapdoor_rule=TrapdoorRule.MOST_VOTED, seed=seed)
        first, _ = adjudicate_round(rules, state, orders)
        second, _ = adjudicate_round(rules, state, orders)
        assert first.trapdoors == second.trapdoors
        picks.add(first.trapdoors)
    assert picks == {(40,), (60,)}


def test_a_state_holding_only_the_current_set_plays_the_same() -> None:
    """Storage loads only the current set's dice (played_from): R6 needs no more."""
    rules = GameRules(plain_board(ladders={30: 60}), double_from_round=1)
    full = state_at(
        {"a": 20, "b": 25},
        {"a": (1, 2, 3, 4, 5, 6, 2, 5), "b": (6, 5, 4, 3, 2, 1, 1, 3)},
        rounds_played=4,
    )
    short = type(full)(
        full.players,
        full.positions,
        {"a": (2, 5), "b": (1, 3)},
        rounds_played=4,
        turns_played=8,
        played_from=6,
    )
    orders = {"a": OrderSet((4, 1)), "b": OrderSet((1, 4))}  # b repeats 1: R18
    long_result, _ = adjudicate_round(rules, full, orders)
    short_result, short_next = adjudicate_round(rules, short, orders)
    assert long_result.positions == short_result.positions
    assert str(long_result.nmr["b"]) == str(short_result.nmr["b"])
    assert short_next.played == {"a": (2, 5, 4, 1), "b": (1, 3, 2, 4)}
    assert short_next.played_from == 6
