"""The ``adjudicate``, ``board`` and ``demo`` commands on good and bad files."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from snl_pbem.cli.main import main

EXAMPLE = Path(__file__).parents[2] / "snl_pbem" / "examples" / "example-game.json"


def run(argv: list[str], capsysbinary: pytest.CaptureFixture[bytes]) -> tuple[int, bytes, str]:
    code = main(argv)
    out, err = capsysbinary.readouterr()
    return code, out, err.decode()


def write(tmp_path: Path, name: str, content: object) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


DESIGN_EXAMPLE = {
    "board": {
        "rows": 10,
        "columns": 10,
        "layout": "boustrophedon",
        "snakes": {"16": 6},
        "ladders": {"4": 14},
        "family": [
            {"kind": "ladder", "column": 3, "shift": 10},
            {"kind": "snake", "digit_sum": 8, "shift": -15},
        ],
    },
    "players": ["ann", "bob", "cy"],
    "double_from_round": 7,
    "rounds": [
        {"ann": {"dice": [3], "trapdoor": 45}, "bob": {"dice": [2]}, "cy": None},
    ],
}


def test_adjudicate_the_design_example(tmp_path: Path, capsysbinary) -> None:
    code, out, err = run(
        ["adjudicate", str(write(tmp_path, "g.json", DESIGN_EXAMPLE))], capsysbinary
    )
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc == {
        "result": None,
        "rounds": [
            {
                "round": 1,
                "nominations": {"ann": 45, "bob": 2, "cy": 1},
                "trapdoors": [],
                "nmr": ["cy"],
                "turns": [
                    {
                        "turn": 1,
                        "dice": {"ann": 3, "bob": 2, "cy": 1},
                        "positions": {"ann": 13, "bob": 2, "cy": 1},
                    }
                ],
                "positions": {"ann": 13, "bob": 2, "cy": 1},
            }
        ],
    }
    # sorted keys, and the same bytes every time
    assert out.index(b'"nmr"') < out.index(b'"nominations"') < out.index(b'"positions"')
    assert run(["adjudicate", str(tmp_path / "g.json")], capsysbinary)[1] == out


def test_adjudicate_toml_and_detail(tmp_path: Path, capsysbinary) -> None:
    toml = """
players = ["ann", "bob"]
double_from_round = 2
trapdoor_rule = "most-voted"
seed = 4
[board]
ladders = { "4" = 14 }
[[rounds]]
ann = { dice = [4], trapdoor = 20 }
bob = { dice = [4, 4] }
[[rounds]]
ann = { dice = [1, 2] }
"""
    code, out, _ = run(
        ["adjudicate", "--detail", str(write(tmp_path, "g.toml", toml))], capsysbinary
    )
    assert code == 0
    first, second = json.loads(out)["rounds"]
    assert first["turns"][0]["moves"]["ann"] == {
        "start": 0,
        "target": 4,
        "final": 14,
        "events": ["ladder 4\u219214"],
    }
    assert first["nmr"] == ["bob"] and "needs 1 die" in first["nmr_reasons"]["bob"]
    assert first["votes"] == {"1": 1, "20": 1} and first["vote_threshold"] == 2
    assert len(second["turns"]) == 2 and second["nmr"] == ["bob"]


def test_adjudicate_stops_when_the_game_ends(tmp_path: Path, capsysbinary) -> None:
    rounds = [{"ann": {"dice": [d]}} for d in (6, 5, 4, 3, 2, 1)] * 3
    game = {
        "board": {"rows": 2, "columns": 10},
        "players": ["ann", "bob"],
        "rounds": rounds,
        "double_from_round": 99,
    }
    code, out, err = run(["adjudicate", str(write(tmp_path, "g.json", game))], capsysbinary)
    doc = json.loads(out)
    assert code == 0 and doc["result"] == {"winner": "ann"}
    assert len(doc["rounds"]) == 5  # 6+5+4+3+2 = 20
    assert "13 later rounds in the file were not played" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "not valid JSON"),
        (
            {"board": {}, "players": ["a"], "rounds": [{"zed": {"dice": [1]}}]},
            "rounds[0].zed: 'zed' is not one of the players",
        ),
        (
            {"board": {"snakes": {"5": 9}}, "players": ["a"]},
            "board.snakes.5: a snake must lead down",
        ),
        (
            {"board": {}, "players": ["a"], "rounds": [{"a": {"dice": 3}}]},
            "rounds[0].a.dice: expected a list of dice, got 3",
        ),
        (
            {"board": {}, "players": ["a"], "rounds": [{"a": {"dice": ["x"]}}]},
            "rounds[0].a.dice[0]: 'x' is not a whole number",
        ),
        ({"board": {}, "players": ["a", "a"]}, "players: named more than once: a"),
        ({"board": {}, "players": ["a"], "double_from_round": 0}, "double_from_round"),
        ({"board": {}, "players": ["a"], "trapdoor_rule": "some"}, "trapdoor_rule"),
        ({"board": {}, "players": ["a"], "extra": 1}, "extra: unknown key"),
        ({"players": ["a"]}, "board: missing"),
        ([1, 2], "expected a table with board, players and rounds"),
    ],
)
def test_adjudicate_bad_files_exit_2_with_one_line(
    tmp_path: Path, capsysbinary, content: object, message: str
) -> None:
    path = tmp_path / "bad.json"
    if content is not None:
        write(tmp_path, "bad.json", content)
    code, out, err = run(["adjudicate", str(path)], capsysbinary)
    assert code == 2 and out == b""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert err.startswith(f"snl-pbem adjudicate: {path}")


def lines_cell(text: str, line: int, column: int) -> str:
    return text.splitlines()[line].split("|")[column + 1].strip()


def test_board_text_and_svg(tmp_path: Path, capsysbinary) -> None:
    svg = tmp_path / "board.svg"
    code, out, err = run(["board", str(EXAMPLE), "--svg", str(svg)], capsysbinary)
    text = out.decode()
    assert code == 0 and "SVG written" in err
    assert lines_cell(text, 5, 0) == "80^100" and lines_cell(text, 5, 9) == "71^91"
    assert "17v7" in text and "Family: snake -12 on digit sum 13" in text
    assert lines_cell(text, 1, 0) == "100" and lines_cell(text, 19, 0) == "1^38"
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    assert len(root.findall(f"{ns}rect")) == 101  # background and 100 cells
    assert len(root.findall(f"{ns}line")) == 22  # 8 ladders + 14 snakes
    numbers = {t.text for t in root.findall(f"{ns}text")}
    assert {"1", "50", "100"} <= numbers


def test_board_from_a_bare_table_and_from_a_config(tmp_path: Path, capsysbinary) -> None:
    bare = write(tmp_path, "b.toml", 'rows = 2\ncolumns = 3\nlayout = "rows"\n[ladders]\n"2" = 5\n')
    code, out, _ = run(["board", str(bare)], capsysbinary)
    assert code == 0 and b"2^5" in out and b"2 rows x 3 columns, rows layout" in out
    write(tmp_path, "std.toml", '[board]\nsnakes = { "9" = 2 }\n')
    config = write(
        tmp_path,
        "config.toml",
        """
