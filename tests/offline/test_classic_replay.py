"""``snl-pbem adjudicate`` on classic replay files (RULES-CLASSIC.md, "Offline replay of a
classic game"): the output shape, byte-identical output, where play stops, and bad files
(exit 2, one line naming the key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from snl_pbem.cli.main import main

BOARD = {"rows": 10, "columns": 10, "ladders": {"9": 31, "80": 100}, "snakes": {"54": 34}}


def adjudicate(tmp_path: Path, capsysbinary, document: dict, *flags: str):
    path = tmp_path / "game.json"
    path.write_text(json.dumps(document))
    code = main(["adjudicate", str(path), *flags])
    out, err = capsysbinary.readouterr()
    return code, out, err.decode()


def test_the_output_shape_and_its_bytes(tmp_path: Path, capsysbinary) -> None:
    game = {
        "ruleset": "classic",
        "board": BOARD,
        "players": ["ann", "bob"],
        "bump": True,
        "rolls": {"ann": [3, [6], 3], "bob": [3, 2]},
    }
    code, out, _ = adjudicate(tmp_path, capsysbinary, game)
    assert code == 0
    document = json.loads(out)
    assert document == {
        "rounds": [
            {
                "round": 1,
                "throws": [
                    {"player": "ann", "dice": [3], "from": 0, "to": 3, "events": []},
                    {"player": "bob", "dice": [3], "from": 0, "to": 3, "events": ["bumped:ann"]},
                ],
                "positions": {"ann": 0, "bob": 3},
            },
            {
                "round": 2,
                "throws": [
                    {"player": "ann", "dice": [6], "from": 0, "to": 6, "events": []},
                    {"player": "bob", "dice": [2], "from": 3, "to": 5, "events": []},
                ],
                "positions": {"ann": 6, "bob": 5},
            },
        ],
        # round 3 is left out: ann throws 3 (to 9, the ladder) but bob has no throw left
        "result": None,
        "stats": {
            "ann": {"rolls": 2, "ladders": 0, "snakes": 0, "bumps_given": 0, "bumps_taken": 1},
            "bob": {"rolls": 2, "ladders": 0, "snakes": 0, "bumps_given": 1, "bumps_taken": 0},
        },
    }
    assert out == json.dumps(document, sort_keys=True, indent=2).encode() + b"\n"
    assert adjudicate(tmp_path, capsysbinary, game)[1] == out  # byte-identical again


def test_a_round_cut_short_by_the_win_is_output_with_the_winner(tmp_path, capsysbinary) -> None:
    """web: "先到第 100 格的一方获胜，棋局立刻结束"; RULES-CLASSIC: "A round cut short by
    finish = "first" is output, with the positions when the game ended"."""
    game = {
        "ruleset": "classic",
        "board": {"rows": 2, "columns": 5},
        "ending": "exact",
        "players": ["ann", "bob", "cy"],
        "rolls": {"ann": [4, 1], "bob": [4, 6], "cy": [1]},
    }
    code, out, _ = adjudicate(tmp_path, capsysbinary, game)
    document = json.loads(out)
    assert code == 0
    last = document["rounds"][-1]
    assert [t["player"] for t in last["throws"]] == ["ann", "bob"]  # cy never throws (C9)
    assert last["throws"][-1]["events"] == ["finished"]
    assert last["positions"] == {"ann": 5, "bob": 10, "cy": 1}
    assert document["result"] == {"winner": "bob"}


def test_finish_all_gives_the_order_round_and_rolls(tmp_path: Path, capsysbinary) -> None:
    game = {
        "ruleset": "classic",
        "board": {"rows": 1, "columns": 6},
        "players": ["ann", "bob"],
        "finish": "all",
        "rolls": {"ann": [6], "bob": [1, 2, 3]},
    }
    code, out, _ = adjudicate(tmp_path, capsysbinary, game)
    assert json.loads(out)["result"] == {
        "order": [
            {"player": "ann", "round": 1, "rolls": 1},
            {"player": "bob", "round": 3, "rolls": 3},
        ]
    }
    code, text, _ = adjudicate(tmp_path, capsysbinary, game, "--text")
    assert code == 0 and b"Finishing order: ann (round 1, 1 roll), bob (round 3, 3 rolls)" in text


