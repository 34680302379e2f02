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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, cast

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from snl_pbem.app import txcache
from snl_pbem.app.ahead import SENDERS
from snl_pbem.app.codes import VOUCHED
from snl_pbem.app.links import guide_urls
from snl_pbem.app.lookup import ruleset_of
from snl_pbem.app.outbox import RECENT, mail_row
from snl_pbem.config import Config, address_problem
from snl_pbem.i18n import LANGUAGES, written_in
from snl_pbem.mail import authresults
from snl_pbem.mail.commands import Commands, LineProblem
from snl_pbem.mail.parse import ParsedMail
from snl_pbem.rules.ruleset import DEFAULT_RULESET
from snl_pbem.rules.words import Text, tr
from snl_pbem.store import Confirmation, Game, InboundMessage, OutboxMessage, Player, deferred
from snl_pbem.store.bulk import among
from snl_pbem.store.states import MailKind, Purpose

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
    MailKind.GUEST_NOTE,
)
"""Replies to mail without a valid key: their own, smaller budget (a forged flood from a
player's address must not use up that player's replies)."""
GUEST_MAIL_PER_HOUR = 100
"""All mail of GUEST_KINDS but notices (which go only to registered players) in an hour,
at most: HELP, LIST, codes, answers and notes to any address that asks, and ADDRESS codes
to new addresses. However a flood is spread over addresses and kinds, the mail it draws
to people who never asked is bounded by this; past it, such mail is not sent (nor kept
to send later) until the hour has passed, and the referee of a game whose sign-ups it
held back is told."""
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
    started: set[str] = field(default_factory=set)
    """The games (by name) this message started: a sign-up that filled one, or START."""

    @cached_property
    def written_in(self) -> str | None:
        """The language the sender wrote this message in, where that is clear from its
        letters (snl_pbem.i18n.written_in): the answers to a stranger are written in it
        (None: the game's language, or English)."""
        return written_in(" ".join((self.mail.subject or "", *self.mail.lines)))


def registered(session: Session, game: Game | None, sender: str | None) -> Player | None:
    if sender is None:
        return None
    query = select(Player).where(func.lower(Player.email) == sender, Player.active)
    if game is not None:
        query = query.where(Player.game_id == game.id)
    return session.scalars(query.limit(1)).first()


def chosen_language(session: Session, game: Game | None, address: str) -> str | None:
    """The language a player at ``address`` chose by mail (LANGUAGE, JOIN ... LANGUAGE):
    what an answer to them as a stranger (a JOIN of the game they play, a LIST) is written
    in when their message does not make it clear. Among ``game``'s players (its index);
    for mail naming no game, among all (a scan, but only for an answer the guests'
    budgets let go: a few hundred an hour at most)."""
    query = select(Player.language).where(
        func.lower(Player.email) == address.lower(),
        Player.active,
        Player.language.is_not(None),
    )
    if game is not None:
        query = query.where(Player.game_id == game.id)
    found = session.scalars(query.order_by(Player.id).limit(1)).first()
    return found if found in LANGUAGES else None


