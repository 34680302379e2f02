"""Migrations walk down and up on both databases, and agree with the models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from snl_pbem.store import Database, SchemaOutOfDate
from snl_pbem.store.migrate import (
    alembic_config,
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    migrations_dir,
    upgrade,
)
from snl_pbem.store.models import Base


def test_every_revision_down_and_up(db_url: str) -> None:
    database = Database(db_url)
    try:
        assert current_revision(database) is None
        with pytest.raises(SchemaOutOfDate, match="run 'snl-pbem db upgrade'"):
            check_schema(database)
        upgrade(database)
        check_schema(database)
        revisions = [
            s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()
        ]
        for revision in revisions:  # newest first: step down one at a time
            downgrade(database, "-1")
            assert current_revision(database) != revision
        assert current_revision(database) is None
        assert set(inspect(database.engine).get_table_names()) <= {"alembic_version"}
        upgrade(database)
        assert current_revision(database) == head_revision()
    finally:
        database.dispose()


# SQLite's expression index (lower(email)) cannot be reflected: compared on PostgreSQL
@pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based")
@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_models_agree_with_the_newest_migration(db: Database) -> None:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_migration_files_are_named_rev_slug() -> None:
    files = sorted(
        p.name for p in (migrations_dir() / "versions").glob("*.py") if p.name != "__init__.py"
    )
    assert files and all(name[:4].isdigit() and name[4] == "_" for name in files)


def test_0005_keeps_games_and_players_and_gives_them_their_defaults(db_url: str) -> None:
    """Upgrading a database of revision 0004 with a game and a player in it: they stay, the
    player is the config's (managed_by), never absent or resigned; downgrading keeps them."""
    from sqlalchemy import text

    database = Database(db_url)
    try:
        upgrade(database, "0004")
        with database.engine.begin() as con:
            con.execute(
                text(
                    "INSERT INTO games (id, key, title, state, timezone, board, schedule, "
                    "schedule_shift_s, double_from_round, trapdoor_rule, ruleset, options, seed, "
                    "close_when_all_in, settle_s, reveal_after_game, key_salt, rounds_played, "
                    "turns_played, created_at) VALUES (1, 'old', '', 'running', 'UTC', '{}', "
                    "'{}', 0, 7, 'all', 'postal', '{}', 1, false, 600, false, '00', 0, 0, "
                    "'2026-01-01 00:00:00')"
                )
            )
            con.execute(
                text(
                    "INSERT INTO players (id, game_id, name, email, key_source, active, joined_at)"
                    " VALUES (1, 1, 'ann', 'ann@example.org', 'config', true, "
                    "'2026-01-01 00:00:00')"
                )
            )
        upgrade(database)
        with database.engine.connect() as con:
            row = con.execute(
                text("SELECT managed_by, resigned_at, absent_until, absences FROM players")
            ).one()
            assert tuple(row) == ("config", None, None, 0)
            assert con.execute(text("SELECT extended_s FROM games")).scalar_one() == 0
        downgrade(database, "0004")
        with database.engine.connect() as con:
            assert con.execute(text("SELECT name FROM players")).scalar_one() == "ann"
    finally:
        database.dispose()


def test_a_senders_seats_in_every_game_are_found_through_an_index(db: Database) -> None:
    """A sender's seats across games are looked up by address in any case (what we sent
    them, before every batch is read): through ix_players_lower_email, never by reading
    every player on the server (42 ms a batch at 100,000 players, issue 23)."""
    from sqlalchemy import func, select, text

    from snl_pbem.store import Player

    query = select(Player.email).where(func.lower(Player.email).in_(["ann@example.org"]))
    with db.engine.connect() as connection:
        if db.is_sqlite:
            compiled = query.compile(db.engine, compile_kwargs={"literal_binds": True})
            plan = connection.execute(text(f"EXPLAIN QUERY PLAN {compiled}")).all()
        else:  # a table this small is read whole unless told otherwise
            connection.execute(text("SET enable_seqscan = off"))
            compiled = query.compile(db.engine, compile_kwargs={"literal_binds": True})
            plan = connection.execute(text(f"EXPLAIN {compiled}")).all()
    assert "ix_players_lower_email" in " ".join(str(row) for row in plan), plan


def test_the_index_of_mail_that_gave_a_key_holds_only_that_mail(db: Database) -> None:
    """ix_outbox_recipient_secret is partial: only the mail that gave a key or code (a few a
    player), so that the latest of it is read without a player's whole history (issue 23).
    The models' comparison with the migrations does not compare an index's condition."""
    from sqlalchemy import text

    with db.engine.connect() as connection:
        if db.is_sqlite:
            definition = connection.execute(
                text("SELECT sql FROM sqlite_master WHERE name = 'ix_outbox_recipient_secret'")
            ).scalar_one()
        else:
            definition = connection.execute(
                text(
                    "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_outbox_recipient_secret'"
                )
            ).scalar_one()
    compact = " ".join(definition.replace('"', "").split()).lower()
    assert "(recipient, status, id)" in compact, definition
    assert compact.endswith("where secret = 1" if db.is_sqlite else "where secret"), definition
