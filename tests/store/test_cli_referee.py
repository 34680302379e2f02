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


def test_ingest_command_replays_saved_mail(make_config, capsys, tmp_path) -> None:
    from pathlib import Path

    config = make_config([{"keys": True}])
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    eml = tmp_path / "ann.eml"
    eml.write_bytes(b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <c1@x.org>\r\n\r\n"
                    b"KEY ann-key-123\r\nDICE 5\r\n")
    code, out, err = run(capsys, "ingest", str(eml), str(eml), str(Path("missing.eml")), *cfg)
    assert code == 2 and "missing.eml: cannot read" in err
    assert f"{eml}: processed (orders for round 1 (valid))" in out
    assert f"{eml}: duplicate (already stored)" in out
    assert "valid orders from 1 of 3" in run(capsys, "status", "g1", *cfg)[1]


def test_inbound_set_aside_mail_is_listed_shown_and_retried(
    make_config, capsys, tmp_path, monkeypatch
) -> None:
    """A message that processing could not handle (a bug, here made on purpose) is set aside;
    the referee lists it, reads it as received, and runs it again once the cause is fixed."""
    from snl_pbem import intake

    config = make_config([{"keys": True}])
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    assert run(capsys, "inbound", "list", *cfg)[1] == "no incoming mail set aside\n"
    eml = tmp_path / "ann.eml"
    eml.write_bytes(b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <s1@x.org>\r\n\r\n"
                    b"KEY ann-key-123\r\nDICE 5\r\n")

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug in processing")

    monkeypatch.setattr(intake, "_process", broken)
    code, out, _ = run(capsys, "ingest", str(eml), *cfg)
    assert code == 1 and "failed (RuntimeError: a bug in processing)" in out
    code, out, _ = run(capsys, "inbound", "list", *cfg)
    [line] = out.splitlines()
    number = line.split()[0]
    assert "failed" in line and "ann@example.org" in line and "a bug in processing" in line
    code, out, err = run(capsys, "inbound", "show", number, *cfg)
    assert code == 0 and out.startswith("From: ann@example.org") and "DICE 5" in out
    assert f"inbound {number}: failed" in err and "RuntimeError: a bug in processing" in err
    assert run(capsys, "inbound", "retry", number, *cfg)[0] == 1  # not fixed yet: still aside
    monkeypatch.undo()
    code, out, _ = run(capsys, "inbound", "retry", number, *cfg)
    assert code == 0 and f"inbound {number}: processed (orders for round 1 (valid))" in out
    assert "valid orders from 1 of 3" in run(capsys, "status", "g1", *cfg)[1]
    code, _, err = run(capsys, "inbound", "retry", number, *cfg)
    assert code == 2 and "it is processed, not set aside" in err
    code, _, err = run(capsys, "inbound", "show", *cfg)
    assert code == 2 and "give the message's number" in err
    assert run(capsys, "inbound", "list", *cfg)[1] == "no incoming mail set aside\n"
    assert "processed" in run(capsys, "inbound", "list", "--all", *cfg)[1]