def test_a_seed_plays_the_servers_dice_the_same_every_time(tmp_path, capsysbinary) -> None:
    game = {
        "ruleset": "classic",
        "board": BOARD,
        "players": ["ann", "bob", "cy"],
        "seed": 7,
        "dice": "2d6",
        "max_roll": "roll_again",
        "bump": True,
        "finish": "all",
    }
    code, out, _ = adjudicate(tmp_path, capsysbinary, game)
    document = json.loads(out)
    assert code == 0 and [o["player"] for o in document["result"]["order"]]
    assert adjudicate(tmp_path, capsysbinary, game)[1] == out
    game["seed"] = 8
    assert adjudicate(tmp_path, capsysbinary, game)[1] != out


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"ending": "sideways"}, "ending: 'sideways' is not one of"),
        ({"dice": "7d6"}, "dice: '7d6'"),
        ({"reenter_needs_max": True}, "reenter_needs_max"),
        ({"rolls": {"zed": [1]}}, "rolls.zed: 'zed' is not one of the players"),
        ({"rolls": {"ann": [1, 2, 7]}}, "rolls.ann[2]: 7 is not a die value 1 to 6"),
        ({"rolls": {"ann": [1, [2, 3]]}}, "rolls.ann[1]: [2, 3] is not a throw of 1 die"),
        ({"dice": "2d6", "rolls": {"ann": [[1, 9]]}}, "rolls.ann[0][1]: 9 is not a die value"),
        ({"board": {"rows": 10, "columns": 10, "ladders": {"100": 5}}}, "board"),
        ({"board": {"rows": 10, "columns": 10, "snakes": {"100": 5}}}, "last space 100"),
        ({"ruleset": "chess"}, 'ruleset: \'chess\' is not "postal" or "classic"'),
        ({"trapdoor_rule": "all"}, "trapdoor_rule: unknown key"),
        ({"seed": "x"}, "seed: 'x' is not a whole number"),
        ({"rolls": {"ann": [3.0]}}, "rolls.ann[0]: 3.0 is not a die value"),
        ({"rolls": {"ann": [True]}}, "rolls.ann[0]: True is not a die value"),
    ],
)
def test_a_bad_classic_file_exits_2_with_one_line_naming_the_key(
    tmp_path: Path, capsysbinary, change: dict, named: str
) -> None:
    game = {
        "ruleset": "classic",
        "board": BOARD,
        "players": ["ann", "bob"],
        "rolls": {"ann": [1]},
        **change,
    }
    code, out, err = adjudicate(tmp_path, capsysbinary, game)
    assert (code, out) == (2, b"")
    assert len(err.strip().splitlines()) == 1 and named in err, err


def test_rolls_win_over_a_seed_and_missing_lists_stop_play(tmp_path, capsysbinary) -> None:
    """RULES-CLASSIC: "A player missing from rolls has no throws" and "Without rolls, seed
    makes the server's throws"."""
    game = {
        "ruleset": "classic",
        "board": BOARD,
        "players": ["ann", "bob"],
        "seed": 5,
        "rolls": {"ann": [2, 2]},
    }
    code, out, _ = adjudicate(tmp_path, capsysbinary, game)
    document = json.loads(out)
    assert code == 0 and document["rounds"] == [] and document["result"] is None
    assert document["stats"]["ann"]["rolls"] == 0  # the cut round is left out, its rolls too
    game["rolls"] = {}
    code, out, _ = adjudicate(tmp_path, capsysbinary, game)
    assert code == 0 and json.loads(out)["rounds"] == []
