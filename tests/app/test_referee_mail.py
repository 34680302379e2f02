"""The referee by email (issue 15), on SQLite and PostgreSQL: the referee's key, each
command's effect and reply, the limits, and what forged or stray referee mail gets
(nothing done, and never a word to anyone but the referee)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from snl_pbem.app.games import sync_games
from snl_pbem.cli.main import main
from snl_pbem.config import Config, load_config
from snl_pbem.keys import verify_key
from snl_pbem.store import AuditEntry, Database, ServerKey

REFEREE_KEY = "ref-key-0123456789"


def with_referee_key(config: Config, key: str | None) -> Config:
    """The same config file with ``mail.referee_key`` set to ``key`` (or without one)."""
    lines = [
        line
        for line in config.path.read_text().splitlines()
        if not line.startswith("referee_key")
    ]
    if key is not None:
        at = lines.index('referee = "ref@example.org"') + 1
        lines.insert(at, f'referee_key = "{key}"')
    config.path.write_text("\n".join(lines) + "\n")
    return load_config(config.path)


# -- the key: hashed in the database, in step with the config -------------------------------


def server_keys(db: Database) -> list[tuple[str, str, str]]:
    with db.transaction() as s:
        return [(k.name, k.key_hash, k.salt) for k in s.scalars(select(ServerKey))]


def test_sync_keeps_the_referee_key_hashed_with_a_salt_of_its_own(
    db: Database, make_config, tmp_path: Path
) -> None:
    from mailhelpers import T0

    config = make_config()
    assert sync_games(db, config, T0).lines[-1] == "g1: player cy added"
    assert server_keys(db) == []  # none in the config: none stored, commands by mail off

    config = with_referee_key(config, REFEREE_KEY)
    report = sync_games(db, config, T0)
    assert report.lines == [
        "the referee key (mail.referee_key) set: referee commands by mail are on"
    ]
    [(name, key_hash, salt)] = server_keys(db)
    assert name == "referee" and verify_key(REFEREE_KEY.upper(), key_hash, salt)
    assert REFEREE_KEY not in key_hash and REFEREE_KEY not in salt
    assert sync_games(db, config, T0).lines == []  # unchanged: the same hash and salt
    assert server_keys(db) == [(name, key_hash, salt)]

    config = with_referee_key(config, "another-key-98765")
    assert sync_games(db, config, T0).lines == [
        "the referee key (mail.referee_key) changed: the old one no longer works"
    ]
    [(_, new_hash, new_salt)] = server_keys(db)
    assert new_salt != salt and not verify_key(REFEREE_KEY, new_hash, new_salt)
    assert verify_key("another-key-98765", new_hash, new_salt)

    config = with_referee_key(config, None)
    assert sync_games(db, config, T0).lines == [
        "the referee key (mail.referee_key) removed from the config: referee commands by "
        "mail are off"
    ]
    assert server_keys(db) == []
    with db.transaction() as s:
        changes = s.scalars(select(AuditEntry.action).where(AuditEntry.action == "referee-key"))
        assert len(changes.all()) == 3


def test_check_config_warns_when_referee_commands_by_mail_are_off(
    make_config, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config()
    assert main(["check-config", "--config", str(config.path)]) == 0
    warning = "warning: mail.referee_key is not set: referee commands by mail are off"
    assert warning in capsys.readouterr().out
    with_referee_key(config, REFEREE_KEY)
    assert main(["check-config", "--config", str(config.path)]) == 0
    out = capsys.readouterr().out
    assert "referee_key" not in out and REFEREE_KEY not in out