GUEST_LIMITS: dict[str, tuple[int, timedelta, int | None]] = {
    MailKind.GUEST_HELP: (GUEST_HELP_PER_ADDRESS_PER_DAY, timedelta(days=1), GUEST_HELP_PER_HOUR),
    MailKind.GUEST_NOTICE: (GUEST_REPLIES_PER_ADDRESS_PER_HOUR, timedelta(hours=1), None),
    MailKind.LIST: (3, timedelta(days=1), 30),
    MailKind.CODE: (3, timedelta(days=1), 30),
    MailKind.ADDRESS_CODE: (3, timedelta(days=1), None),
    MailKind.GUEST_REPLY: (5, timedelta(days=1), 60),
    MailKind.GUEST_NOTE: (8, timedelta(hours=1), None),
}
"""Per kind of reply to unauthenticated mail: (per address, in this window, and for all
addresses together per hour or None); all kinds but notices together within
GUEST_MAIL_PER_HOUR. HELP, LIST, codes and answers to JOIN or OBSERVE go to any address
that asks, so a forged flood from many addresses meets the bound for all of them, and
one address never gets more than a few a day. An address's count takes in its ``+tag``
forms (``ann+1@`` ... ``ann+9@`` are one mailbox). Notices go only to registered players'
addresses: a per-address budget is enough. Notes (a code is pending, too many codes...)
are each sent at most once an hour to an address (``codes.noted``), so they never
use up its day's answers."""
GUEST_DOMAIN_LIMITS: dict[str, int] = {MailKind.CODE: 10}
"""Per kind, codes to all addresses at one domain in an hour, at most: thirty forged JOINs
from thirty addresses at one domain count as one domain's. (Past it, an address there is
told to try again in an hour; one at another domain is not held back.)"""
VOUCHED_GUEST_MAIL_PER_HOUR = 1000
"""All mail of GUEST_KINDS but notices in an hour, past which even a vouched-for sender
(``verified_sender``) is not answered. Forged mail cannot reach it (it stops at
GUEST_MAIL_PER_HOUR); only someone signing real mail from many addresses of domains he
holds can, and this bounds what he makes the server send to himself."""
BUDGET_LIMITS = ("address", "domain", "kind", "all")
"""Which bound ``guest_limit`` found reached: the address's, its domain's, the kind's for
all addresses, or GUEST_MAIL_PER_HOUR."""


def guest_budget(ctx: Context, address: str, kind: str) -> bool:
    """True if a reply to unauthenticated mail of ``kind`` may go to ``address`` now."""
    return guest_limit(ctx, address, kind) is None


def guest_limit(ctx: Context, address: str, kind: str) -> str | None:
    """The bound (one of BUDGET_LIMITS) that holds a reply to unauthenticated mail of
    ``kind`` to ``address`` now, or None when it may go (the first reached, in that
    order: the caller words its reason by it).

    A reply to the sender of a message our MTA vouches for (``verified_sender``: DKIM or
    DMARC aligned with its From domain) meets only its address's bound, and for codes
    that bound counts only the codes its vouched-for requests drew (``codes.VOUCHED``
    in their payload): the shared bounds (a domain's, a kind's, all guest mail's) are
    there because a forger can write in anyone's name, and he cannot write this. Beyond
    them only VOUCHED_GUEST_MAIL_PER_HOUR holds."""
    session, now = ctx.session, ctx.now
    hour = now - timedelta(hours=1)
    per_address_limit, window, overall = GUEST_LIMITS[kind]
    local, _, domain = address.lower().rpartition("@")
    base = local.split("+", 1)[0] or local
    vouched = address.lower() == (ctx.mail.sender or "").lower() and verified_sender(ctx)

    def count(*where: Any) -> int:
        return session.scalar(select(func.count()).select_from(OutboxMessage).where(*where)) or 0

    def at_address(column: Any) -> Any:  # the address and its +tag forms
        return column.in_((address.lower(), f"{base}@{domain}")) | column.like(
            f"{_like(base)}+%@{_like(domain)}", escape="\\"
        )

    if vouched and kind == MailKind.CODE:
        mine = (
            session.scalar(
                select(func.count())
                .select_from(Confirmation)
                .where(
                    at_address(Confirmation.email),
                    Confirmation.purpose.in_((Purpose.JOIN, Purpose.OBSERVE)),
                    Confirmation.created_at > now - window,
                    Confirmation.payload[VOUCHED].as_string() == "yes",
                )
            )
            or 0
        )
    else:
        mine = count(
            at_address(OutboxMessage.recipient),
            OutboxMessage.kind == kind,
            OutboxMessage.created_at > now - window,
        )
    guest_kinds = [k for k in GUEST_KINDS if k != MailKind.GUEST_NOTICE]
    found: str | None = None
    if mine >= per_address_limit:
        found = "address"
    elif vouched:
        if (
            kind != MailKind.GUEST_NOTICE
            and count(OutboxMessage.kind.in_(guest_kinds), OutboxMessage.created_at > hour)
            >= VOUCHED_GUEST_MAIL_PER_HOUR
        ):
            found = "all"
    elif kind in GUEST_DOMAIN_LIMITS and (
        count(
            OutboxMessage.recipient.endswith("@" + domain, autoescape=True),
            OutboxMessage.kind == kind,
            OutboxMessage.created_at > hour,
        )
        >= GUEST_DOMAIN_LIMITS[kind]
    ):
        found = "domain"
    elif overall is not None and (
        count(OutboxMessage.kind == kind, OutboxMessage.created_at > hour) >= overall
    ):
        found = "kind"
    elif kind != MailKind.GUEST_NOTICE and (
        count(OutboxMessage.kind.in_(guest_kinds), OutboxMessage.created_at > hour)
        >= GUEST_MAIL_PER_HOUR
    ):
        found = "all"
    if found is not None:
        log.warning(
            "inbound %d: no %s to %s (unauthenticated replies' budget: %s%s)",
            ctx.row.id,
            kind,
            address,
            found,
            ", vouched-for sender" if vouched else "",
        )
    return found


