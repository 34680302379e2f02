"""Board geometry, snakes and ladders, and every validation message (R2, R3, R11)."""

from __future__ import annotations

import pytest

from snl_pbem.rules import Board, BoardError, FeatureKind, Layout


def test_boustrophedon_below() -> None:
    board = Board.build()
    assert (board.below(45), board.below(20), board.below(11), board.below(10)) == (
        36,
        1,
        10,
        None,
    )
    assert board.cell(1) == (1, 1) and board.cell(20) == (2, 1) and board.cell(100) == (10, 1)
    assert all(board.below(n) is None or board.below(n) < n for n in board.spaces())


def test_rows_layout_below_is_n_minus_columns() -> None:
    board = Board.build(rows=6, columns=8, layout=Layout.ROWS)
    assert board.last == 48
    assert all(board.below(n) == (n - 8 if n > 8 else None) for n in board.spaces())


def test_explicit_grid_with_empty_cells() -> None:
    board = Board.from_mapping({"grid": [[None, 5], [3, 4], [1, 2]]})
    assert board.last == 5 and board.below(5) == 4 and board.below(3) == 1
    assert board.rows == 3 and board.columns == 2 and board.layout is Layout.GRID
    gap = Board.from_mapping({"grid": [[4, 3], [None, 2], [1, None]]})
    assert gap.below(4) is None and gap.below(3) == 2 and gap.below(2) is None


def test_families_select_by_every_property() -> None:
    board = Board.from_mapping(
        {
            "family": [
                {"kind": "ladder", "row": 1, "last_digit": 2, "shift": 30},
                {"kind": "ladder", "multiple_of": 25, "shift": 3},
                {"kind": "snake", "spaces": [66, 77], "shift": -60},
                {"kind": "snake", "column": 10, "row": 10, "shift": -9},
            ],
            "snakes": {"99": 1},
        }
    )
    assert board.ladders == {2: 32, 25: 28, 50: 53, 75: 78, 100: 103}
    assert board.snakes == {66: 6, 77: 17, 91: 82, 99: 1}
    assert board.feature_at(66) is not None and board.feature_at(66).kind is FeatureKind.SNAKE
    assert len(board.families) == 4


def test_last_space_may_be_a_snake_and_ladders_may_lead_past_it() -> None:
    board = Board.build(snakes={100: 40}, ladders={97: 120})
    assert board.resolve(100).final == 40
    assert board.resolve(97).final == 120
    assert board.resolve(103).final == 103  # past L: nothing there


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"snakes": {"45": 5}, "ladders": {"45": 60}},
            "space 45 is both a snake head (board.snakes.45) and a ladder foot (board.ladders.45)",
        ),
        ({"snakes": {"101": 5}}, "board.snakes.101: space 101 is not on the board (1..100)"),
        ({"ladders": {"0": 5}}, "board.ladders.0: space 0 is not on the board"),
        ({"ladders": {"10": 20}, "snakes": {"20": 10}}, "loop: 10 -> 20 -> 10"),
        (
            {"ladders": {"10": 30, "12": 50}, "snakes": {"30": 12, "50": 10}},
            "board: snakes and ladders loop: 10 -> 30 -> 12 -> 50 -> 10",
        ),
        ({"grid": [[3, 4], [1, 1]]}, "spaces given more than once in the grid: 1"),
        ({"grid": [[3, 5], [1, 2]]}, "spaces missing from the grid: 4"),
        ({"grid": [[4, 3], [1]]}, "grid row 2 (from the top) has 1 cell, not 2"),
        ({"grid": [[1, 2], [3, 4]]}, "space 3 is beneath space 1 but has a higher number"),
        ({"grid": [[1, 2], [None, None]]}, "space 1 must be on the bottom row"),
        ({"grid": [[2, "x"]]}, "board.grid[0][1]: 'x' is not a space number"),
        ({"layout": "spiral"}, "board.layout: 'spiral' is not a layout"),
        ({"rows": 0}, "board.rows: 0 is not between 1 and 100"),
        ({"columns": 2.5}, "board.columns: 2.5 is not a whole number"),
        ({"colour": "red"}, "board.colour: unknown key"),
        ({"snakes": {"16": 20}}, "a snake must lead down, but 16 -> 20 does not"),
        ({"snakes": {"x": 2}}, "board.snakes.x: 'x' is not a space number"),
        ({"family": [{"kind": "ladder", "shift": 3}]}, "needs at least one selector"),
        ({"family": [{"kind": "worm", "row": 1, "shift": 3}]}, "'worm' is not 'snake' or"),
        (
            {"family": [{"kind": "snake", "column": 11, "shift": -3}]},
            "board.family[0].column: 11 is not between 1 and 10",
        ),
        (
            {"family": [{"kind": "snake", "digit_sum": 1, "last_digit": 5, "shift": -3}]},
            "selects no space on this board",
        ),
        (
            {"family": [{"kind": "snake", "row": 2, "shift": -3, "size": 2}]},
            "board.family[0].size: unknown key",
        ),
        (
            {"snakes": {"30": 10}, "family": [{"kind": "snake", "spaces": [30], "shift": -5}]},
            "space 30 is given different snake destinations: 10 (board.snakes.30), "
            "25 (board.family[0])",
        ),
        ([1, 2], "board: expected a table of board settings, got a list"),
    ],
)
def test_bad_boards_are_rejected_naming_the_spaces(table: object, message: str) -> None:
    with pytest.raises(BoardError) as caught:
        Board.from_mapping(table)
    assert message in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(BoardError) as caught:
        Board.from_mapping({"snakes": {"16": 20, "200": 3}, "ladders": {"5": 2}})
    assert len(caught.value.problems) == 3


def test_a_long_chain_that_ends_is_accepted() -> None:
    board = Board.build(ladders={2: 20, 20: 40, 40: 60}, snakes={60: 3})
    assert board.resolve(2).final == 3
    assert [e.end for e in board.resolve(2).events] == [20, 40, 60, 3]
