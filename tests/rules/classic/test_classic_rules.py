"""The classic game, rule by rule (RULES-CLASSIC.md C1-C12) and option by option.

Each test quotes the sheet's sentence it checks (seeds/classic-rules.txt, "classic";
seeds/board-creator-rules.txt, "board-creator"; seeds/web-game-zh.txt, "web").
Throws are scripted per player, in the order each player makes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from snl_pbem.rules import Board, GameSetupError
from snl_pbem.rules.classic import (
    ClassicOptions,
    ClassicRound,
    ClassicState,
    Dice,
    board_problems,
    parse_options,
    play_round,
    seeded_throws,
)

PLAIN = Board.from_mapping({"rows": 10, "columns": 10})
CLASSIC_SHEET = Board.from_mapping(
    {"rows": 10, "columns": 10, "ladders": {"9": 31, "80": 100}, "snakes": {"54": 34}}
)
WEB_CLASSIC = Board.from_mapping({"rows": 10, "columns": 10, "ladders": {"1": 38}})


def scripted(rolls: Mapping[str, Sequence[Any]]):
    lists = {p: [t if isinstance(t, (list, tuple)) else [t] for t in ts] for p, ts in rolls.items()}

    def throw(player: str) -> tuple[int, ...] | None:
        left = lists.get(player, [])
        return tuple(left.pop(0)) if left else None

    return throw, lists


def play(
    rolls: Mapping[str, Sequence[Any]],
    board: Board = PLAIN,
    players: Sequence[str] = ("ann", "bob"),
    state: ClassicState | None = None,
    all_used: bool = True,
    **options: Any,
) -> tuple[list[ClassicRound], ClassicState]:
    """Every round the scripted throws allow; asserts no throw was left over unused
    unless the game ended."""
    opts = parse_options(options)
    state = state or ClassicState.start(players)
    throw, lists = scripted(rolls)
    rounds = []
    while not state.over:
        played = play_round(board, opts, state, throw)
        if played is None:
            break
        rounds.append(played[0])
        state = played[1]
    if all_used and not state.over:
        assert all(not left for left in lists.values()), f"unused throws: {lists}"
    return rounds, state


Row = tuple[str, tuple[int, ...], int, int, tuple[str, ...]]


def throws_of(rounds: Sequence[ClassicRound]) -> list[Row]:
    return [(t.player, t.dice, t.start, t.end, t.events) for r in rounds for t in r.throws]


# -- C1 order, C2 moving -------------------------------------------------------------------


def test_c1_players_throw_in_the_player_lists_order_every_round() -> None:
    """web: "之后按红、蓝、黄、绿的顺序轮流" (then in turn: red, blue, yellow, green)."""
    rounds, _ = play({"cy": [1, 2], "ann": [3, 4], "bob": [5, 6]}, players=("cy", "ann", "bob"))
    assert [[t.player for t in r.throws] for r in rounds] == [["cy", "ann", "bob"]] * 2


def test_c2_a_piece_moves_by_the_total_of_all_the_dice() -> None:
    """board-creator: "add together the values of all the dice and move forward by that
    number of squares"."""
    rounds, state = play({"ann": [[3, 4]], "bob": [[6, 6]]}, dice="2d6")
    assert throws_of(rounds) == [("ann", (3, 4), 0, 7, ()), ("bob", (6, 6), 0, 12, ())]
    assert state.positions == {"ann": 7, "bob": 12}


def test_c2_with_start_rule_none_a_piece_moves_straight_off_the_start() -> None:
    """board-creator: "If First Player is selected, Player 1 takes the first turn and
    moves immediately by the total shown on the dice"."""
    rounds, _ = play({"ann": [1], "bob": [2]}, board=WEB_CLASSIC)
    assert throws_of(rounds)[0] == ("ann", (1,), 0, 38, ("ladder",))


# -- C3 snakes and ladders, chain ------------------------------------------------------------


