"""The worked examples of RULES.md, on the standard 10x10 boustrophedon board."""

from __future__ import annotations

from helpers import plain_board, state_at

from snl_pbem.rules import GameRules, NmrCause, OrderSet, adjudicate_round, check_dice


def test_example_1_trapdoor_at_45() -> None:
    """1. Trapdoor at 45, no snake or ladder on 36: 41 plays 4 -> 45 -> falls to 36."""
    rules = GameRules(plain_board())
    state = state_at({"ann": 41, "bob": 10, "cy": 12})
    result, _ = adjudicate_round(
        rules,
        state,
        {
            "ann": OrderSet((4,)),
            "bob": OrderSet((1,), 45),
            "cy": OrderSet((2,), 45),
        },
    )
    assert result.trapdoors == (45,)
    assert result.positions["ann"] == 36


def test_example_2_back_onto_a_used_trapdoor_by_ladder() -> None:
    """2. Trapdoors at 45 and 36, ladder 25->45: 45 -> 36 -> 25 -> 45, a trapdoor already
    fallen through this turn, so a normal space (R15): final 45."""
    board = plain_board(ladders={25: 45})
    outcome = board.resolve(41 + 4, {45, 36})
    assert outcome.final == 45
    assert [str(e) for e in outcome.events] == [
        "trapdoor 45\u219236",
        "trapdoor 36\u219225",
        "ladder 25\u219245",
    ]


def test_example_3_trapdoor_before_snake() -> None:
    """3. Trapdoor and snake head at 45 (45->5): the trapdoor acts first (R12): 45 -> 36."""
    assert plain_board(snakes={45: 5}).resolve(45, {45}).final == 36


def test_example_4_trapdoor_with_nothing_below_then_ladder() -> None:
    """4. Trapdoor at 8 (bottom row) with a ladder 8->30: the trapdoor does nothing, the
    ladder acts: final 30."""
    outcome = plain_board(ladders={8: 30}).resolve(8, {8})
    assert outcome.final == 30 and [e.kind.value for e in outcome.events] == ["ladder"]


def test_example_5_straddling_a_set_boundary() -> None:
    """5. Turns 6 and 7; 1,2,3,4,6 used in set 1; `5 5` is legal (5 closes set 1, 5 opens
    set 2)."""
    assert check_dice((1, 2, 3, 4, 6), (5, 5), 2).valid
    assert not check_dice((1, 2, 3, 4, 6), (1, 5), 2).valid  # the first must be the 5
    assert not check_dice((1, 2, 3, 4), (5, 5), 2).valid  # 5 twice within one set
    rules = GameRules(plain_board(), double_from_round=6)
    state = state_at({"ann": 30}, {"ann": (1, 2, 3, 4, 6)}, rounds_played=5)
    result, after = adjudicate_round(rules, state, {"ann": OrderSet((5, 5))})
    assert not result.nmr and [t.turn for t in result.turns] == [6, 7]
    assert after.played["ann"] == (1, 2, 3, 4, 6, 5, 5) and after.open_values("ann") == (
        1,
        2,
        3,
        4,
        6,
    )


def test_example_6_no_orders_in_a_two_turn_round() -> None:
    """6. Used 2 and 5 in the current set, no orders in a two-turn round: the referee
    plays 1 then 3; nomination = start + 1."""
    rules = GameRules(plain_board(), double_from_round=1)
    state = state_at({"ann": 50}, {"ann": (2, 5)}, rounds_played=1)
    result, _ = adjudicate_round(rules, state, {})
    assert result.nmr["ann"].cause is NmrCause.NO_ORDERS
    assert [t.moves["ann"].die for t in result.turns] == [1, 3]
    assert result.nominations["ann"] == 51


def test_example_7_overshoot_decides_the_winner() -> None:
    """7. Players on 97, 98, 95 play 6, 6, 5: 103, 104, 100 -> the player on 104 wins; had
    two reached 104, a draw between them."""
    rules = GameRules(plain_board())
    state = state_at({"ann": 97, "bob": 98, "cy": 95})
    result, _ = adjudicate_round(
        rules,
        state,
        {
            "ann": OrderSet((6,)),
            "bob": OrderSet((6,)),
            "cy": OrderSet((5,)),
        },
    )
    assert result.positions == {"ann": 103, "bob": 104, "cy": 100}
    assert result.result is not None and result.result.winners == ("bob",)
    draw, _ = adjudicate_round(
        rules,
        state_at({"ann": 98, "bob": 98, "cy": 95}),
        {
            "ann": OrderSet((6,)),
            "bob": OrderSet((6,)),
            "cy": OrderSet((5,)),
        },
    )
    assert draw.result is not None and draw.result.winners == ("ann", "bob")
