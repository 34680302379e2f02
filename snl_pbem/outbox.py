"""Putting mail in the outbox, in the same transaction as the change it reports.

The sender that drains the outbox (retries, backoff, SMTP) is separate; here a
message is rendered from its template, given its Message-ID and stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from snl_pbem.config import Config
from snl_pbem.mail.compose import compose, new_message_id
from snl_pbem.mail.render import render
from snl_pbem.store import Game, OutboxMessage

SENDER_NAME = "Snakes and Ladders referee"


def enqueue_mail(
    session: Session,
    config: Config,
    *,
    game: Game | None,
    kind: str,
    to: str,
    now: datetime,
    template: str,
    secret: bool = False,
    auto_submitted: str = "auto-generated",
    in_reply_to: str | None = None,
    references: tuple[str, ...] = (),
    attachments: tuple[tuple[str, str, bytes], ...] = (),
    **context: Any,
) -> OutboxMessage:
    """Render ``template`` and store the message for sending; returns the outbox row."""
    address = config.settings.mail.address
    subject, body = render(template, game=game, **context)
    message_id = new_message_id(address.rpartition("@")[2])
    raw = compose(
        sender=address,
        sender_name=SENDER_NAME,
        to=to,
        subject=subject,
        body=body,
        now=now,
        message_id=message_id,
        game_key=game.key if game else None,
        auto_submitted=auto_submitted,
        in_reply_to=in_reply_to,
        references=references,
        attachments=attachments,
    )
    row = OutboxMessage(
        game_id=game.id if game else None,
        kind=kind,
        recipient=to,
        message_id=message_id,
        message=raw,
        status="pending",
        attempts=0,
        next_attempt_at=now,
        created_at=now,
        secret=secret,
    )
    session.add(row)
    return row
