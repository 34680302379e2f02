"""the latest mail that gave each sender a key read without their history: a partial index
on outbox (recipient, status, id) where secret (issue 23: what we sent a sender was read
from all of it, ranked by window functions, for every message they wrote)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_outbox_recipient_secret",
        "outbox",
        ["recipient", "status", "id"],
        sqlite_where=sa.text("secret = 1"),
        postgresql_where=sa.text("secret"),
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_recipient_secret", table_name="outbox")