def _like(text: str) -> str:
    """``text`` for a LIKE pattern, matched literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


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
        subject=subject(owner, tr("About your message")),
        player=player,
        message=message,
        line_problems=redacted(line_problems, ctx.commands.order_keys),
    )


def verified_sender(ctx: Context) -> bool:
    """True when our own MTA's Authentication-Results (``authserv_id``) say the From
    domain authenticated this message: DMARC pass for that very domain, or DKIM pass by
    a domain aligned with it on label boundaries (``example.org.evil.example`` never
    signs for ``example.org``). Read by RFC 8601's grammar: snl_pbem.mail.authresults."""
    stored, sender = ctx.row.auth_results, ctx.mail.sender
    authserv_id = ctx.config.settings.mail.authserv_id
    if not stored or not authserv_id or sender is None or ctx.mail.sender_doubt:
        return False
    domain = sender.rpartition("@")[2]
    return authresults.vouched(authresults.fields(stored), authserv_id, domain)


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
        subject=subject(game, tr("How to send orders")),
        player=player,
        other_sender=None,
        guides=guide_urls(ctx.config),
    )


def help_template(game: Game | None) -> str:
    """The HELP text of the game's ruleset (the default ruleset's for mail naming none)."""
    return f"{ruleset_of(game).name if game else DEFAULT_RULESET}/help.txt.j2"


SUBJECTS: dict[str, Text] = {
    MailKind.ACK: tr("Orders received"),
    MailKind.NOTICE: tr("About your message"),
    MailKind.HELP: tr("How to send orders"),
    MailKind.STATUS: tr("Your status"),
    MailKind.MEMBERSHIP: tr("About your request"),
}


def subject(game: Game | None, text: str) -> str:
    """Our own subject line: never an echo of what the sender wrote. ``text`` may be
    ``Text``: the subject is then written in the mail's language, the [game] tag kept."""
    if game is not None:
        return tr("[{game}] {subject}", game=game.name, subject=text)
    return tr("Snakes and Ladders: {subject}", subject=text)


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
    kinds: tuple[str, ...] = REPLY_KINDS
    if always:  # an acknowledgement: counted apart, so other replies never use it up
        limit, kinds = ACKS_PER_HOUR, (kind,)
    recent = _recent(ctx, player.email, kinds)
    if recent >= limit:
        log.warning(
            "reply to %s held: %d replies in the last hour (limit %d)", player.name, recent, limit
        )
        return
    title = SUBJECTS[kind]
    if kind == MailKind.ACK and "round" in context and context["round"] is not None:
        title = tr("Orders received for round {n}", n=context["round"].number)
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


