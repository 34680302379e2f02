"""seats, replace, approve, refuse as a referee types them."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from snl_pbem.cli.main import main
from snl_pbem.store import AuditEntry, Database, Game, Player, Signup


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_seats_replace_approve_refuse(make_config, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config([{"id": "g1"}], extra="")
    text = config.path.read_text().replace(
        "double_from_round = 7", 'double_from_round = 7\nsignup = "approval"'
    )
    config.path.write_text(text)
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    db = Database(config.database_url)
    try:
        with db.transaction() as s:  # two confirmed sign-ups waiting (as CONFIRM leaves them)
            game = s.scalar(select(Game))
            for name in ("dee", "eve"):
                s.add(
                    Signup(
                        game_id=game.id,
                        name=name,
                        email=f"{name}@example.net",
                        state="waiting",
                        created_at=game.created_at,
                    )
                )
        code, out, _ = run(capsys, "seats", "g1", *cfg)
        assert code == 0 and "ann" in out and "waiting for approval:" in out and "dee" in out
        code, out, _ = run(capsys, "approve", "g1", "dee", *cfg)
        assert code == 0 and out.strip() == "g1: dee approved, on the standby list"
        code, out, _ = run(capsys, "refuse", "g1", "eve", *cfg)
        assert code == 0 and "eve's sign-up refused" in out
        code, _, err = run(capsys, "approve", "g1", "nobody", *cfg)
        assert code == 2 and "no sign-up named 'nobody' waits for approval" in err
        code, out, _ = run(capsys, "replace", "g1", "bob", "dee@example.net", *cfg)
        assert code == 0 and "bob's seat now belongs to dee@example.net" in out
        code, _, err = run(capsys, "replace", "g1", "bob", "cy@example.org", *cfg)
        assert code == 2 and "already plays in g1 (as cy)" in err
        code, _, err = run(capsys, "replace", "g1", "zed", "z@example.net", *cfg)
        assert code == 2 and "no player 'zed'" in err
        code, _, err = run(capsys, "replace", "g1", "cy", "not an address", *cfg)
        assert code == 2 and "is not an email address" in err
        code, out, _ = run(capsys, "seats", "g1", *cfg)
        assert "dee@example.net" in out and "standby:" not in out  # dee was seated
        with db.transaction() as s:
            assert s.scalar(select(Player.email).where(Player.name == "bob")) == "dee@example.net"
            rows = set(s.execute(select(AuditEntry.action, AuditEntry.actor, AuditEntry.via)))
        assert {
            ("replace", "referee", "cli"),
            ("signup-standby", "referee", "cli"),
            ("signup-refused", "referee", "cli"),
        } <= rows
    finally:
        db.dispose()
