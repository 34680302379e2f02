"""Alembic environment: runs on the engine of a snl_pbem Database (SQLite pragmas included)."""

from __future__ import annotations

from alembic import context

from snl_pbem.store.db import Database
from snl_pbem.store.models import Base, UTCDateTime

config = context.config
target_metadata = Base.metadata


def render_item(kind: str, obj: object, autogen_context: object) -> str | bool:
    """Migrations spell UTCDateTime as a plain DateTime: the zone handling is Python's."""
    if kind == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime()"
    return False


def run_migrations_online() -> None:
    database = config.attributes.get("database")
    if database is None:
        database = Database(config.get_main_option("sqlalchemy.url") or "")
    with database.engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # SQLite rebuilds a table to change it (batch mode: copy, drop, rename). With
            # foreign keys enforced, dropping the old games table would delete every
            # player, round and order of the game (ON DELETE CASCADE). The pragma works
            # only outside a transaction: set on the driver's connection, before any.
            driver = connection.connection.driver_connection
            assert driver is not None
            driver.execute("PRAGMA foreign_keys=OFF")
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,  # SQLite cannot ALTER most things: copy-and-move tables
            compare_type=True,
            render_item=render_item,
        )
        try:
            with context.begin_transaction():
                context.run_migrations()
                if sqlite:  # the rebuilt tables must still agree with each other
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration left broken references: {broken[:5]}")
            connection.commit()
        finally:
            if sqlite:  # as every connection of the pool has it, whatever happened
                driver.execute("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run 'snl-pbem db upgrade'")
run_migrations_online()
