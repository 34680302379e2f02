"""Fixtures shared by the whole suite: databases (SQLite and a private PostgreSQL), servers
(Dovecot, an SMTP sink) and a started game."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

from confighelpers import make_config  # noqa: F401  (a fixture, shared by the suite)
from mailhelpers import OPENED, T0, game_config
from pgserver import PostgresServer, PostgresUnavailable

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import Config
from snl_pbem.store import Database
from snl_pbem.store.migrate import upgrade

# Hypothesis's wall-clock verdicts (a 200 ms deadline per example, the too_slow health check)
# fail on a busy machine; the property tests are bounded by their number of examples instead.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The test run's own PostgreSQL; under CI=true it must start, elsewhere it may skip."""
    try:
        server = PostgresServer().start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI: {exc}")
        pytest.skip(f"PostgreSQL not available: {exc}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'snl.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    name = server.create_database()
    yield server.url(name)
    server.drop_database(name)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A fresh database of each kind, migrated to the newest schema."""
    database = Database(db_url)
    upgrade(database)
    yield database
    database.dispose()


@pytest.fixture(scope="session")
def dovecot():
    """The test run's own Dovecot; under CI=true it must start, elsewhere it may skip."""
    from dovecotserver import DovecotServer, DovecotUnavailable

    try:
        server = DovecotServer().start()
    except DovecotUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Dovecot is required under CI: {exc}")
        pytest.skip(f"Dovecot not available: {exc}")
    yield server
    server.remove()


@pytest.fixture
def smtp_sink():
    """A capturing SMTP server on a free loopback port."""
    from smtpsink import SmtpSink

    sink = SmtpSink().start()
    yield sink
    sink.stop()


# -- a started game g1 whose players ann, bob and cy have known keys (see mailhelpers) ----


@pytest.fixture
def intake(db: Database, tmp_path: Path) -> Iterator[tuple[Database, Config]]:
    """A started game on each database kind."""
    config = game_config(tmp_path / "config.toml", db.url)
    sync_games(db, config, T0)
    start_game(db, config, "g1", OPENED)
    yield db, config


@pytest.fixture
def sqlite_intake(tmp_path: Path) -> Iterator[tuple[Database, Config]]:
    """A started game on SQLite only (for tests of parsing, where the database does not matter)."""
    db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
    upgrade(db)
    config = game_config(tmp_path / "config.toml", db.url)
    sync_games(db, config, T0)
    start_game(db, config, "g1", OPENED)
    yield db, config
    db.dispose()
