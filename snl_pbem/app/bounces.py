"""Bounces of our own mail: recorded on the message, and the referee told once.

A welcome mail that bounces means a player has no order key and will be
moved by the referee round after round (R17) without knowing why; a report
that bounces means a player no longer learns their position. The intake
stores every bounce as automated mail (never answered, never obeyed); this
module then reads it (``snl_pbem.mail.dsn``), finds the outbox message it
returns by its Message-ID — only one we wrote and stored, so a forged bounce
naming any other message changes nothing — marks it ``bounced`` and queues
one alert for the referee. Nothing of the bounce reaches a player, and the
bounce itself is never answered.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from email.header import decode_header, make_header
from email.parser import BytesHeaderParser

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import audit
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.config import Config
from snl_pbem.mail.dsn import DeliveryReport, status_code
from snl_pbem.store import Game, InboundMessage, OutboxMessage, Player
from snl_pbem.store.states import MailKind, OutboxStatus

log = logging.getLogger("snl_pbem.bounces")

OUR_MESSAGE_ID = re.compile(r"<snl\.[0-9a-f]{32}@[^<>\s@]+>", re.IGNORECASE)
"""The shape of snl_pbem.mail.compose.new_message_id; anything else is not ours."""
WHAT: dict[str, str] = {
    MailKind.WELCOME: "the welcome mail with their order key",
    MailKind.REPORT: "a round report",
    MailKind.GAME_OVER: "the game-over mail",
    MailKind.REMINDER: "a deadline reminder",
    MailKind.DEADLINE: "the notice of a moved deadline",
    MailKind.ACK: "a reply to their orders",
    MailKind.NOTICE: "a reply to their mail",
    MailKind.HELP: "the HELP reply",
    MailKind.STATUS: "the STATUS reply",
}
"""What each kind of outbox message is, in the alert's words."""


def record_bounce(
    session: Session,
    config: Config,
    inbound: InboundMessage,
    report: DeliveryReport | None,
    now: datetime,
) -> str | None:
    """Tie a bounce to the outbox message it returns; None when it returns none of ours.

    Returns the detail for the inbound row (``bounce of outbox 12: ...``). The outbox row
    becomes ``bounced`` (a ``failed`` one stays failed: the referee was told when the
    relay refused it) and the referee gets one alert, unless the bounced mail was the
    referee's own (an alert about it would go to the same address, and could bounce too).
    """
    if report is None:  # read in the parsing sandbox (mail.parse: ParsedMail.delivery_report)
        return None
    row = _returned_message(session, report)
    if row is None:
        return None
    if not report.is_failure:
        return f"delay notice for outbox {row.id} ({row.kind} to {row.recipient}): nothing to do"
    why = report.why or "no reason given"
    detail = f"bounce of outbox {row.id}: {row.kind} to {row.recipient} ({why})"[:900]
    if row.status == OutboxStatus.BOUNCED:
        return f"{detail}; already recorded"
    game = session.get(Game, row.game_id) if row.game_id is not None else None
    inbound.game_id = inbound.game_id or row.game_id
    if row.status != OutboxStatus.FAILED:
        row.status = OutboxStatus.BOUNCED
    row.last_error = f"bounced: {why}"[:2000]
    audit(
        session,
        now,
        "intake",
        "mail-bounced",
        game,
        outbox=row.id,
        inbound=inbound.id,
        kind=row.kind,
        recipient=row.recipient,
        reason=why[:500],
    )
    log.warning("outbox %d (%s to %s) bounced: %s", row.id, row.kind, row.recipient, why)
    referee = config.settings.mail.referee
    if row.recipient.lower() == referee.lower():
        return f"{detail}; mail to the referee: no alert"
    player = _player(session, row)
    named = [r.address for r in report.failed if r.address]
    enqueue_mail(
        session,
        config,
        game=game,
        kind=MailKind.BOUNCE_ALERT,
        to=referee,
        now=now,
        template="referee/bounce.txt.j2",
        kind_of=row.kind,
        what=WHAT.get(row.kind, f"a message ({row.kind})"),
        player=player,
        recipient=row.recipient,
        named=", ".join(a for a in named if a != row.recipient.lower())[:300],
        why=why,
        cause=_cause(report),
        subject_of=_subject(row.message),
        message_id=row.message_id,
        written=row.created_at,
        outbox_id=row.id,
        inbound_id=inbound.id,
    )
    return f"{detail}; referee alerted"


def _returned_message(session: Session, report: DeliveryReport) -> OutboxMessage | None:
    """The outbox message the bounce returns: the first of its Message-IDs that we wrote."""
    ours = [i for i in report.message_ids if OUR_MESSAGE_ID.fullmatch(i)]
    if not ours:
        return None
    rows = {
        row.message_id: row
        for row in session.scalars(select(OutboxMessage).where(OutboxMessage.message_id.in_(ours)))
    }
    return next((rows[i] for i in ours if i in rows), None)


def _cause(report: DeliveryReport) -> str:
    """What the referee should look at (RFC 3463): the mailbox (X.2.X: full, disabled),
    the receiving server's policy (X.7.X: often about our SPF/DKIM), else the address."""
    first = report.failed[0] if report.failed else None
    codes = [first.status, status_code(first.diagnostic or "")] if first else []
    # the most specific code: Exim's Status is a bare 5.0.0 beside a 550 5.2.1 reply
    subject = next((c.split(".")[1] for c in codes if c and c.split(".")[1] != "0"), "")
    return {"2": "mailbox", "7": "policy"}.get(subject, "address")


def _player(session: Session, row: OutboxMessage) -> Player | None:
    if row.game_id is None:
        return None
    return session.scalars(
        select(Player)
        .where(Player.game_id == row.game_id, func.lower(Player.email) == row.recipient.lower())
        .limit(1)
    ).first()


def _subject(message: bytes) -> str:
    """The Subject we gave the message (our own header: safe to show the referee)."""
    head = BytesHeaderParser().parsebytes(message.split(b"\r\n\r\n", 1)[0][:20_000])
    value = head.get("Subject")
    if value is None:
        return ""
    try:
        return " ".join(str(make_header(decode_header(str(value)))).split())[:200]
    except Exception:  # our own header: should never happen, and must not stop the intake
        return " ".join(str(value).split())[:200]
