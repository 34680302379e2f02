"""Step two, dedupe: a message whose Message-ID was already processed (a resend, a copy
through a second route) is not applied again."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from snl_pbem.app.intake.context import Message, Outcome
from snl_pbem.store import InboundMessage
from snl_pbem.store.states import InboundStatus


def already_processed(msg: Message) -> Outcome | None:
    """A duplicate outcome when another stored message with this Message-ID was processed."""
    ctx = msg.ctx
    message_id = ctx.mail.message_id
    if not message_id:
        return None
    seen: dict[str, int] | None = ctx.session.info.get(SEEN)
    if seen is not None:  # a batch: its Message-IDs were looked up at once (``look_up``)
        earlier = seen.get(message_id)
    else:
        with ctx.session.no_autoflush:  # only this message's row is pending: it is new
            earlier = ctx.session.scalar(
                select(InboundMessage.id).where(
                    InboundMessage.message_id == message_id,
                    InboundMessage.id != ctx.row.id,
                    InboundMessage.status.in_(DONE),
                )
            )
    if earlier is None:
        return None
    seen_in = f"Message-ID already seen in inbound {earlier}"
    return Outcome(InboundStatus.DUPLICATE, seen_in, ctx.mail.quoted_keys)


SEEN = "snl_pbem.intake.seen"
DONE = (InboundStatus.PROCESSED, InboundStatus.REJECTED)


def look_up(session: Session, message_ids: Iterable[str | None]) -> None:
    """A batch's Message-IDs, looked up at once: which were processed already (the batch
    adds each it processes, ``processed``). Read in the batch's transaction, with its
    rows locked, as each message's own look-up was."""
    wanted = sorted({m for m in message_ids if m})
    seen: dict[str, int] = {}
    for start in range(0, len(wanted), 500):
        for inbound_id, message_id in session.execute(
            select(InboundMessage.id, InboundMessage.message_id)
            .where(
                InboundMessage.message_id.in_(wanted[start : start + 500]),
                InboundMessage.status.in_(DONE),
            )
            .order_by(InboundMessage.id.desc())
        ):
            if message_id is not None:
                seen[message_id] = inbound_id
    session.info[SEEN] = seen


def processed(session: Session, message_id: str | None, inbound_id: int, status: str) -> None:
    """A batch's message is done: a later one of the batch with its Message-ID is a copy."""
    seen: dict[str, int] | None = session.info.get(SEEN)
    if seen is not None and message_id and status in DONE:
        seen.setdefault(message_id, inbound_id)
