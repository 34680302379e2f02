"""joining, leaving and refereeing by email: sign-ups, confirmations, observers, the
referee's key; players' seats (who manages them, resigned, absent); the audit's "via"

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("games", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("extended_s", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("start_noted_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("players", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("managed_by", sa.String(16), nullable=False, server_default="config")
        )
        batch_op.add_column(sa.Column("resigned_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("absent_until", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("absences", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("via", sa.String(16), nullable=True))
    op.create_table(
        "signups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("game_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("decided_by", sa.String(254), nullable=True),
        sa.Column("player_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["game_id"], ["games.id"], name=op.f("fk_signups_game_id_games"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["player_id"],
            ["players.id"],
            name=op.f("fk_signups_player_id_players"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signups")),
    )
    op.create_index("ix_signups_game_state", "signups", ["game_id", "state", "id"])
    op.create_table(
        "confirmations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("game_id", sa.Integer(), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("code_hash", sa.String(80), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("used_at", sa.DateTime(), nullable=True),
        sa.Column("wrong", sa.Integer(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(
            ["game_id"],
            ["games.id"],
            name=op.f("fk_confirmations_game_id_games"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_confirmations")),
    )
    op.create_index("ix_confirmations_email_purpose", "confirmations", ["email", "purpose"])
    op.create_table(
        "observers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("game_id", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["game_id"], ["games.id"], name=op.f("fk_observers_game_id_games"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observers")),
        sa.UniqueConstraint("game_id", "email", name=op.f("uq_observers_game_id_email")),
    )
    op.create_table(
        "server_keys",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("key_hash", sa.String(80), nullable=False),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_server_keys")),
    )


def downgrade() -> None:
    op.drop_table("server_keys")
    op.drop_table("observers")
    op.drop_index("ix_confirmations_email_purpose", table_name="confirmations")
    op.drop_table("confirmations")
    op.drop_index("ix_signups_game_state", table_name="signups")
    op.drop_table("signups")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_column("via")
    with op.batch_alter_table("players", schema=None) as batch_op:
        batch_op.drop_column("absences")
        batch_op.drop_column("absent_until")
        batch_op.drop_column("resigned_at")
        batch_op.drop_column("managed_by")
    with op.batch_alter_table("games", schema=None) as batch_op:
        batch_op.drop_column("start_noted_at")
        batch_op.drop_column("extended_s")
