"""Step two, dedupe: a message whose Message-ID was already processed (a resend, a copy
through a second route) is not applied again."""

from __future__ import annotations

from sqlalchemy import select

from snl_pbem.app.intake.context import Message, Outcome
from snl_pbem.store import InboundMessage
from snl_pbem.store.states import InboundStatus


def already_processed(msg: Message) -> Outcome | None:
    """A duplicate outcome when another stored message with this Message-ID was processed."""
    ctx = msg.ctx
    if not ctx.mail.message_id:
        return None
    earlier = ctx.session.scalar(
        select(InboundMessage.id).where(
            InboundMessage.message_id == ctx.mail.message_id,
            InboundMessage.id != ctx.row.id,
            InboundMessage.status.in_((InboundStatus.PROCESSED, InboundStatus.REJECTED)),
        )
    )
    if earlier is None:
        return None
    seen = f"Message-ID already seen in inbound {earlier}"
    return Outcome(InboundStatus.DUPLICATE, seen, ctx.mail.quoted_keys)
