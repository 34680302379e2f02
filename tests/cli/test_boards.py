"""``snl-pbem boards`` (the bundled boards, one line each) and ``snl-pbem board NAME``: a
bundled board's name works wherever a board file does, and a file of that name wins."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from snl_pbem.boards import bundled_names, bundled_table, description
from snl_pbem.cli.main import main
from snl_pbem.rules import Board

NAMES = bundled_names()
SVG = "{http://www.w3.org/2000/svg}"


def test_boards_lists_every_bundled_board_one_line_each(capsys) -> None:
    assert main(["boards"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == list(NAMES)
    for name, line in zip(NAMES, lines, strict=True):
        board = Board.from_mapping(bundled_table(name))
        assert f"{board.rows} x {board.columns}, last {board.last}" in line
        assert f"{len(board.ladders):>2} ladders, {len(board.snakes):>2} snakes" in line
        assert line.endswith(description(name))
    standard = lines[NAMES.index("standard")]
    assert "10 x 10, last 100   9 ladders, 10 snakes" in standard


@pytest.mark.parametrize("name", NAMES)
def test_board_name_svg_draws_each_bundled_board(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)  # no file of that name here
    out_svg = tmp_path / f"{name}.svg"
    assert main(["board", name, "--svg", str(out_svg)]) == 0
    out, err = capsys.readouterr()
    board = Board.from_mapping(bundled_table(name))
    assert f"last space {board.last}" in out
    assert "No orders (R17)" in out  # the default ruleset's notes, as for a board file
    assert err == f"SVG written to {out_svg}\n"
    root = ET.fromstring(out_svg.read_text())
    assert root.find(f"{SVG}title").text == name
    drawn = [e for e in root.iter(f"{SVG}line") if e.get("marker-end")]
    assert len(drawn) == len(board.features)


def test_a_file_wins_over_the_bundled_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("standard").write_text('[board]\nrows = 3\ncolumns = 3\nsnakes = { "8" = 2 }\n')
    assert main(["board", "standard"]) == 0
    out = capsys.readouterr().out
    assert "3 rows x 3 columns" in out and "Snakes (1): 8->2" in out


def test_an_unknown_board_name_lists_the_bundled_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["board", "standrad"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("snl-pbem board: board file standrad does not exist, and 'standrad' is")
    assert "bundled boards: " + ", ".join(NAMES) in err and "Traceback" not in err


def test_a_config_s_game_may_name_a_bundled_board(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[games]]\nid = "fam"\nboard = "family"\n[[games]]\nid = "odd"\nboard = "mountian"\n'
    )
    assert main(["board", str(config), "--game", "fam"]) == 0
    family = Board.from_mapping(bundled_table("family"))
    assert f"last space {family.last}" in capsys.readouterr().out
    assert main(["board", str(config), "--game", "odd"]) == 2
    err = capsys.readouterr().err
    assert f"{config}: games[1].board: board file {tmp_path / 'mountian'} does not exist" in err
    assert "bundled boards: " in err


@pytest.mark.parametrize(
    ("name", "stands_at"),
    [
        ("standard", "38 (1^38), 40, 43, 26 (47v26), 31, 37"),
        ("classic-sheet", "19 (1^19), 21, 24, 28, 15 (33v15), 21"),
        ("family", "1, 3, 6, 10, 15, 21"),
        ("marathon", "1, 3, 6, 10, 15, 21"),
        ("mountain", "1, 3, 6, 10, 15, 21"),
        ("snake-pit", "1, 3, 6, 10, 15, 3 (21v3)"),
    ],
)
def test_where_silence_leads_on_each_bundled_board(
    name: str, stands_at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """R17 plays the lowest die, 1 to 6 in the first set: each file's comment and the GM's
    guide say where that leads in a postal game."""
    monkeypatch.chdir(tmp_path)
    assert main(["board", name]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "No orders (R17): a player who never writes plays 1 2 3 4 5 6 in the first six turns "
        f"and stands at {stands_at} (with no trapdoor under them)"
    )