def test_c3_a_ladder_foot_and_a_snake_head_move_the_piece() -> None:
    """classic: "landing on square #9 lets players advance to square #31" and "landing on
    square #54 demotes the player to square #34"."""
    rounds, state = play({"ann": [6, 3], "bob": [6, 3]}, board=CLASSIC_SHEET)
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert ann[1] == ("ann", (3,), 6, 31, ("ladder",))
    start = ClassicState(("ann", "bob"), {"ann": 50, "bob": 0})
    rounds, state = play({"ann": [4], "bob": [1]}, board=CLASSIC_SHEET, state=start)
    assert throws_of(rounds)[0] == ("ann", (4,), 50, 34, ("snake",))
    assert state.record("ann").snakes == 1


LINKED = Board.from_mapping(
    {"rows": 10, "columns": 10, "ladders": {"3": 20, "20": 40}, "snakes": {"45": 5}}
)


def test_c3_without_chaining_the_far_end_is_a_resting_place() -> None:
    """web: "爬到梯子顶或滑到蛇尾后不再连锁触发" (after climbing a ladder or sliding down a
    snake, nothing further is triggered)."""
    rounds, state = play({"ann": [3], "bob": [1]}, board=LINKED)
    assert throws_of(rounds)[0] == ("ann", (3,), 0, 20, ("ladder",))
    assert state.record("ann").ladders == 1


def test_c3_with_chaining_each_feature_followed_acts_and_counts() -> None:
    """RULES-CLASSIC C3/C10: "ladder to ladder is two ladders"."""
    rounds, state = play({"ann": [3], "bob": [1]}, board=LINKED, chain=True)
    assert throws_of(rounds)[0] == ("ann", (3,), 0, 40, ("ladder", "ladder"))
    assert state.record("ann").ladders == 2


# -- C4 ending --------------------------------------------------------------------------------


def near_end(ann: int = 98) -> ClassicState:
    return ClassicState(("ann", "bob"), {"ann": ann, "bob": 0})


def test_c4_close_enough_a_roll_past_the_end_finishes() -> None:
    """board-creator: "any roll which reaches or passes the final square completes the
    game for that player"."""
    rounds, state = play({"ann": [6]}, state=near_end())
    assert throws_of(rounds) == [("ann", (6,), 98, 100, ("finished",))]
    assert state.over and state.result(ClassicOptions()) == {"winner": "ann"}


def test_c4_exact_a_roll_too_high_does_not_move_the_piece() -> None:
    """classic: "Any roll higher than one cannot be used by the player, and he has to pass
    his turn." (on #99); board-creator: "If the roll is too high, the playing piece does
    not move"."""
    rounds, state = play({"ann": [2, 1], "bob": [1, 1]}, state=near_end(99), ending="exact")
    assert throws_of(rounds)[0] == ("ann", (2,), 99, 99, ("no_move",))
    assert throws_of(rounds)[2] == ("ann", (1,), 99, 100, ("finished",))
    assert state.record("ann").rolls == 2  # C10: the unmoved throw counts


def test_c4_exact_a_too_high_maximum_still_rolls_again() -> None:
    """RULES-CLASSIC C4: under exact "the throw still counts, C6 still applies"."""
    rounds, _ = play(
        {"ann": [6, 2], "bob": [1]}, state=near_end(98), ending="exact", max_roll="roll_again"
    )
    assert throws_of(rounds)[:2] == [
        ("ann", (6,), 98, 98, ("no_move",)),
        ("ann", (2,), 98, 100, ("finished",)),
    ]


def test_c4_bounce_back_moves_to_the_end_and_back_by_the_rest() -> None:
    """board-creator: "a player on square 98 who rolls 6 moves to 100 and then back four
    squares to 96"."""
    rounds, state = play({"ann": [6], "bob": [1]}, state=near_end(98), ending="bounce_back")
    assert throws_of(rounds)[0] == ("ann", (6,), 98, 96, ("bounce",))
    assert not state.over


