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
            database.check_schema()
        upgrade(database)
        database.check_schema()
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


def test_models_agree_with_the_newest_migration(db: Database) -> None:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_migration_files_are_named_rev_slug() -> None:
    files = sorted(
        p.name for p in (migrations_dir() / "versions").glob("*.py") if p.name != "__init__.py"
    )
    assert files and all(name[:4].isdigit() and name[4] == "_" for name in files)
