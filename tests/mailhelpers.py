"""Helpers for intake tests: a game g1 whose players ann, bob and cy have known keys,
and reading back what the intake did."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from snl_pbem.app.intake import process_batch
from snl_pbem.app.intake.store import store_many
from snl_pbem.config import Config, load_config
from snl_pbem.mail.parse import code_given, order_key_given
from snl_pbem.store import Database, OrderRecord, OutboxMessage, Player

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)
OPENED = datetime.now(UTC) - timedelta(hours=1)
"""When the fixtures' round 1 opens: before real mail arrives (IMAP INTERNALDATE is real
time) and before T0, the test clock."""
CORPUS = Path(__file__).parent / "data" / "mail"

CONFIG = """
timezone = "Europe/London"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
replies_per_hour = {replies}
[[games]]
id = "g1"
title = "Test game"
board = {board}
reveal_after_game = {reveal}
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-123" }},
]
"""


BOARD = '{ snakes = { "47" = 26 }, ladders = { "4" = 14 } }'


def game_config(
    path: Path, url: str, replies: int = 20, board: str = BOARD, reveal: bool = False
) -> Config:
    path.write_text(
        CONFIG.format(url=url, replies=replies, board=board, reveal=str(reveal).lower())
    )
    return load_config(path)


@dataclass
class Order:
    player: str
    dice: str
    nomination: int | None
    valid: bool


def orders_of(db: Database) -> list[Order]:
    with db.transaction() as s:
        rows = s.execute(
            select(Player.name, OrderRecord.dice, OrderRecord.nomination, OrderRecord.valid)
            .join(Player, Player.id == OrderRecord.player_id)
            .order_by(OrderRecord.id)
        ).all()
    return [Order(*row) for row in rows]


def replies_since(db: Database, since: datetime) -> list[OutboxMessage]:
    with db.transaction() as s:
        return list(
            s.scalars(
                select(OutboxMessage)
                .where(OutboxMessage.kind != "welcome")
                .order_by(OutboxMessage.id)
            )
        )


def server_mail_config(dovecot, user: str, sink, replies: int = 20) -> str:
    """The [mail] sections of a server reading a Dovecot mailbox and sending to an SMTP sink."""
    return f"""[mail]
address = "snl@example.org"
referee = "ref@example.org"
replies_per_hour = {replies}
[mail.imap]
host = "{dovecot.host}"
port = {dovecot.port}
tls = "none"
username = "{user}"
password = "secret"
poll_interval = "1s"
[mail.smtp]
host = "{sink.host}"
port = {sink.port}
tls = "none"
"""


def key_in(text: str) -> str:
    """The order key a welcome, seat or new-key mail gives ("Your order key is ..."; no mail
    of ours holds a KEY line with it)."""
    key = order_key_given(text)
    assert key is not None, f"no order key in:\n{text}"
    return key


def code_in(text: str) -> str:
    """The code a code mail gives ("Your confirmation code is abcd-efgh"; its example line
    says CONFIRM (your code))."""
    code = code_given(text)
    assert code is not None, f"no confirmation code in:\n{text}"
    return code


def mail_to(db: Database, who: str, kind: str) -> list[str]:
    """The messages of one kind to one address, oldest first, as text (quoted-printable
    soft line breaks joined, so a phrase can be looked for whole)."""
    with db.transaction() as s:
        rows = s.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.recipient == who, OutboxMessage.kind == kind)
            .order_by(OutboxMessage.id)
        ).all()
        return [re.sub(r"=\r?\n", "", row.message.decode()) for row in rows]


def one_batch(db: Database, config: Config, *raws: bytes) -> list[str]:
    """Store these in one transaction, then process them as one batch: their statuses."""
    stored = store_many(db, config, [(raw, T0, "t", None, None, None) for raw in raws])
    ids = [result.inbound_id for result, _ in stored]
    assert all(i is not None for i in ids)
    results = process_batch(db, config, ids)  # type: ignore[arg-type]
    return [getattr(results[i], "status", repr(results[i])) for i in ids]  # type: ignore[index]
