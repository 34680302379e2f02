"""plan_changes: what may move a game's jobs, written by triggers, so that the scheduler
re-plans the games that changed instead of every game; the audit log indexed by game and
action (read for every mail a close sends: a scan per mail made a close cost grow with the
games)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# What may move a game's jobs: a round opened or removed; its state, deadline, hold or
# reminder; the game's state or its reminder lead. Not the orders (they change nothing
# the scheduler plans), so intake adds no rows.
ROUND_COLUMNS = "state, deadline, held_at, reminded_at"
GAME_COLUMNS = "state, remind_before_s"
TRIGGERS = [
    ("plan_change_round_insert", "INSERT", "rounds"),
    ("plan_change_round_update", f"UPDATE OF {ROUND_COLUMNS}", "rounds"),
    ("plan_change_round_delete", "DELETE", "rounds"),
    ("plan_change_game_update", f"UPDATE OF {GAME_COLUMNS}", "games"),
]

POSTGRESQL_FUNCTION = """
CREATE FUNCTION plan_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'games' THEN
    INSERT INTO plan_changes (game_id, tx) VALUES (NEW.id, txid_current());
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO plan_changes (game_id, tx) VALUES (OLD.game_id, txid_current());
  ELSE
    INSERT INTO plan_changes (game_id, tx) VALUES (NEW.game_id, txid_current());
  END IF;
  RETURN NULL;
END
$$
"""


def _sqlite_trigger(name: str, event: str, table: str) -> str:
    row = "OLD" if event == "DELETE" else "NEW"
    game = f"{row}.id" if table == "games" else f"{row}.game_id"
    return (
        f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW "
        f"BEGIN INSERT INTO plan_changes (game_id) VALUES ({game}); END"
    )


def upgrade() -> None:
    op.create_table(
        "plan_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("game_id", sa.Integer(), nullable=False),
        sa.Column("tx", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plan_changes")),
    )
    op.create_index("ix_plan_changes_tx", "plan_changes", ["tx"])
    op.create_index("ix_audit_log_game_id_action", "audit_log", ["game_id", "action"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRESQL_FUNCTION)
        for name, event, table in TRIGGERS:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION plan_change()"
            )
    else:
        for name, event, table in TRIGGERS:
            op.execute(_sqlite_trigger(name, event, table))


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name, _, table in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table}" if postgresql else f"DROP TRIGGER {name}")
    if postgresql:
        op.execute("DROP FUNCTION plan_change()")
    op.drop_index("ix_audit_log_game_id_action", table_name="audit_log")
    op.drop_index("ix_plan_changes_tx", table_name="plan_changes")
    op.drop_table("plan_changes")
