"""The stored mail the referee looks at and acts on: incoming messages set aside (or all),
outgoing messages by state, and failed mail sent again (``snl-pbem inbound`` and
``outbox``). Each retry is audit-logged, with how the referee gave it (``via``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import audit, game_by_name
from snl_pbem.errors import NotFound
from snl_pbem.store import Database, Game, InboundMessage, OutboxMessage, Player
from snl_pbem.store.states import InboundStatus, OutboxStatus


@dataclass(frozen=True)
class MailRetry:
    """One failed outbox message the referee asked to send again."""

    id: int
    kind: str
    recipient: str
    refused: str | None = None
    """Why it was left failed, or None when it is back in the queue."""


def retry_mail(
    db: Database,
    now: datetime,
    *,
    referee: str,
    outbox_id: int | None = None,
    game_name: str | None = None,
    actor: str = "referee",
    via: str | None = None,
) -> list[MailRetry]:
    """Failed mail back to pending: attempts 0, due now, and a fresh ``give_up_after``
    (counted from ``created_at``, which becomes now; the original time is in the audit
    log). The running server's sender sends it within 15 seconds.

    One message (``outbox_id``; NotFound if there is none, or it is not failed) or every
    failed one (of ``game_name``). A message written to a player's address that is no longer
    theirs (the config was corrected since) stays failed: it may hold an order key, and
    the old address may be a stranger's.
    """
    with db.transaction() as session:
        query = select(OutboxMessage).where(OutboxMessage.status == OutboxStatus.FAILED)
        if outbox_id is not None:
            row = session.get(OutboxMessage, outbox_id, with_for_update=True)
            if row is None or row.status != OutboxStatus.FAILED:
                state = "no such message" if row is None else f"it is {row.status}, not failed"
                raise NotFound(f"outbox {outbox_id}: {state}")
            rows = [row]
        else:
            if game_name is not None:
                query = query.where(OutboxMessage.game_id == game_by_name(session, game_name).id)
            rows = list(session.scalars(query.order_by(OutboxMessage.id).with_for_update()))
        done = []
        for row in rows:
            refused = _stale_address(session, row, referee)
            done.append(MailRetry(row.id, row.kind, row.recipient, refused))
            if refused is not None:
                continue
            game = session.get(Game, row.game_id) if row.game_id is not None else None
            audit(
                session,
                now,
                actor,
                "mail-retry",
                game,
                via=via,
                outbox=row.id,
                kind=row.kind,
                recipient=row.recipient,
                attempts=row.attempts,
                created=row.created_at.isoformat(),
                last_error=(row.last_error or "")[:500],
            )
            row.status, row.attempts, row.last_error = OutboxStatus.PENDING, 0, None
            row.next_attempt_at = row.created_at = now
            row.claimed_by = row.claim_until = None
        return done


def _stale_address(session: Session, row: OutboxMessage, referee: str) -> str | None:
    """Why ``row`` must not go to its recipient any more, or None."""
    if row.game_id is None or row.recipient.lower() == referee.lower():
        return None
    players = session.scalars(select(Player).where(Player.game_id == row.game_id)).all()
    owner = next((p for p in players if p.email.lower() == row.recipient.lower()), None)
    if owner is not None and owner.active:
        return None
    if owner is not None:
        return f"{owner.name} is no longer in the game (not in the config)"
    return (
        f"{row.recipient} is no longer a player's address (the config was changed since): "
        "it is not sent there"
    )


def inbound_messages(db: Database, *, everything: bool, limit: int = 50) -> list[InboundMessage]:
    """The newest incoming messages set aside (or, ``everything``, all), oldest first."""
    query = select(InboundMessage).order_by(InboundMessage.id.desc()).limit(limit)
    if not everything:
        query = query.where(InboundMessage.status == InboundStatus.SET_ASIDE)
    with db.transaction() as session:
        return list(reversed(session.scalars(query).all()))


def inbound_message(db: Database, inbound_id: int) -> InboundMessage:
    """One incoming message as stored; NotFound when there is none."""
    with db.transaction() as session:
        row = session.get(InboundMessage, inbound_id)
        if row is None:
            raise NotFound(f"inbound {inbound_id}: no such message")
        return row


def outbox_message(db: Database, outbox_id: int) -> tuple[OutboxMessage, str | None]:
    """One outgoing message as stored, and its game's id; NotFound when there is none."""
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        if row is None:
            raise NotFound(f"outbox {outbox_id}: no such message")
        game = session.get(Game, row.game_id) if row.game_id is not None else None
        return row, game.name if game else None


def outbox_messages(
    db: Database, state: str, game_name: str | None, limit: int
) -> tuple[list[tuple[OutboxMessage, str | None]], int]:
    """The newest outgoing messages in ``state`` ("all" for any), of one game or all,
    oldest first, with their games' ids; and how many there are in all."""
    with db.transaction() as session:
        conditions = [] if state == "all" else [OutboxMessage.status == state]
        if game_name is not None:
            conditions.append(OutboxMessage.game_id == game_by_name(session, game_name).id)
        rows = session.execute(
            select(OutboxMessage, Game.name)
            .outerjoin(Game, Game.id == OutboxMessage.game_id)
            .where(*conditions)
            .order_by(OutboxMessage.id.desc())
            .limit(limit)
        ).all()
        total = session.scalar(select(func.count()).select_from(OutboxMessage).where(*conditions))
        return [(row, game_name) for row, game_name in reversed(rows)], total or 0
