"""Migration 0006: inbound mail set aside for the referee is stored as "set-aside", no longer
as "failed", the outbox's word for mail it gave up on. Run on both databases (``db_url``)."""

from __future__ import annotations

from sqlalchemy import text

from snl_pbem.app.stored_mail import inbound_messages
from snl_pbem.store import Database
from snl_pbem.store.migrate import downgrade, upgrade
from snl_pbem.store.states import InboundStatus, OutboxStatus

WHEN = "2026-01-01 00:00:00"


def _statuses(database: Database) -> tuple[dict[int, str], dict[int, str]]:
    with database.engine.connect() as con:
        inbound = {i: s for i, s in con.execute(text("SELECT id, status FROM inbound_messages"))}
        outbox = {i: s for i, s in con.execute(text("SELECT id, status FROM outbox"))}
    return inbound, outbox


def test_0006_renames_set_aside_inbound_mail_both_ways_and_leaves_the_outbox(db_url: str) -> None:
    database = Database(db_url)
    try:
        upgrade(database, "0005")
        with database.engine.begin() as con:
            for row_id, status in ((1, "failed"), (2, "processed"), (3, "new")):
                con.execute(
                    text(
                        "INSERT INTO inbound_messages (id, sha256, source, received_at, raw, "
                        "status, error, attempts) VALUES (:id, :sha, 'test', :when, :raw, "
                        ":status, NULL, 0)"
                    ),
                    {
                        "id": row_id,
                        "sha": f"{row_id:064d}",
                        "when": WHEN,
                        "raw": b"Subject: x\r\n\r\nDICE 4\r\n",
                        "status": status,
                    },
                )
            con.execute(  # the outbox's "failed" is another state: it stays as it is
                text(
                    "INSERT INTO outbox (id, kind, recipient, message_id, message, status, "
                    "attempts, next_attempt_at, created_at, secret) VALUES (1, 'welcome', "
                    "'ann@example.org', '<1@example.org>', :msg, 'failed', 3, :when, :when, "
                    "false)"
                ),
                {"msg": b"Subject: welcome\r\n\r\n", "when": WHEN},
            )

        upgrade(database)
        assert _statuses(database) == ({1: "set-aside", 2: "processed", 3: "new"}, {1: "failed"})
        assert InboundStatus.SET_ASIDE != OutboxStatus.FAILED
        # the referee's 'inbound list' finds the message set aside before the upgrade
        assert [m.id for m in inbound_messages(database, everything=False)] == [1]

        downgrade(database, "0005")
        assert _statuses(database) == ({1: "failed", 2: "processed", 3: "new"}, {1: "failed"})
    finally:
        database.dispose()