def test_c4_bounce_back_onto_a_snake_follows_the_snake() -> None:
    """board-creator: "If a bounce-back move finishes on a snake head or at the foot of a
    ladder, that snake or ladder is followed as normal"; web: "退到蛇头照样滑"."""
    board = Board.from_mapping({"rows": 10, "columns": 10, "snakes": {"96": 60}})
    rounds, _state = play(
        {"ann": [6], "bob": [1]}, board=board, state=near_end(98), ending="bounce_back"
    )
    assert throws_of(rounds)[0] == ("ann", (6,), 98, 60, ("bounce", "snake"))


def test_c4_bounce_back_never_goes_below_space_1() -> None:
    """RULES-CLASSIC C4: "(never below space 1)"."""
    tiny = Board.from_mapping({"rows": 1, "columns": 4})
    rounds, _ = play(
        {"ann": [[6, 6, 6, 6]], "bob": [[1, 1, 1, 1]]},
        board=tiny,
        state=ClassicState(("ann", "bob"), {"ann": 3, "bob": 0}),
        dice="4d6",
        ending="bounce_back",
    )
    assert throws_of(rounds)[0] == ("ann", (6, 6, 6, 6), 3, 1, ("bounce",))


def test_c4_a_ladder_to_the_last_space_finishes() -> None:
    """classic: "Landing on square #80 is another way to win the game since it has a
    ladder that automatically elevates the player to square #100"."""
    rounds, state = play({"ann": [4]}, board=CLASSIC_SHEET, state=near_end(76), ending="exact")
    assert throws_of(rounds) == [("ann", (4,), 76, 100, ("ladder", "finished"))]
    assert state.result(ClassicOptions()) == {"winner": "ann"}


def test_c4_a_classic_board_has_nothing_on_its_last_space() -> None:
    """RULES-CLASSIC C4: "A classic board has no snake or ladder on L (check-config refuses
    one)." """
    bad = Board.from_mapping({"rows": 10, "columns": 10, "snakes": {"100": 50}})
    assert board_problems(bad) == [
        "snake 100\u219250: a classic board has no snake or ladder on its last space 100 (C4)"
    ]
    assert board_problems(CLASSIC_SHEET) == []


# -- C5 entering ------------------------------------------------------------------------------


def test_c5_a_qualifying_maximum_does_not_move_then_the_next_throw_does() -> None:
    """board-creator: "A qualifying roll does not itself move the playing piece. The player
    rolls again and uses this second result for their first move." and "Players who fail
    to roll the required maximum remain in the Waiting Area"."""
    rounds, _state = play({"ann": [3, 6, 4], "bob": [6, 2, 1]}, start_rule="max_to_enter")
    assert throws_of(rounds) == [
        ("ann", (3,), 0, 0, ("waiting",)),
        ("bob", (6,), 0, 0, ("entered",)),
        ("bob", (2,), 0, 2, ()),
        ("ann", (6,), 0, 0, ("entered",)),
        ("ann", (4,), 0, 4, ()),
        ("bob", (1,), 2, 3, ()),
    ]


