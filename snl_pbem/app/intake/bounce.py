"""Step three, bounce: automated mail (a bounce, an out-of-office, a list's robot) is
never answered; a delivery report about our own mail is recorded for the referee."""

from __future__ import annotations

from snl_pbem.app.bounces import record_bounce
from snl_pbem.app.intake.context import Message, Outcome
from snl_pbem.store.states import InboundStatus


def automated(msg: Message) -> Outcome | None:
    """An ignored outcome for a robot's mail (keys quoted in it, as a bounced welcome
    returns its key, are redacted like a player's own)."""
    ctx = msg.ctx
    mail, row = ctx.mail, ctx.row
    if not mail.automated:
        return None
    bounce = record_bounce(ctx.session, ctx.config, row, mail.delivery_report, row.received_at)
    if bounce is not None:
        return Outcome(InboundStatus.IGNORED, bounce, mail.quoted_keys)
    robot = f"automated mail, not answered: {mail.automated}"
    return Outcome(InboundStatus.IGNORED, robot, mail.quoted_keys)
