"""each message we send keeps the fingerprint of its lines (no text) in a column, written
with it (issue 23: a sender's latest forty were worked out again from their bytes whenever
a long game's players outgrew the fingerprints kept in memory)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # mail written before keeps None: its fingerprint is worked out from its body when
    # needed, as before (snl_pbem.app.intake.reading._fingerprints)
    op.add_column("outbox", sa.Column("fingerprint", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("fingerprint")