def test_c5_with_two_dice_the_maximum_is_a_double_six() -> None:
    """board-creator: "This means the maximum value on every die: for example, 6 with one
    six-sided die, double-six with two six-sided dice"."""
    rounds, _ = play(
        {"ann": [[6, 5], [6, 6], [1, 2]], "bob": [[1, 1], [2, 2]]},
        dice="2d6",
        start_rule="max_to_enter",
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert ann == [
        ("ann", (6, 5), 0, 0, ("waiting",)),
        ("ann", (6, 6), 0, 0, ("entered",)),
        ("ann", (1, 2), 0, 3, ()),
    ]


def test_c5_square1_places_the_piece_on_1_where_its_ladder_acts() -> None:
    """web: "起步后放在第 1 格（经典盘第 1 格正好是梯子脚，会直接爬到 38）" (once started, the
    piece is placed on square 1; on the classic board that is a ladder foot: straight up
    to 38)."""
    rounds, state = play(
        {"ann": [6], "bob": [2]},
        board=WEB_CLASSIC,
        start_rule="max_to_enter",
        enter_on="square1",
        max_roll="roll_again",
    )
    assert throws_of(rounds)[0] == ("ann", (6,), 0, 38, ("entered", "ladder"))
    assert [t[0] for t in throws_of(rounds)] == ["ann", "bob"]  # the turn ended there
    assert state.positions == {"ann": 38, "bob": 0}


def test_c5_a_piece_back_on_0_must_qualify_again() -> None:
    """RULES-CLASSIC C5: "every piece on space 0, however it got there (... a snake whose
    tail is 0)"."""
    board = Board.from_mapping({"rows": 10, "columns": 10, "snakes": {"5": 0}})
    rounds, _ = play({"ann": [6, 5, 4], "bob": [1, 1]}, board=board, start_rule="max_to_enter")
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert ann == [
        ("ann", (6,), 0, 0, ("entered",)),
        ("ann", (5,), 0, 0, ("snake",)),
        ("ann", (4,), 0, 0, ("waiting",)),
    ]


def test_c5_the_qualifying_throw_is_no_maximum_for_c6() -> None:
    """board-creator: "A maximum roll used to qualify a player to leave the Waiting Area is
    separate from these rules.": two sixes after it are not a third in a row."""
    rounds, state = play(
        {"ann": [6, 6, 6, 1], "bob": [1]}, start_rule="max_to_enter", max_roll="forfeit_after_three"
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert [t[4] for t in ann] == [("entered",), (), (), ()]
    assert state.positions["ann"] == 13


def test_c5_exact_entering_without_moving_leaves_the_piece_waiting() -> None:
    """RULES-CLASSIC C5: "A piece that entered but did not move from 0 (C4 exact) is still
    waiting"."""
    tiny = Board.from_mapping({"rows": 1, "columns": 4})
    rounds, _ = play(
        {"ann": [6, 5, 2, 6, 4], "bob": [1, 1]},
        board=tiny,
        start_rule="max_to_enter",
        ending="exact",
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert ann[:3] == [
        ("ann", (6,), 0, 0, ("entered",)),
        ("ann", (5,), 0, 0, ("no_move",)),
        ("ann", (2,), 0, 0, ("waiting",)),
    ]
    assert ann[3:] == [("ann", (6,), 0, 0, ("entered",)), ("ann", (4,), 0, 4, ("finished",))]


# -- C6 maximum throws ------------------------------------------------------------------------


def test_c6_nothing_a_maximum_is_like_any_other_throw() -> None:
    """board-creator: "Nothing: the roll is treated like any other roll and play passes to
    the next player afterwards"."""
    rounds, _ = play({"ann": [6], "bob": [1]})
    assert [t[0] for t in throws_of(rounds)] == ["ann", "bob"]


def test_c6_roll_again_as_often_as_maximums_keep_coming() -> None:
    """classic: "On rolling a six, the player moves his token and is allowed to roll
    again"; web: "掷出 6 走完后再掷一次"."""
    rounds, state = play({"ann": [6, 6, 6, 6, 2], "bob": [1]}, max_roll="roll_again")
    assert [t[0] for t in throws_of(rounds)] == ["ann"] * 5 + ["bob"]
    assert state.positions["ann"] == 26 and len(rounds) == 1  # one round (web: 不算新回合)


def test_c6_three_sixes_in_a_row_go_back_to_the_start() -> None:
    """classic: "a player who rolls 3 consecutive sixes is thrown back to imaginary Square
    ZERO, meaning that he has to start the game over"."""
    rounds, state = play({"ann": [6, 6, 6], "bob": [1]}, max_roll="forfeit_after_three")
    assert throws_of(rounds)[:3] == [
        ("ann", (6,), 0, 6, ()),
        ("ann", (6,), 6, 12, ()),
        ("ann", (6,), 12, 0, ("forfeit",)),
    ]
    assert state.positions == {"ann": 0, "bob": 1}


def test_c6_three_maximums_to_square_1_and_nothing_acts_there() -> None:
    """board-creator: "three maximum rolls in succession cause the player to forfeit the
    turn and return to square 1"; RULES-CLASSIC C6: "nothing acts where it goes (no
    feature, no bump)"."""
    rounds, state = play(
        {"ann": [6, 6, 6], "bob": [1]},
        board=WEB_CLASSIC,
        max_roll="forfeit_after_three",
        forfeit_to="square1",
        bump=True,
    )
    assert throws_of(rounds)[2] == ("ann", (6,), 12, 1, ("forfeit",))
    assert state.positions["ann"] == 1  # the ladder on 1 did not act


def test_c6_the_third_maximum_forfeits_even_when_it_would_finish() -> None:
    """RULES-CLASSIC C6: "the third maximum in a row in one turn is not moved, even when it
    would finish"."""
    rounds, state = play(
        {"ann": [6, 6, 6], "bob": [1]}, state=near_end(85), max_roll="forfeit_after_three"
    )
    assert throws_of(rounds)[2] == ("ann", (6,), 97, 0, ("forfeit",))
    assert not state.over


def test_c6_a_piece_that_finishes_throws_no_more() -> None:
    """RULES-CLASSIC C6: "A piece that finishes throws no more."; board-creator: "When a
    player reaches the final square, that player has finished and takes no further turns." """
    rounds, _state = play(
        {"ann": [6, 6], "bob": [1]},
        state=near_end(94),
        max_roll="roll_again",
        finish="all",
        all_used=False,
    )
    assert [t for t in throws_of(rounds) if t[0] == "ann"] == [
        ("ann", (6,), 94, 100, ("finished",))
    ]


# -- C7 bump ----------------------------------------------------------------------------------


def test_c7_landing_on_a_piece_sends_it_to_the_start() -> None:
    """web: "最终停下的格子上有对手棋子，就把它送回起点" (an opponent's piece on the square where
    yours finally stops goes back to the start)."""
    rounds, state = play({"ann": [4], "bob": [4]}, bump=True)
    assert throws_of(rounds)[1] == ("bob", (4,), 0, 4, ("bumped:ann",))
    assert state.positions == {"ann": 0, "bob": 4}
    assert (state.record("bob").bumps_given, state.record("ann").bumps_taken) == (1, 1)


def test_c7_a_bump_after_a_snake_is_where_the_piece_comes_to_rest() -> None:
    """RULES-CLASSIC C7: "When a piece comes to rest (after C3)"; web: "最终停下的格子"."""
    board = Board.from_mapping({"rows": 10, "columns": 10, "snakes": {"9": 2}})
    rounds, _state = play({"ann": [2], "bob": [9]}, board=board, bump=True)
    assert throws_of(rounds)[1] == ("bob", (9,), 0, 2, ("snake", "bumped:ann"))


def test_c7_square1_placement_bumps_where_the_ladder_ends() -> None:
    """RULES-CLASSIC C7: "Placement on space 1 by C5 is a landing: it bumps where the piece
    comes to rest (on the classic board, at 38 after the ladder)"."""
    start = ClassicState(("ann", "bob"), {"ann": 0, "bob": 38})
    rounds, _state = play(
        {"ann": [6], "bob": [1]},
        board=WEB_CLASSIC,
        state=start,
        bump=True,
        start_rule="max_to_enter",
        enter_on="square1",
    )
    assert throws_of(rounds)[0] == ("ann", (6,), 0, 38, ("entered", "ladder", "bumped:bob"))


def test_c7_no_bump_on_space_0_and_none_without_moving() -> None:
    """RULES-CLASSIC C7: "nobody is bumped on space 0" and "a piece that does not move
    (C4 exact, C5 waiting) bumps no one"."""
    board = Board.from_mapping({"rows": 10, "columns": 10, "snakes": {"3": 0}})
    rounds, state = play({"ann": [3], "bob": [3]}, board=board, bump=True)
    assert state.positions == {"ann": 0, "bob": 0}
    assert all("bumped" not in " ".join(t[4]) for t in throws_of(rounds))
    start = ClassicState(("ann", "bob"), {"ann": 99, "bob": 99})
    rounds, state = play({"ann": [3], "bob": [3]}, state=start, bump=True, ending="exact")
    assert state.positions == {"ann": 99, "bob": 99}


def test_c7_pieces_may_share_square_1_after_a_forfeit_there() -> None:
    """RULES-CLASSIC C7: "(pieces can share space 1 after a forfeit there ...)", and C6: the
    forfeit's piece goes there with "nothing acts where it goes (no feature, no bump)"."""
    start = ClassicState(("ann", "bob"), {"ann": 0, "bob": 1})
    rounds, state = play(
        {"ann": [6, 6, 6], "bob": [2]},
        state=start,
        bump=True,
        max_roll="forfeit_after_three",
        forfeit_to="square1",
    )
    assert throws_of(rounds)[2] == ("ann", (6,), 12, 1, ("forfeit",))
    assert state.positions == {"ann": 1, "bob": 3}


def test_c7_off_no_bumps() -> None:
    """RULES-CLASSIC options: `bump` defaults to false (web: 撞子 is an option, off by default)."""
    _, state = play({"ann": [4], "bob": [4]})
    assert state.positions == {"ann": 4, "bob": 4}


# -- C8 the Draconian re-entry ---------------------------------------------------------------


def test_c8_after_three_sixes_a_six_is_needed_then_the_next_throw_moves() -> None:
    """classic: "a player who is thrown back to square ZERO after rolling 3 sixes needs to
    roll a six before he can re-enter the game board. Once he rolls a 6, he can then
    re-roll and use the new number to re-enter the game board."."""
    rounds, state = play(
        {"ann": [6, 6, 6, 3, 6, 4], "bob": [1, 1, 1]},
        max_roll="forfeit_after_three",
        reenter_needs_max=True,
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert ann == [
        ("ann", (6,), 0, 6, ()),
        ("ann", (6,), 6, 12, ()),
        ("ann", (6,), 12, 0, ("forfeit",)),
        ("ann", (3,), 0, 0, ("waiting",)),
        ("ann", (6,), 0, 0, ("entered",)),
        ("ann", (4,), 0, 4, ()),
    ]
    assert state.reenter == frozenset()


def test_c8_needs_forfeit_after_three_to_the_start_naming_both_keys() -> None:
    """RULES-CLASSIC: "reenter_needs_max = true needs max_roll = "forfeit_after_three" and
    forfeit_to = "start"; any other combination is a config error naming the keys." """
    with pytest.raises(GameSetupError) as error:
        parse_options({"reenter_needs_max": True, "max_roll": "roll_again"})
    assert "reenter_needs_max" in str(error.value) and "max_roll" in str(error.value)
    with pytest.raises(GameSetupError) as error:
        parse_options(
            {"reenter_needs_max": True, "max_roll": "forfeit_after_three", "forfeit_to": "square1"}
        )
    assert "forfeit_to" in str(error.value)


# -- C9 the end, C10 counting ------------------------------------------------------------------


def test_c9_first_the_game_ends_mid_round() -> None:
    """web: "先到第 100 格的一方获胜，棋局立刻结束" (the first to square 100 wins, and the game
    ends at once)."""
    start = ClassicState(("ann", "bob", "cy"), {"ann": 10, "bob": 97, "cy": 50})
    rounds, state = play({"ann": [1], "bob": [3], "cy": [1]}, players=(), state=start)
    assert [t[0] for t in throws_of(rounds)] == ["ann", "bob"]  # cy never throws
    assert rounds[0].positions == {"ann": 11, "bob": 100, "cy": 50}
    assert state.over and state.result(ClassicOptions()) == {"winner": "bob"}


def test_c9_all_play_goes_on_until_everyone_has_finished() -> None:
    """board-creator: "play continues until all players have finished" and "The results
    record each player's finishing order and the number of dice rolls they needed"."""
    start = ClassicState(("ann", "bob", "cy"), {"ann": 95, "bob": 90, "cy": 99})
    rounds, state = play(
        {"ann": [6], "bob": [4, 6], "cy": [1]},
        players=(),
        state=start,
        finish="all",
    )
    assert [[t.player for t in r.throws] for r in rounds] == [
        ["ann", "bob", "cy"],  # ann finishes, then cy
        ["bob"],  # bob plays on alone, and finishes
    ]
    assert state.result(parse_options({"finish": "all"})) == {
        "order": [
            {"player": "ann", "round": 1, "rolls": 1},
            {"player": "cy", "round": 1, "rolls": 1},
            {"player": "bob", "round": 2, "rolls": 2},
        ]
    }


def test_c10_every_throw_counts_as_a_roll() -> None:
    """RULES-CLASSIC C10: "Every throw counts as one roll, qualifying and unmoved throws
    included"."""
    _, state = play({"ann": [1, 6, 2], "bob": [1, 1]}, start_rule="max_to_enter")
    assert state.record("ann").rolls == 3 and state.record("bob").rolls == 2


# -- C11 the server's dice --------------------------------------------------------------------


def test_c11_the_throws_depend_on_the_seed_and_round_alone() -> None:
    """RULES-CLASSIC C11: "The server throws the dice, from a per-game seed kept in the
    database, so a game can be replayed and audited." """
    dice = Dice(2, 6)
    first = [seeded_throws(42, 3, dice)(p) for p in ("ann", "bob", "ann")]
    again = [seeded_throws(42, 3, dice)(p) for p in ("x", "y", "z")]
    assert first == again and all(len(t) == 2 and all(1 <= d <= 6 for d in t) for t in first)
    assert first != [seeded_throws(42, 4, dice)(p) for p in ("ann", "bob", "ann")]
    assert first != [seeded_throws(43, 3, dice)(p) for p in ("ann", "bob", "ann")]


def test_c11_a_round_replayed_from_its_state_and_seed_gives_the_same_throws() -> None:
    """RULES-CLASSIC C11: a game "can be replayed and audited": the same state and seed give
    the same round."""
    opts = parse_options({"bump": True, "max_roll": "roll_again", "finish": "all"})
    state = ClassicState.start(("ann", "bob", "cy"))
    for _ in range(5):
        first = play_round(
            CLASSIC_SHEET, opts, state, seeded_throws(7, state.rounds_played + 1, opts.dice)
        )
        again = play_round(
            CLASSIC_SHEET,
            opts,
            ClassicState.from_json(state.as_json()),
            seeded_throws(7, state.rounds_played + 1, opts.dice),
        )
        assert first is not None and again is not None and first == again
        state = first[1]


# -- options ----------------------------------------------------------------------------------


def test_every_option_has_its_default() -> None:
    """RULES-CLASSIC, "Options and their defaults": every key's default, as the table gives it."""
    assert parse_options({}).as_mapping() == {
        "dice": "1d6",
        "start_rule": "none",
        "enter_on": "roll_again",
        "max_roll": "nothing",
        "forfeit_to": "start",
        "reenter_needs_max": False,
        "ending": "close_enough",
        "chain": False,
        "bump": False,
        "finish": "first",
    }


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"dice": "5d6"}, "games[0].dice: '5d6'"),
        ({"dice": "1d21"}, "games[0].dice"),
        ({"dice": 6}, "games[0].dice: 6"),
        ({"ending": "nearly"}, "games[0].ending: 'nearly' is not one of"),
        ({"bump": "yes"}, "games[0].bump: 'yes' is not true or false"),
        ({"finish": "last"}, "games[0].finish"),
    ],
)
def test_a_bad_option_is_refused_naming_its_key(data: dict[str, Any], named: str) -> None:
    """RULES-CLASSIC: "an unknown option value ... gets one line naming the key"."""
    with pytest.raises(GameSetupError) as error:
        parse_options(data, "games[0].")
    assert named in str(error.value)


