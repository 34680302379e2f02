"""inbound mail set aside for the referee is stored as "set-aside", no longer as "failed"
(the outbox's word for mail it gave up on)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

inbound_messages = sa.table("inbound_messages", sa.column("status", sa.String(16)))


def _rename(old: str, new: str) -> None:
    op.execute(
        inbound_messages.update()
        .where(inbound_messages.c.status == op.inline_literal(old))
        .values(status=op.inline_literal(new))
    )


def upgrade() -> None:
    _rename("failed", "set-aside")


def downgrade() -> None:
    _rename("set-aside", "failed")
