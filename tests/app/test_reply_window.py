"""A reply's rate limit in a batch (issue 23): the batch reads its senders' recent mail
once, and each message still counts against the hour before it was received. A batch's
messages may be received out of order (a close's messages go smallest first; IMAP gives
each its mailbox's arrival time, LMTP the MTA's) or hours apart (a backlog after an
outage): counts read for the first message's hour let a player past the limit, or held
replies due. (Found by a hostile review of the batch's counts.)"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from mailhelpers import T0
from sqlalchemy import insert, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import process_batch
from snl_pbem.app.intake.store import store_many
from snl_pbem.config import Config, load_config
from snl_pbem.store import Database, OutboxMessage

CONFIG = """
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
replies_per_hour = 2
[[games]]
id = "g1"
board = {{ snakes = {{ "47" = 26 }}, ladders = {{ "4" = 14 }} }}
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""


@pytest.fixture
def game(db: Database, tmp_path: Path) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url))
    config = load_config(path)
    sync_games(db, config, T0 - timedelta(hours=3))
    start_game(db, config, "g1", T0 - timedelta(hours=3))
    return config


def status(sender: str, tag: str) -> bytes:
    name = sender.split("@")[0]
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: [g1] status\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\nKEY {name}-key-123\r\nSTATUS\r\n"
    ).encode()


def answered(db: Database, to: str) -> int:
    """STATUS answers to ``to`` written by the test's batches."""
    with db.transaction() as s:
        return len(
            s.scalars(
                select(OutboxMessage.id).where(
                    OutboxMessage.recipient == to,
                    OutboxMessage.kind == "status",
                    OutboxMessage.created_at >= T0 - timedelta(minutes=1),
                )
            ).all()
        )


def test_a_message_received_earlier_in_a_batch_counts_its_own_hour(
    db: Database, game: Config
) -> None:
    """ann had two answers 55 minutes before her STATUS: she is at her limit (2). The
    batch's first message is bob's, received ten minutes after hers: the hour before his
    misses her two answers, and must not be what hers is counted against."""
    at = T0 - timedelta(minutes=55)
    with db.transaction() as s:
        s.execute(
            insert(OutboxMessage),
            [
                {
                    "kind": "status",
                    "recipient": "ann@example.org",
                    "message_id": f"<earlier-{i}@example.org>",
                    "message": b"x",
                    "status": "sent",
                    "attempts": 1,
                    "next_attempt_at": at,
                    "created_at": at,
                    "secret": False,
                }
                for i in range(2)
            ],
        )
    messages = [
        (status("bob@example.org", "b1"), T0 + timedelta(minutes=10)),
        (status("ann@example.org", "a1"), T0),
    ]
    stored = store_many(db, game, [(raw, at, "t", None, None, None) for raw, at in messages])
    process_batch(db, game, [result.inbound_id for result, _ in stored])  # type: ignore[misc]
    assert answered(db, "bob@example.org") == 1
    assert answered(db, "ann@example.org") == 0  # held: her limit, in the hour before hers


def test_a_backlog_of_hours_in_one_batch_is_answered_hour_by_hour(
    db: Database, game: Config
) -> None:
    """Four STATUS of ann's over three hours, written in one batch (a backlog after an
    outage): two in each hour, so all four are answered, as they are one by one."""
    minutes = (0, 1, 150, 151)
    messages = [
        (status("ann@example.org", f"s{i}"), T0 + timedelta(minutes=m))
        for i, m in enumerate(minutes)
    ]
    stored = store_many(db, game, [(raw, at, "t", None, None, None) for raw, at in messages])
    process_batch(db, game, [result.inbound_id for result, _ in stored])  # type: ignore[misc]
    assert answered(db, "ann@example.org") == 4
