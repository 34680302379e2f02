"""players found by address in any case: an index on lower(email) (issue 23: each look-up
of a sender's seats across games read every player on the server)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


# SQLite cannot reflect an index on an expression: a later migration that recreates the
# players table there (op.batch_alter_table) drops it silently, and must create it again.
# tests/store/test_migrations.py checks that the newest schema still uses it.


def upgrade() -> None:
    op.create_index("ix_players_lower_email", "players", [sa.text("lower(email)")])


def downgrade() -> None:
    op.drop_index("ix_players_lower_email", table_name="players")
