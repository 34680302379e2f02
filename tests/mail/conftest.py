"""Fixtures for intake tests: a started game g1 (see mailhelpers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mailhelpers import T0, game_config

from snl_pbem.config import Config
from snl_pbem.games import start_game, sync_games
from snl_pbem.store import Database
from snl_pbem.store.migrate import upgrade


@pytest.fixture
def intake(db: Database, tmp_path: Path) -> Iterator[tuple[Database, Config]]:
    """A started game on each database kind."""
    config = game_config(tmp_path / "config.toml", db.url)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    yield db, config


@pytest.fixture
def sqlite_intake(tmp_path: Path) -> Iterator[tuple[Database, Config]]:
    """A started game on SQLite only (for tests of parsing, where the database does not matter)."""
    db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
    upgrade(db)
    config = game_config(tmp_path / "config.toml", db.url)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    yield db, config
    db.dispose()