def test_every_option_value_is_accepted() -> None:
    """RULES-CLASSIC, "Options and their defaults": every value of the table is accepted."""
    for key, values in {
        "start_rule": ("none", "max_to_enter"),
        "enter_on": ("roll_again", "square1"),
        "max_roll": ("nothing", "roll_again", "forfeit_after_three"),
        "forfeit_to": ("start", "square1"),
        "ending": ("close_enough", "exact", "bounce_back"),
        "finish": ("first", "all"),
        "chain": (True, False),
        "bump": (True, False),
        "dice": ("1d2", "4d20", "2d6"),
    }.items():
        for value in values:
            assert parse_options({key: value}).as_mapping()[key] == value


# -- C5 x C8, found in review -----------------------------------------------------------------

TEN = Board.from_mapping({"rows": 1, "columns": 10})


def test_c8_an_entry_that_did_not_move_still_owes_its_maximum() -> None:
    """RULES-CLASSIC C5: "A piece that entered but did not move from 0 (C4 exact) is still
    waiting", and C8: a piece sent to 0 by C6 "must throw a maximum to re-enter"."""
    rounds, state = play(
        {"ann": [[6, 6], [6, 6], [6, 6], [6, 6], [6, 5], [1, 2]], "bob": [[1, 1], [1, 1], [1, 1]]},
        board=TEN,
        dice="2d6",
        max_roll="forfeit_after_three",
        reenter_needs_max=True,
        ending="exact",
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert [t[4] for t in ann] == [
        ("no_move",),
        ("no_move",),
        ("forfeit",),  # three double sixes: back to the start
        ("entered",),
        ("no_move",),  # re-entered, but 11 cannot move from 0 to 10 exactly
        ("waiting",),  # so 1+2 does not move her: she still owes a double six
    ]
    assert state.positions["ann"] == 0 and "ann" in state.reenter


def test_c8_reentry_throws_again_whatever_enter_on_says() -> None:
    """RULES-CLASSIC C8: "then throw again and move by that total (C5's roll_again),
    whatever start_rule and enter_on say"."""
    start = ClassicState(("ann", "bob"), {"ann": 0, "bob": 0}, reenter=frozenset({"ann"}))
    rounds, state = play(
        {"ann": [[6, 6], [6, 6], [6, 6], [2, 3]], "bob": [[1, 1]]},
        board=TEN,
        state=start,
        dice="2d6",
        start_rule="max_to_enter",
        enter_on="square1",
        max_roll="forfeit_after_three",
        reenter_needs_max=True,
        ending="exact",
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert ann == [
        ("ann", (6, 6), 0, 0, ("entered",)),  # not placed on 1: C8 throws again
        ("ann", (6, 6), 0, 0, ("no_move",)),  # 12 > 10 under exact: still waiting
        ("ann", (6, 6), 0, 0, ("entered",)),  # qualifies again (never placed on 1)
        ("ann", (2, 3), 0, 5, ()),
    ]
    assert state.reenter == frozenset()


def test_c5_a_qualifying_throw_mid_turn_breaks_a_run_of_maximums() -> None:
    """RULES-CLASSIC C5: the qualifying throw "never counts as a maximum for C6"; read as
    no maximum at all, it ends a run of them (C6: "the third maximum in a row")."""
    board = Board.from_mapping({"rows": 10, "columns": 10, "snakes": {"12": 0}})
    rounds, state = play(
        {"ann": [6, 6, 6, 6, 6, 1], "bob": [1]},
        board=board,
        start_rule="max_to_enter",
        max_roll="forfeit_after_three",
    )
    ann = [t for t in throws_of(rounds) if t[0] == "ann"]
    assert [t[4] for t in ann] == [
        ("entered",),
        (),
        ("snake",),  # 0 -> 6 -> 12 -> 0: two maximums in a row
        ("entered",),  # qualifying again: not a third maximum, and the run starts over
        (),
        (),
    ]
    assert state.positions["ann"] == 7


def test_c7_pieces_bumped_together_are_named_in_the_player_lists_order() -> None:
    """RULES-CLASSIC C7: "each of them goes back to the waiting area (space 0), one bump
    each": named in the player list's order, whatever order the state was stored in."""
    start = ClassicState(("bob", "cy", "ann"), {"ann": 5, "cy": 5, "bob": 4})
    rounds, state = play({"bob": [1], "cy": [2], "ann": [3]}, players=(), state=start, bump=True)
    assert throws_of(rounds)[0] == ("bob", (1,), 4, 5, ("bumped:cy", "bumped:ann"))
    assert state.record("bob").bumps_given == 2