def _recent(ctx: Context, to: str, kinds: tuple[str, ...]) -> int:
    """Mail of these kinds to ``to`` in the hour before this message (``ctx.now``). Read
    once in a transaction for ``to`` and the rest of the batch's senders (``ahead.SENDERS``:
    one query, not one a message): the times of their mail since the hour before, kept and
    added to as replies are written (``_sent``; any other mail written forgets them:
    ``outbox.written``). Each message counts against its own hour, as the batch's messages
    may have been received out of order or hours apart; a message whose hour begins before
    what was read reads again. On PostgreSQL, mail another process commits meanwhile is seen
    at the next batch, not the next message."""
    session = ctx.session
    since = ctx.now - timedelta(hours=1)
    kept: _Recent | None = txcache.peek(session, RECENT)
    if kept is None:
        kept = ({}, {})
        txcache.put(session, RECENT, kept)  # (nothing kept if the session keeps nothing)
    read_since, times = kept
    if to not in read_since or read_since[to] > since:
        if any(isinstance(o, OutboxMessage) for o in session.new):
            session.flush()  # mail of this message waits to be written: it counts
        others: list[str] = session.info.get(SENDERS) or []
        wanted = sorted({to, *others})[:_RECENT_AT_ONCE]
        if to not in wanted:
            wanted[-1] = to
        sqlite = session.get_bind().dialect.name == "sqlite"
        rows = session.connection().execute(  # on the connection: nothing else to write first
            select(OutboxMessage.recipient, OutboxMessage.kind, OutboxMessage.created_at).where(
                among(OutboxMessage.recipient, wanted, sqlite=sqlite),
                OutboxMessage.created_at > since,
            )
        )
        for recipient in wanted:
            read_since[recipient] = since
            for key in [key for key in times if key[0] == recipient]:
                del times[key]
        for recipient, kind, created_at in rows:
            times.setdefault((recipient, kind), []).append(created_at)
    return sum(1 for kind in kinds for at in times.get((to, kind), ()) if at > since)


_Recent = tuple[dict[str, datetime], dict[tuple[str, str], list[datetime]]]
"""What ``_recent`` keeps: each address's mail read since when, and the times of its mail
by (address, kind)."""
_RECENT_AT_ONCE = 200
"""Addresses whose recent mail is read in one query: a batch's senders (at most
``snl_pbem.runners.mailboxes.BATCH_MAX``, 100) and the address written to, which may be
spelt otherwise."""


def _sent(ctx: Context, to: str, kind: str) -> None:
    """A reply written (at ``ctx.now``, its created_at): the times kept for ``to`` hold it."""
    kept: _Recent | None = txcache.peek(ctx.session, RECENT)
    if kept is not None and to in kept[0]:
        kept[1].setdefault((to, kind), []).append(ctx.now)


def send(
    ctx: Context, game: Game | None, to: str, kind: str, template: str, **context: Any
) -> None:
    """A reply to this message, stored for sending: a plain insert on the session's
    connection (one of a batch's many), after any mail of this message still pending in the
    session (the outbox's ids keep the order the mail was written in); in a batch, written
    with the batch's others (``deferred``)."""
    if any(isinstance(o, OutboxMessage) for o in ctx.session.new):
        ctx.session.flush()
    if "language" not in context:  # to someone not (yet) a player: as they wrote, if clear
        player = context.get("player")
        if not (isinstance(player, Player) and player.email.lower() == to.lower()):
            context["language"] = ctx.written_in or chosen_language(ctx.session, game, to)
    row = mail_row(
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
    deferred.insert_row(ctx.session, cast(Table, OutboxMessage.__table__), row)
    _sent(ctx, to, kind)


def redact(line: str, keys: tuple[str, ...]) -> str:
    """Never echo a key: any occurrence of one in an echoed line becomes ****."""
    for key in keys:
        if not key or len(key) < 3:
            continue
        # an ASCII line is looked in first (most lines hold no key, and a pattern costs
        # more); another may hold a key in letters the pattern takes for its own (a dotless i for i)
        if line.isascii() and key.isascii() and key.lower() not in line.lower():
            continue
        line = re.sub(re.escape(key), "****", line, flags=re.IGNORECASE)
    return line


def redacted(problems: tuple[LineProblem, ...], keys: tuple[str, ...]) -> list[LineProblem]:
    return [LineProblem(redact(p.line, keys), p.reason) for p in problems]
