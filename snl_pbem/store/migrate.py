"""Alembic, driven from code: ``snl-pbem db upgrade`` and the schema check at start."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from snl_pbem.store.db import Database, SchemaOutOfDate


def migrations_dir() -> Path:
    """The top-level ``migrations/`` folder (installed as ``snl_pbem.migrations``)."""
    return Path(str(resources.files("snl_pbem.migrations")))


def alembic_config(database: Database | None = None) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(migrations_dir()))
    if database is not None:
        config.set_main_option("sqlalchemy.url", database.url.replace("%", "%%"))
        config.attributes["database"] = database
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations found"
    return head


def current_revision(database: Database) -> str | None:
    with database.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(database: Database, revision: str = "head") -> None:
    command.upgrade(alembic_config(database), revision)


def downgrade(database: Database, revision: str) -> None:
    command.downgrade(alembic_config(database), revision)


def check_schema(database: Database) -> None:
    """Raise :class:`SchemaOutOfDate` unless ``database`` is at the newest migration."""
    current = current_revision(database)
    head = head_revision()
    if current != head:
        where = make_url(database.url).render_as_string(hide_password=True)
        raise SchemaOutOfDate(
            f"the database {where} is at schema revision {current or 'none (empty)'}, "
            f"this version needs {head}: run 'snl-pbem db upgrade' first"
        )
