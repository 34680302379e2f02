"""a game's ruleset options and each round's ruleset record (the classic game's throws
and state; empty for postal games)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("games", schema=None) as batch_op:
        batch_op.add_column(sa.Column("options", sa.JSON(), nullable=False, server_default="{}"))
    with op.batch_alter_table("round_tallies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("record", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("round_tallies", schema=None) as batch_op:
        batch_op.drop_column("record")
    with op.batch_alter_table("games", schema=None) as batch_op:
        batch_op.drop_column("options")