[[games]]
id = "one"
board = "std.toml"
[[games]]
id = "two"
board = { rows = 3, columns = 3, snakes = { "8" = 1 } }
""",
    )
    code, out, _ = run(["board", str(config)], capsysbinary)
    assert code == 0 and b"== one ==" in out and b"9v2" in out and b"8v1" in out
    code, out, err = run(["board", str(config), "--svg", str(tmp_path / "x.svg")], capsysbinary)
    assert code == 2 and "choose one with --game (one, two)" in err
    code, out, _ = run(["board", str(config), "--game", "two"], capsysbinary)
    assert code == 0 and b"8v1" in out and b"9v2" not in out


def test_board_bad_file(tmp_path: Path, capsysbinary) -> None:
    bad = write(tmp_path, "b.json", {"board": {"ladders": {"10": 20}, "snakes": {"20": 10}}})
    code, out, err = run(["board", str(bad)], capsysbinary)
    assert code == 2 and out == b"" and "loop: 10 -> 20 -> 10" in err
    code, _, err = run(["board", str(write(tmp_path, "n.json", {"x": 1}))], capsysbinary)
    assert code == 2 and "no [board] table found" in err


BOARDS = Path(__file__).parents[2] / "deploy" / "boards"


@pytest.mark.parametrize(
    ("board", "stands_at"),
    [
        ("standard.toml", "38 (1^38), 40, 43, 26 (47v26), 31, 37"),
        ("columns.toml", "1, 12 (3^12), 15, 19, 24, 30"),
        ("columns-and-digits.toml", "1, 3, 6, 10, 15, 21"),
    ],
)
def test_board_says_where_the_no_orders_default_leads(board, stands_at, capsysbinary) -> None:
    """R17 plays the lowest die: 1 to 6 in the first set (the GM's guide quotes these)."""
    code, out, _ = run(["board", str(BOARDS / board)], capsysbinary)
    last = out.decode().splitlines()[-1]
    assert code == 0 and last == (
        "No orders (R17): a player who never writes plays 1 2 3 4 5 6 in the first six turns "
        f"and stands at {stands_at} (with no trapdoor under them)"
    )


def test_board_no_orders_line_stops_at_the_end(tmp_path: Path, capsysbinary) -> None:
    bare = write(tmp_path, "b.toml", 'rows = 2\ncolumns = 5\nladders = { "3" = 12 }\n')
    code, out, _ = run(["board", str(bare)], capsysbinary)
    assert code == 0 and out.decode().splitlines()[-1] == (
        "No orders (R17): a player who never writes plays 1 2 in the first 2 turns and "
        "stands at 1, 12 (3^12), at or past the last space 10: the game ends "
        "(with no trapdoor under them)"
    )


def test_demo_plays_the_bundled_game(capsysbinary) -> None:
    code, out, _ = run(["example"], capsysbinary)
    text = out.decode()
    assert code == 0
    assert "Round 1 (one turn)" in text and "Round 7 (two turns)" in text
    assert "trapdoor 40->21" in text and "referee moved: invalid dice (R18)" in text
    assert "Winner: ann after turn 16." in text


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("snl-pbem")
    done = subprocess.run(
        [str(script), "adjudicate", str(EXAMPLE)], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == {"winner": "ann"}
