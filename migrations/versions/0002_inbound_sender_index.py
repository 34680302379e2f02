"""an index on inbound mail by sender and receipt time (the per-sender storage cap)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inbound_messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_inbound_messages_sender_received_at", ["sender", "received_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("inbound_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_inbound_messages_sender_received_at")
