"""The bundled named boards (snl_pbem/boards/*.toml): each validates, is sensible for the
classic ruleset (RULES-CLASSIC.md C4), says what it is, and the classic sheet's board has
every feature the sheet names. The resolution rule of a board given by name or path."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from snl_pbem.boards import (
    UnknownBoard,
    bundled_names,
    bundled_table,
    bundled_text,
    description,
    locate,
)
from snl_pbem.rules import Board, FeatureKind, Layout

NAMES = bundled_names()


def board(name: str) -> Board:
    return Board.from_mapping(bundled_table(name), f"{name}.board")


def prose(text: str) -> str:
    """A comment block as one line of words, without its ``#`` marks."""
    return " ".join(" ".join(line.lstrip("#").split()) for line in text.splitlines())


def test_the_issue_s_boards_and_at_least_three_more_are_bundled() -> None:
    assert {"standard", "classic-sheet"} <= set(NAMES)
    assert len(NAMES) >= 5
    boards = [board(name) for name in NAMES]
    assert len({b.last for b in boards}) >= 4, "boards of different sizes"
    assert any(b.layout is not Layout.BOUSTROPHEDON for b in boards)


@pytest.mark.parametrize("name", NAMES)
def test_every_bundled_board_validates(name: str) -> None:
    data = tomllib.loads(bundled_text(name))
    assert list(data) == ["board"], "a bundled file holds one [board] table and nothing else"
    found = board(name)
    assert found.features and found.snakes and found.ladders


@pytest.mark.parametrize("name", NAMES)
def test_every_bundled_file_starts_by_saying_what_it_is(name: str) -> None:
    lines = bundled_text(name).splitlines()
    opening = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    assert len(opening) >= 3, "a comment block: what the board is and where it comes from"
    assert description(name) == opening[0].removeprefix("# ")
    assert 20 <= len(description(name)) <= 100
    assert "sheet" in " ".join(opening) or "snl-pbem" in " ".join(opening)  # its origin


@pytest.mark.parametrize("name", NAMES)
def test_no_bundled_board_has_a_feature_on_its_last_space(name: str) -> None:
    """C4: "A classic board has no snake or ladder on L" (a ladder TO L is fine)."""
    found = board(name)
    assert found.feature_at(found.last) is None


def _finishing(found: Board, chain: bool) -> tuple[set[int], set[int]]:
    """Positions reachable from 0 with one six-sided die under C4 `exact` (a total that
    would pass L does not move), and those from which L can still be reached."""

    def move(position: int, die: int) -> int:
        target = position + die
        if target > found.last:
            return position
        feature = found.feature_at(target)
        while feature is not None:
            target = feature.destination
            feature = found.feature_at(target) if chain else None
        return target

    def reach(start: int) -> set[int]:
        seen, todo = {start}, [start]
        while todo:
            here = todo.pop()
            for die in range(1, 7):
                there = move(here, die)
                if there not in seen:
                    seen.add(there)
                    todo.append(there)
        return seen

    reachable = reach(0)
    return reachable, {p for p in reachable if found.last in reach(p)}


@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_the_last_space_stays_reachable_under_an_exact_ending(name: str, chain: bool) -> None:
    """C4 `exact`: "a total that would pass L is not moved at all": from every space a
    piece can reach with 1d6, it can still finish (no piece is stuck for ever), with C3's
    `chain` on or off. The loosest endings (close_enough, bounce_back) finish sooner."""
    found = board(name)
    reachable, finishing = _finishing(found, chain)
    assert found.last in reachable
    assert reachable == finishing, sorted(reachable - finishing)


@pytest.mark.parametrize("name", NAMES)
def test_a_board_that_says_nothing_chains_has_no_chain(name: str) -> None:
    """A file saying "No snake or ladder ends on another" keeps its word: C3's `chain`
    option changes nothing on it."""
    said = prose(bundled_text(name)).lower()
    if "no snake or ladder ends on another" not in said:
        pytest.skip("the file makes no such claim")
    found = board(name)
    assert not [f for f in found.features if found.feature_at(f.destination) is not None]


def test_classic_sheet_has_every_feature_the_sheet_names() -> None:
    """seeds/classic-rules.txt, each sentence naming a feature of its board."""
    found = board("classic-sheet")
    # "a 10x10 grid game board numbered from 1 to 100"
    assert (found.rows, found.columns, found.last) == (10, 10, 100)
    assert found.layout is Layout.BOUSTROPHEDON
    # "landing on square #9 lets players advance to square #31 in just one die roll"
    assert found.ladders[9] == 31
    # "Landing on square #80 ... has a ladder that automatically elevates the player to
    # square #100"
    assert found.ladders[80] == 100
    # "landing on square #54 demotes the player to square #34"
    assert found.snakes[54] == 34
    # "The lucky player who rolls a 1 lands at the foot of a ladder"
    first = found.feature_at(1)
    assert first is not None and first.kind is FeatureKind.LADDER
    # "A player has just landed on square #99. In order to win the game, he needs to roll
    # a 1": 99 is a place to stand.
    assert found.feature_at(99) is None


def test_classic_sheet_says_which_features_are_its_own_and_which_were_added() -> None:
    text = bundled_text("classic-sheet")
    header = text[: text.index("[board]")]
    sheet, added = (prose(part) for part in header.split("# Added here"))
    for feature in ("9 -> 31", "80 -> 100", "54 -> 34", "foot of a ladder", "99"):
        assert feature in sheet, feature
    found = board("classic-sheet")
    named = {(1, None), (9, 31), (80, 100), (54, 34)}
    for feature in found.features:
        if (feature.space, feature.destination) in named:
            continue
        if feature.space == 1:  # the foot is the sheet's, the top added
            assert f"ladder from 1: {feature.destination}" in added
            continue
        pair = f"{feature.space} -> {feature.destination}"
        assert pair in added, f"{pair} is not listed as added"


def test_standard_is_the_web_sheet_s_classic_board() -> None:
    """seeds/web-game-zh.txt: 10 x 10, 1 bottom-left, rows winding back ("一行一行折返"),
    100 top-left; "经典盘第 1 格正好是梯子脚" (the classic board: a ladder 1 -> 38)."""
    found = board("standard")
    assert (found.rows, found.columns, found.last) == (10, 10, 100)
    assert found.cell(1) == (1, 1) and found.cell(11) == (2, 10) and found.cell(100) == (10, 1)
    assert found.ladders[1] == 38


def test_a_file_wins_over_a_bundled_name_of_the_same_spelling(tmp_path: Path) -> None:
    assert locate("standard", tmp_path) == "standard"
    (tmp_path / "standard").write_text('[board]\nsnakes = { "16" = 6 }\n')
    assert locate("standard", tmp_path) == tmp_path / "standard"
    assert locate(str(tmp_path / "standard"), Path("/nowhere")) == tmp_path / "standard"


def test_an_unknown_board_names_the_file_and_lists_the_bundled_names(tmp_path: Path) -> None:
    with pytest.raises(UnknownBoard) as caught:
        locate("standrad", tmp_path)
    message = str(caught.value)
    assert f"board file {tmp_path / 'standrad'} does not exist" in message
    assert "bundled boards: " + ", ".join(NAMES) in message
    (tmp_path / "folder").mkdir()  # exists, not a file: the caller's reading says why
    assert locate("folder", tmp_path) == tmp_path / "folder"
    with pytest.raises(UnknownBoard, match=re.escape("'nope' is not a bundled board")):
        bundled_text("nope")
