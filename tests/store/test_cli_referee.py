"""The referee's commands end to end, as a referee types them."""

from __future__ import annotations

import json

import pytest

from snl_pbem.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_referee_commands(make_config, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config()
    cfg = ("--config", str(config.path))
    code, _, err = run(capsys, "status", *cfg)
    assert code == 2 and "run 'snl-pbem db upgrade' first" in err
    code, out, _ = run(capsys, "db", "upgrade", *cfg)
    assert code == 0 and "database schema: empty -> 0001" in out
    assert "already at 0001" in run(capsys, "db", "upgrade", *cfg)[1]

    code, out, _ = run(capsys, "start", "g1", *cfg)
    assert code == 0 and "config: g1: new game with 3 players" in out
    assert "g1: started; round 1 deadline Fri 4 Jan 2030 18:00 GMT; 3 key(s) generated" in out
    code, _, err = run(capsys, "start", "g1", *cfg)
    assert code == 2 and "already started" in err

    code, out, _ = run(capsys, "status", "g1", "--json", *cfg)
    [game] = json.loads(out)
    assert (
        code == 0 and game["round"] == 1 and [p["orders"] for p in game["players"]] == ["none"] * 3
    )
    code, out, _ = run(capsys, "status", *cfg)
    assert "round 1 (one turn), deadline Fri 4 Jan 2030 18:00 GMT; valid orders from 0 of 3" in out

    code, out, _ = run(capsys, "extend", "g1", "--by", "1d", *cfg)
    assert code == 0 and "deadline now Sat 5 Jan 2030 18:00 GMT" in out
    assert run(capsys, "extend", "g1", "--by", "soon", *cfg)[0] == 2
    assert run(capsys, "pause", "g1", *cfg)[0] == 0
    assert "resumed" in run(capsys, "resume", "g1", *cfg)[1]

    code, out, _ = run(capsys, "close-round", "g1", *cfg)
    assert code == 0 and "g1: round 1 closed; positions: " in out and "round 2 open" in out
    code, out, _ = run(capsys, "rollback", "g1", *cfg)
    assert code == 0 and "round 1 reopened" in out and "paused" in out
    code, out, err = run(capsys, "close-round", "nope", *cfg)
    assert code == 2 and "nope: no such game in the database" in err
