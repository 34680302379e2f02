"""Replies to incoming mail: to whom, how often, in which words.

A reply to an authenticated player goes to their registered address, threaded, within
``replies_per_hour`` (an acknowledgement within its own, larger bound). Mail without a
valid key gets a reply only on the guests' budget: a notice only ever to a registered
player's address (no backscatter to forgeries), HELP and LIST to anyone, a few a day each
and a bound for all of them together. Keys are never echoed.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.games import ruleset_of
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.config import Config, address_problem
from snl_pbem.mail.commands import Commands, LineProblem
from snl_pbem.mail.parse import ParsedMail
from snl_pbem.rules.ruleset import DEFAULT_RULESET
from snl_pbem.store import Game, InboundMessage, OutboxMessage, Player
from snl_pbem.store.states import MailKind

log = logging.getLogger("snl_pbem.intake")

REPLY_KINDS = (
    MailKind.ACK,
    MailKind.NOTICE,
    MailKind.HELP,
    MailKind.STATUS,
    MailKind.MEMBERSHIP,
)
"""Replies to authenticated players: ``replies_per_hour`` each, but an order is always
acknowledged (up to ACKS_PER_HOUR, a bound only a flood with the player's key meets)."""
ACKS_PER_HOUR = 100
GUEST_KINDS = (
    MailKind.GUEST_NOTICE,
    MailKind.GUEST_HELP,
    MailKind.LIST,
    MailKind.CODE,
    MailKind.ADDRESS_CODE,
    MailKind.GUEST_REPLY,
)
"""Replies to mail without a valid key: their own, smaller budget (a forged flood from a
player's address must not use up that player's replies)."""
GUEST_REPLIES_PER_ADDRESS_PER_HOUR = 3
GUEST_HELP_PER_ADDRESS_PER_DAY = 2
GUEST_HELP_PER_HOUR = 30
"""HELP answered to any address, all of them together (a bound on backscatter). Notices
go only to registered players' addresses: they have a per-address budget only, so a
flood of HELP from strangers cannot silence the notices a player needs."""


@dataclass
class Context:
    session: Session
    config: Config
    row: InboundMessage
    mail: ParsedMail
    commands: Commands
    now: datetime


def registered(session: Session, game: Game | None, sender: str | None) -> Player | None:
    if sender is None:
        return None
    query = select(Player).where(func.lower(Player.email) == sender, Player.active)
    if game is not None:
        query = query.where(Player.game_id == game.id)
    return session.scalars(query.limit(1)).first()


GUEST_LIMITS: dict[str, tuple[int, timedelta, int | None]] = {
    MailKind.GUEST_HELP: (GUEST_HELP_PER_ADDRESS_PER_DAY, timedelta(days=1), GUEST_HELP_PER_HOUR),
    MailKind.GUEST_NOTICE: (GUEST_REPLIES_PER_ADDRESS_PER_HOUR, timedelta(hours=1), None),
    MailKind.LIST: (3, timedelta(days=1), 30),
    MailKind.CODE: (3, timedelta(days=1), 30),
    MailKind.ADDRESS_CODE: (3, timedelta(days=1), None),
    MailKind.GUEST_REPLY: (5, timedelta(days=1), 60),
}
"""Per kind of reply to unauthenticated mail: (per address, in this window, and for all
addresses together per hour or None). HELP, LIST, codes and answers to JOIN or OBSERVE
go to any address that asks, so a forged flood from many addresses meets the bound
for all of them, and one address never gets more than a few a day. Notices go only to
registered players' addresses: a per-address budget is enough."""


def guest_budget(ctx: Context, address: str, kind: str) -> bool:
    """True if a reply to unauthenticated mail of ``kind`` may go to ``address`` now."""
    session, now = ctx.session, ctx.now
    per_address, window, overall = GUEST_LIMITS[kind]
    sent_to = session.scalar(
        select(func.count())
        .select_from(OutboxMessage)
        .where(
            OutboxMessage.recipient == address,
            OutboxMessage.kind == kind,
            OutboxMessage.created_at > now - window,
        )
    )
    sent_all = 0
    if overall is not None:  # to any address: bounded for all of them together
        sent_all = (
            session.scalar(
                select(func.count())
                .select_from(OutboxMessage)
                .where(
                    OutboxMessage.kind == kind,
                    OutboxMessage.created_at > now - timedelta(hours=1),
                )
            )
            or 0
        )
    if (sent_to or 0) >= per_address or (overall is not None and sent_all >= overall):
        log.warning(
            "inbound %d: no reply to %s (unauthenticated replies' budget)", ctx.row.id, address
        )
        return False
    return True


def guest_notice(
    ctx: Context,
    message: str,
    game: Game | None = None,
    line_problems: tuple[LineProblem, ...] = (),
) -> None:
    """A notice about unauthenticated mail: only ever to a registered player's address
    (no backscatter to forgeries), within the guests' own budget."""
    player = registered(ctx.session, game, ctx.mail.sender)
    if player is None:
        log.info("inbound %d: no reply to unregistered sender %s", ctx.row.id, ctx.mail.sender)
        return
    if verified_sender(ctx):  # not forged: the player's own budget, as for their orders
        owner = ctx.session.get(Game, player.game_id)
        reply(
            ctx,
            owner,
            player,
            MailKind.NOTICE,
            "player/notice.txt.j2",
            message=message,
            line_problems=redacted(line_problems, ctx.commands.order_keys),
        )
        return
    if not guest_budget(ctx, player.email, MailKind.GUEST_NOTICE):
        return
    owner = ctx.session.get(Game, player.game_id)
    send(
        ctx,
        owner,
        player.email,
        MailKind.GUEST_NOTICE,
        "player/notice.txt.j2",
        subject=subject(owner, "About your message"),
        player=player,
        message=message,
        line_problems=redacted(line_problems, ctx.commands.order_keys),
    )


def verified_sender(ctx: Context) -> bool:
    """True when our own MTA's Authentication-Results (``authserv_id``) say the From
    domain authenticated this message (DMARC pass, or DKIM pass for that domain)."""
    results, sender = (ctx.row.auth_results or "").lower(), ctx.mail.sender
    if not results or sender is None or ctx.mail.sender_doubt:
        return False
    domain = sender.rpartition("@")[2]
    return (
        "dmarc=pass" in results
        or re.search(rf"dkim=pass[^;]*header\.(?:d|i)=@?{re.escape(domain)}\b", results) is not None
    )


def guest_help(ctx: Context, game: Game | None) -> None:
    """HELP from anyone, key or not: the help text to the sender (a few a day each)."""
    address = ctx.mail.sender
    if address is None or ctx.mail.sender_doubt or address_problem(address):
        log.info("inbound %d: HELP from an unusable address: not answered", ctx.row.id)
        return
    if not guest_budget(ctx, address, MailKind.GUEST_HELP):
        return
    player = registered(ctx.session, game, address)
    send(
        ctx,
        game,
        address,
        MailKind.GUEST_HELP,
        help_template(game),
        subject=subject(game, "How to send orders"),
        player=player,
        other_sender=None,
    )


def help_template(game: Game | None) -> str:
    """The HELP text of the game's ruleset (the default ruleset's for mail naming none)."""
    return f"{ruleset_of(game).name if game else DEFAULT_RULESET}/help.txt.j2"


SUBJECTS: dict[str, str] = {
    MailKind.ACK: "Orders received",
    MailKind.NOTICE: "About your message",
    MailKind.HELP: "How to send orders",
    MailKind.STATUS: "Your status",
    MailKind.MEMBERSHIP: "About your request",
}


def subject(game: Game | None, text: str) -> str:
    """Our own subject line: never an echo of what the sender wrote."""
    return f"[{game.name}] {text}" if game is not None else f"Snakes and Ladders: {text}"


def reply(
    ctx: Context,
    game: Game | None,
    player: Player,
    kind: str,
    template: str,
    always: bool = False,
    **context: Any,
) -> None:
    """A reply to an authenticated player's registered address, threaded, unless the
    rate limit holds; ``always`` (an order's acknowledgement) has its own, larger bound."""
    limit = ctx.config.settings.mail.replies_per_hour
    recent = (
        ctx.session.scalar(
            select(func.count())
            .select_from(OutboxMessage)
            .where(
                OutboxMessage.recipient == player.email,
                OutboxMessage.kind.in_(REPLY_KINDS),
                OutboxMessage.created_at > ctx.now - timedelta(hours=1),
            )
        )
        or 0
    )
    if always:  # an acknowledgement: counted apart, so other replies never use it up
        limit = ACKS_PER_HOUR
        recent = (
            ctx.session.scalar(
                select(func.count())
                .select_from(OutboxMessage)
                .where(
                    OutboxMessage.recipient == player.email,
                    OutboxMessage.kind == kind,
                    OutboxMessage.created_at > ctx.now - timedelta(hours=1),
                )
            )
            or 0
        )
    if recent >= limit:
        log.warning(
            "reply to %s held: %d replies in the last hour (limit %d)", player.name, recent, limit
        )
        return
    title = SUBJECTS[kind]
    if kind == MailKind.ACK and "round" in context and context["round"] is not None:
        title = f"Orders received for round {context['round'].number}"
    send(
        ctx,
        game,
        player.email,
        kind,
        template,
        subject=subject(game, title),
        player=player,
        **context,
    )


def send(
    ctx: Context, game: Game | None, to: str, kind: str, template: str, **context: Any
) -> None:
    enqueue_mail(
        ctx.session,
        ctx.config,
        game=game,
        kind=kind,
        to=to,
        now=ctx.now,
        template=template,
        auto_submitted="auto-replied",
        in_reply_to=ctx.mail.message_id,
        references=ctx.mail.references,
        **context,
    )


def redact(line: str, keys: tuple[str, ...]) -> str:
    """Never echo a key: any occurrence of one in an echoed line becomes ****."""
    for key in keys:
        if key and len(key) >= 3:
            line = re.sub(re.escape(key), "****", line, flags=re.IGNORECASE)
    return line


def redacted(problems: tuple[LineProblem, ...], keys: tuple[str, ...]) -> list[LineProblem]:
    return [LineProblem(redact(p.line, keys), p.reason) for p in problems]
