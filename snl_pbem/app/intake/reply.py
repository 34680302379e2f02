"""Step six, reply: the final answer to a message that asked for nothing the steps before
answered (the no-orders notice), and, once it is processed, the copy of it that is kept:
redacted of every key, trimmed past its sender's daily cap."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.intake.context import Message, Outcome
from snl_pbem.app.lookup import ruleset_of
from snl_pbem.app.replies import redacted, reply
from snl_pbem.config import Config
from snl_pbem.mail.commands import Commands
from snl_pbem.mail.parse import ParsedMail, redact_in_bytes
from snl_pbem.rules.words import tr
from snl_pbem.store import InboundMessage
from snl_pbem.store.states import InboundStatus, MailKind

log = logging.getLogger("snl_pbem.intake")

TRIMMED_BYTES = 64 * 1024
"""What is kept of a message from a sender over their daily cap (any order fits in it)."""


def final(msg: Message) -> Outcome:
    """What was done, or, when nothing was, the notice that the message had no orders."""
    if msg.done:
        return Outcome(InboundStatus.PROCESSED, "")
    ctx, game, player = msg.ctx, msg.game, msg.player
    assert game is not None and player is not None
    commands = ctx.commands
    reply(
        ctx,
        game,
        player,
        MailKind.NOTICE,
        "player/notice.txt.j2",
        message=no_orders(ruleset_of(game).no_orders, commands),
        line_problems=redacted(commands.problems, commands.order_keys),
        other_sender=msg.other,
    )
    return Outcome(InboundStatus.PROCESSED, "no orders in it")


def no_orders(why: str, commands: Commands) -> str:
    """The notice of a message without orders (``why``: the ruleset's ``no_orders``)."""
    return noting_cut(tr("Your message had no orders {why}", why=why), commands)


def noting_cut(message: str, commands: Commands) -> str:
    """A notice's ``message``, and after it why lines were not read, if some were not
    (without echoing them: the message may be forged)."""
    if commands.cut is None:
        return message
    return tr(
        '{message} (Reading stopped at a line that starts quoted text, such as "On ... '
        'wrote:"; nothing below it was read. Write your orders above it, or below the '
        "quoted lines marked with >.)",
        message=message,
    )


def kept_after_reading(
    session: Session,
    config: Config,
    row: InboundMessage,
    raw: bytes,
    mail: ParsedMail,
    secrets: tuple[str, ...],
) -> None:
    """What is kept of a message once it has been read: the copy the sandbox made while
    reading it, in which every key it shows, in any form, is replaced by **** (order keys
    are kept only as hashes) and the bodies of parts nobody reads (attachments, forwarded
    messages) are replaced by a note of their size. Past its sender's daily cap it is cut
    to its first 64 KiB (under an X-SNL-PBEM-Trimmed line). The digest of the original
    bytes stays, so the same message arriving again is still recognised."""
    if mail.redacted is not None:  # and the keys it gave once more, as written (cheap)
        kept = redact_in_bytes(mail.redacted, secrets)
    elif secrets:  # the reading pass left it (a slow message): the keys go from the bytes
        kept = redact_in_bytes(raw, secrets)
    else:
        kept = raw
    if len(kept) > TRIMMED_BYTES:
        try:  # never costs the message its processing: a savepoint of its own
            with session.begin_nested():
                over = _over_daily_cap(session, config, row)
        except Exception as exc:
            log.error("inbound %d: its sender's daily cap was not read: %s", row.id, exc)
            over = False
        if over:
            mark = f"X-SNL-PBEM-Trimmed: over the sender's daily cap; {len(raw)} bytes\r\n"
            kept = mark.encode() + kept[:TRIMMED_BYTES]
            log.warning("inbound %d: %s over its daily cap: kept trimmed", row.id, row.sender)
    if kept != raw:  # written with the message's status, in one statement
        row.raw = kept


def _over_daily_cap(session: Session, config: Config, row: InboundMessage) -> bool:
    """True when the sender's mail of the last day, this message included, is past
    ``max_stored_per_sender`` or ``max_stored_bytes_per_sender``."""
    if row.sender is None:
        return False
    count, size = session.execute(
        select(func.count(), func.coalesce(func.sum(func.length(InboundMessage.raw)), 0)).where(
            InboundMessage.sender == row.sender,
            InboundMessage.received_at > row.received_at - timedelta(days=1),
            InboundMessage.id <= row.id,
        )
    ).one()
    mail_settings = config.settings.mail
    return bool(
        count > mail_settings.max_stored_per_sender
        or size > mail_settings.max_stored_bytes_per_sender
    )
