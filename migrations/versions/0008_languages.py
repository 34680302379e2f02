"""the players' languages (issue 25): a player's, a sign-up's and an observer's own
language, chosen by mail (LANGUAGE, JOIN ... LANGUAGE) or in the config; NULL is the
game's language

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLES = ("players", "signups", "observers")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("language", sa.String(16), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("language")
