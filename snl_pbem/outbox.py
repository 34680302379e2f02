"""The outbox: mail is written in the same transaction as the change it reports,
and sent by ``drain_outbox``.

A message is rendered from its template, given its Message-ID and stored;
the sender marks it sent only after the server's 250, retries temporary
failures with exponential backoff until a give-up time, and records
permanent ones for the referee (who is mailed about each).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session, aliased

from snl_pbem.config import Config
from snl_pbem.mail.compose import compose, new_message_id
from snl_pbem.mail.render import render
from snl_pbem.mail.smtp import SendError, SmtpSender
from snl_pbem.store import Database, Game, OutboxMessage

log = logging.getLogger("snl_pbem.outbox")

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


# -- sending ------------------------------------------------------------------------------

SCRUBBED = (
    b"\r\n[The body of this message held an order key and was removed once the "
    b"message had been sent.]\r\n"
)
CLAIM = timedelta(minutes=10)
FIRST_RETRY = timedelta(minutes=1)
LONGEST_RETRY = timedelta(hours=6)


@dataclass
class DrainReport:
    sent: int = 0
    deferred: int = 0
    failed: int = 0

    @property
    def handled(self) -> int:
        return self.sent + self.deferred + self.failed


def claim_due(db: Database, now: datetime, worker: str, limit: int) -> list[int]:
    """Claim due messages, at most one per recipient: the oldest waiting for each.

    Only a recipient's oldest waiting message is ever taken, so mail reaches
    every player in the order it was written, and no two senders (threads or
    processes) work on the same recipient at once. PostgreSQL skips rows
    another process has locked; a claim expires if its sender dies.
    """
    older = aliased(OutboxMessage)
    query = (
        select(OutboxMessage.id)
        .where(
            OutboxMessage.status == "pending",
            OutboxMessage.next_attempt_at <= now,
            or_(OutboxMessage.claim_until.is_(None), OutboxMessage.claim_until < now),
            ~exists().where(
                older.recipient == OutboxMessage.recipient,
                older.status == "pending",
                older.id < OutboxMessage.id,
            ),
        )
        .order_by(OutboxMessage.id)
        .limit(limit)
    )
    with db.transaction() as session:
        if not db.is_sqlite:
            query = query.with_for_update(skip_locked=True, of=OutboxMessage)
        ids = list(session.scalars(query))
        if ids:
            session.execute(
                update(OutboxMessage)
                .where(OutboxMessage.id.in_(ids))
                .values(claimed_by=worker, claim_until=now + CLAIM)
                .execution_options(synchronize_session=False)
            )
    return ids


def drain_outbox(
    db: Database,
    config: Config,
    sender: SmtpSender,
    clock: Callable[[], datetime],
    *,
    worker: str,
    batch: int = 200,
    give_up_after: timedelta = timedelta(days=3),
) -> DrainReport:
    """Send everything due, batch by batch, until nothing is left to claim now."""
    report = DrainReport()
    while True:
        ids = claim_due(db, clock(), worker, batch)
        if not ids:
            return report
        for message_id in ids:
            _send_one(db, config, sender, clock, message_id, worker, give_up_after, report)


def _send_one(
    db: Database,
    config: Config,
    sender: SmtpSender,
    clock: Callable[[], datetime],
    row_id: int,
    worker: str,
    give_up_after: timedelta,
    report: DrainReport,
) -> None:
    with db.transaction() as session:
        row = session.get(OutboxMessage, row_id)
        if row is None or row.status != "pending" or row.claimed_by != worker:
            return
        recipient, raw = row.recipient, row.message
    error: SendError | None = None
    try:
        sender.send(recipient, raw)
    except SendError as exc:
        error = exc
    now = clock()
    with db.transaction() as session:
        row = session.get(OutboxMessage, row_id)
        assert row is not None
        row.attempts += 1
        row.claimed_by = row.claim_until = None
        if error is None:  # marked sent only after the server's 250
            row.status, row.sent_at, row.last_error = "sent", now, None
            if row.secret:
                row.message = raw.split(b"\r\n\r\n", 1)[0] + b"\r\n" + SCRUBBED
            report.sent += 1
            return
        row.last_error = str(error)[:2000]
        if error.permanent or now - row.created_at >= give_up_after:
            row.status = "failed"
            report.failed += 1
            log.error("mail %s to %s failed for good: %s", row.message_id, recipient, error)
            if row.kind != "delivery-failure":
                game = session.get(Game, row.game_id) if row.game_id else None
                enqueue_mail(
                    session,
                    config,
                    game=game,
                    kind="delivery-failure",
                    to=config.settings.mail.referee,
                    now=now,
                    template="referee/delivery_failure.txt.j2",
                    recipient=recipient,
                    what=row.kind,
                    error=str(error),
                    attempts=row.attempts,
                    message_id=row.message_id,
                )
            return
        delay = min(FIRST_RETRY * 2 ** (row.attempts - 1), LONGEST_RETRY)
        row.next_attempt_at = now + delay
        report.deferred += 1
        log.warning("mail %s to %s deferred %s: %s", row.message_id, recipient, delay, error)
