"""The one way mail enters: ``ingest(raw, received_at, source)``.

Every intake (IMAP, LMTP/SMTP, a file) calls it. It first stores the raw
message and its identity and commits — only then may the caller acknowledge
it to its source — and then processes it in a second transaction: parse,
authenticate, apply, reply. A message already stored (same bytes, same
mailbox UID, or a Message-ID already processed) is recognised and not applied
twice. A message whose processing fails is kept with its traceback, marked
for the referee, and the server carries on.
"""

from __future__ import annotations

import hashlib
import logging
import re
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.games import audit
from snl_pbem.keys import hash_key
from snl_pbem.mail.commands import Commands, LineProblem, parse_commands
from snl_pbem.mail.parse import ParsedMail, ParseTimeout, message_id_of, parse_message
from snl_pbem.outbox import enqueue_mail
from snl_pbem.rounds import game_players, load_state, submit_orders
from snl_pbem.store import Database, Game, InboundMessage, OrderRecord, OutboxMessage, Player, Round
from snl_pbem.store.models import dice_values
from snl_pbem.timeutil import show, zone

log = logging.getLogger("snl_pbem.intake")

MAX_STORED_BYTES = 25 * 1024 * 1024
MAX_ATTEMPTS = 5
"""Restarts that may find a message still unprocessed before it is set aside (a message
that kills the server every time must not keep it in a crash loop; a server killed by
something else now and then must not lose an order)."""
REPLY_KINDS = ("ack", "notice", "help", "status")
RECEIPT_RESOLUTION = timedelta(seconds=1)


@dataclass(frozen=True)
class IngestResult:
    inbound_id: int | None
    status: str
    """stored-and-processed outcome: processed, rejected, ignored, duplicate, failed."""
    detail: str = ""

    @property
    def stored(self) -> bool:
        """True once the message is safely in the database (the source may be acknowledged)."""
        return self.inbound_id is not None


def ingest(
    db: Database,
    config: Config,
    raw: bytes,
    received_at: datetime,
    source: str,
    *,
    uidvalidity: int | None = None,
    uid: int | None = None,
) -> IngestResult:
    """Store, then process, one message. Raises only if it could not be stored."""
    digest = hashlib.sha256(raw).hexdigest()
    try:
        with db.transaction() as session:
            known = _known(session, digest, source, uidvalidity, uid)
            if known is not None:
                return IngestResult(known.id, "duplicate", "already stored")
            row = InboundMessage(
                message_id=message_id_of(raw),
                sha256=digest,
                source=source[:200],
                uidvalidity=uidvalidity,
                uid=uid,
                received_at=received_at,
                raw=raw[:MAX_STORED_BYTES],
                status="new",
                attempts=0,  # counts the restarts that found it unprocessed
            )
            session.add(row)
            session.flush()
            inbound_id = row.id
    except IntegrityError:  # another process stored it at the same moment
        with db.transaction() as session:
            known = _known(session, digest, source, uidvalidity, uid)
            return IngestResult(known.id if known else None, "duplicate", "already stored")
    crash_point("ingest.stored-not-processed")
    return _process_row(db, config, inbound_id)


def _known(
    session: Session, digest: str, source: str, uidvalidity: int | None, uid: int | None
) -> InboundMessage | None:
    found = session.scalar(select(InboundMessage).where(InboundMessage.sha256 == digest))
    if found is None and uid is not None:
        found = session.scalar(
            select(InboundMessage).where(
                InboundMessage.source == source,
                InboundMessage.uidvalidity == uidvalidity,
                InboundMessage.uid == uid,
            )
        )
    return found


def process_pending(db: Database, config: Config) -> list[IngestResult]:
    """Process messages stored but not processed (the server stopped in between)."""
    with db.transaction() as session:
        ids = session.scalars(
            select(InboundMessage.id)
            .where(InboundMessage.status == "new")
            .order_by(InboundMessage.id)
        ).all()
    return [process_stored(db, config, inbound_id) for inbound_id in ids]


def process_stored(db: Database, config: Config, inbound_id: int) -> IngestResult:
    """Process a stored message again (after a stop); set aside after MAX_ATTEMPTS such
    tries, each committed before it starts, so a try the process did not survive counts."""
    with db.transaction() as session:
        row = session.get(InboundMessage, inbound_id)
        assert row is not None
        if row.status != "new":
            return IngestResult(inbound_id, row.status, row.error or "")
        row.attempts += 1
        if row.attempts > MAX_ATTEMPTS:  # it stopped the server every time: set it aside
            row.status, row.error = "failed", "processing was interrupted several times"
            log.error("inbound %d set aside: %s", inbound_id, row.error)
            return IngestResult(inbound_id, "failed", row.error)
    return _process_row(db, config, inbound_id)


def retry_set_aside(
    db: Database, config: Config, inbound_id: int, now: datetime, actor: str = "referee"
) -> IngestResult:
    """The referee runs a set-aside message again (after fixing what stopped it), judged by
    its original receipt time. Raises LookupError if there is no such set-aside message."""
    with db.transaction() as session:
        row = session.get(InboundMessage, inbound_id, with_for_update=True)
        if row is None or row.status != "failed":
            state = "no such message" if row is None else f"it is {row.status}, not set aside"
            raise LookupError(f"inbound {inbound_id}: {state}")
        row.status, row.error, row.attempts = "new", None, 0
        game = session.get(Game, row.game_id) if row.game_id else None
        audit(session, now, actor, "inbound-retry", game, inbound=inbound_id)
    return _process_row(db, config, inbound_id)


def _process_row(db: Database, config: Config, inbound_id: int) -> IngestResult:
    """Process one stored message; any failure is recorded on it, never raised.

    The row is locked and its status checked in the same transaction, so that a message
    is processed once even when two processes reach it together (one server's poller
    and another's start-up ``process_pending``, or a referee's ``ingest``)."""
    try:
        with db.transaction() as session:
            row = session.get(InboundMessage, inbound_id, with_for_update=True)
            assert row is not None
            if row.status != "new":
                return IngestResult(inbound_id, "duplicate", f"already handled: {row.status}")
            status, detail = _process(session, config, row)
            row.status, row.error = status, detail or None
    except Exception as exc:  # kept with its traceback for the referee; the server carries on
        trace = traceback.format_exc(limit=20)
        with db.transaction() as session:
            row = session.get(InboundMessage, inbound_id)
            assert row is not None
            row.status, row.error = "failed", trace[-8000:]
        log.error(
            "inbound %d set aside for the referee: %s: %s", inbound_id, type(exc).__name__, exc
        )
        return IngestResult(inbound_id, "failed", f"{type(exc).__name__}: {exc}")
    log.info("inbound %d %s%s", inbound_id, status, f": {detail}" if detail else "")
    return IngestResult(inbound_id, status, detail)


@dataclass
class _Context:
    session: Session
    config: Config
    row: InboundMessage
    mail: ParsedMail
    commands: Commands
    now: datetime


def _process(session: Session, config: Config, row: InboundMessage) -> tuple[str, str]:
    mail_settings = config.settings.mail
    if len(row.raw) > mail_settings.max_message_size:
        return (
            "rejected",
            f"too large ({len(row.raw)} bytes; limit {mail_settings.max_message_size})",
        )
    try:
        mail = parse_message(row.raw, mail_settings.address)
    except ParseTimeout as exc:
        return "rejected", str(exc)
    row.sender = mail.sender
    if mail_settings.authserv_id:
        ours = [
            a
            for a in mail.authentication_results
            if a.split(";")[0].strip().lower() == mail_settings.authserv_id.lower()
        ]
        row.auth_results = "\n".join(ours) or None
    if mail.message_id:
        earlier = session.scalar(
            select(InboundMessage.id).where(
                InboundMessage.message_id == mail.message_id,
                InboundMessage.id != row.id,
                InboundMessage.status.in_(("processed", "rejected")),
            )
        )
        if earlier is not None:
            return "duplicate", f"Message-ID already seen in inbound {earlier}"
    if mail.automated:
        return "ignored", f"automated mail, not answered: {mail.automated}"
    commands = parse_commands(mail.text, mail.subject)
    ctx = _Context(session, config, row, mail, commands, row.received_at)
    return _dispatch(ctx)


def _dispatch(ctx: _Context) -> tuple[str, str]:
    session, mail, commands = ctx.session, ctx.mail, ctx.commands
    game = _find_game(session, commands, mail.sender)
    if game is None:
        if commands.game is not None:
            _notice_to_sender(ctx, None, f"There is no game called {commands.game!r} here.")
            return "rejected", f"unknown game {commands.game!r}"
        _notice_to_sender(
            ctx,
            None,
            "Your message did not say which game it is for: add a "
            "line GAME <id> (or put [id] in the subject).",
        )
        return "rejected", "no game given"
    # The game row is locked, as a close locks it, and before anything that refers to it is
    # written (a foreign key's share lock first would let two intakes deadlock): an order is
    # either stored before a close reads the orders (and counts), or looked at after it (and
    # refused with the reason), never stored for a round a concurrent close has adjudicated.
    session.refresh(game, with_for_update=True)
    ctx.row.game_id = game.id
    player = None
    if commands.key is not None:
        player = session.scalar(
            select(Player).where(
                Player.game_id == game.id, Player.key_hash == hash_key(commands.key, game.key_salt)
            )
        )
    if player is None:
        registered = _registered(session, game, mail.sender)
        reason = "no KEY line" if commands.key is None else "wrong key"
        log.warning(
            "inbound %d for %s: authentication failed (%s) from %s",
            ctx.row.id,
            game.key,
            reason,
            mail.sender,
        )
        if registered is not None:
            _reply(
                ctx,
                game,
                registered,
                "notice",
                "player/notice.txt.j2",
                message=f"Your message had {'no' if commands.key is None else 'a wrong'} "
                "order key, so nothing in it was applied. Every order needs the line KEY "
                "followed by your order key (see your welcome message).",
                line_problems=(),
            )
        return "rejected", f"authentication failed ({reason})"
    ctx.row.player_id = player.id
    other = mail.sender if mail.sender and mail.sender != player.email.lower() else None
    if other:
        log.warning("inbound %d: %s's key used from another address", ctx.row.id, player.name)
    if commands.help:
        _reply(ctx, game, player, "help", "player/help.txt.j2")
    if commands.has_orders or commands.clear:
        return _orders(ctx, game, player, other)
    if commands.status:
        _status_reply(ctx, game, player)
        return "processed", "status sent"
    if commands.help:
        return "processed", "help sent"
    _reply(
        ctx,
        game,
        player,
        "notice",
        "player/notice.txt.j2",
        message="Your message had no orders (no DICE or TRAPDOOR line).",
        line_problems=_redacted(commands.problems, commands.key),
    )
    return "processed", "no orders in it"


def _orders(ctx: _Context, game: Game, player: Player, other: str | None) -> tuple[str, str]:
    session, commands = ctx.session, ctx.commands
    round_ = session.scalar(select(Round).where(Round.game_id == game.id, Round.state == "open"))
    refusal = None
    if game.state == "paused":
        refusal = "The game is paused: orders cannot be accepted until the referee resumes it."
    elif game.state != "running" or round_ is None:
        refusal = (
            f"The game is {'over' if game.state == 'over' else 'not running'}: "
            "there is no round to send orders for."
        )
    elif commands.round is not None and commands.round != round_.number:
        refusal = (
            f"Your orders are for round {commands.round}, but the round open now is "
            f"round {round_.number}. Send them again with ROUND {round_.number} (or "
            "without a ROUND line)."
        )
    elif ctx.now + RECEIPT_RESOLUTION <= round_.opened_at:  # IMAP dates are whole seconds
        refusal = (
            f"Your message reached us before round {round_.number} opened, so it was meant "
            f"for an earlier round, which is closed now. Send your orders for round "
            f"{round_.number} again."
        )
    elif ctx.now > round_.deadline:
        refusal = (
            f"Your orders arrived after round {round_.number}'s deadline "
            f"({show(round_.deadline, zone(game.timezone))}), so they do not count."
        )
    if refusal is not None:
        _reply(
            ctx, game, player, "notice", "player/notice.txt.j2", message=refusal, line_problems=()
        )
        return "rejected", refusal.split(":")[0].split(".")[0]
    assert round_ is not None
    dice = commands.dice if commands.dice is not None else ()
    receipt = submit_orders(
        session,
        game,
        player,
        dice=dice,
        trapdoor=commands.trapdoor,
        received_at=ctx.now,
        inbound_id=ctx.row.id,
        withdraw=commands.clear and not commands.has_orders,
    )
    problems = list(receipt.problems)
    if commands.dice is None and not commands.clear:
        problems.insert(
            0,
            "no DICE line: this message replaces your earlier orders as a whole, so it has no dice",
        )
    first = "first " if round_.turns == 2 else ""
    trapdoor_text = (
        f"space {commands.trapdoor}"
        if commands.trapdoor is not None
        else f"none (the space your {first}move lands on counts, rule 16)"
    )
    if receipt.valid:
        open_label = "Still open in your set of six after these dice"
        open_after = receipt.open_after
    else:
        open_label = "Open in your current set of six"
        open_after = receipt.open_values
    first_turn = game.turns_played + 1
    _reply(
        ctx,
        game,
        player,
        "ack",
        "player/orders_ack.txt.j2",
        cleared=commands.clear and not commands.has_orders,
        round=round_,
        dice_ok=receipt.valid and commands.dice is not None,
        dice_sent=" ".join(map(str, dice)),
        turns=list(zip(range(first_turn, first_turn + len(dice)), dice, strict=False)),
        dice_problems=problems,
        trapdoor_text=trapdoor_text,
        line_problems=_redacted(commands.problems, commands.key),
        ignored=[_redact(x, commands.key) for x in commands.ignored][:20],
        dropped=commands.dropped_lines,
        open_label=open_label,
        open_values=", ".join(map(str, open_after)),
        deadline=show(round_.deadline, zone(game.timezone)),
        other_sender=other,
    )
    return "processed", (
        "orders withdrawn"
        if commands.clear and not commands.has_orders
        else f"orders for round {round_.number} ({'valid' if receipt.valid else 'invalid dice'})"
    )


def _status_reply(ctx: _Context, game: Game, player: Player) -> None:
    session = ctx.session
    players = game_players(session, game)
    state = load_state(session, game, players)
    round_ = session.scalar(select(Round).where(Round.game_id == game.id, Round.state == "open"))
    orders_text = "none yet"
    if round_ is not None:
        latest = session.scalar(
            select(OrderRecord)
            .where(OrderRecord.round_id == round_.id, OrderRecord.player_id == player.id)
            .order_by(OrderRecord.received_at.desc(), OrderRecord.id.desc())
            .limit(1)
        )
        if latest is not None:
            dice = " ".join(map(str, dice_values(latest.dice))) or "no dice"
            orders_text = (
                "withdrawn"
                if latest.withdrawn
                else f"dice {dice}, {'valid' if latest.valid else 'NOT valid'}"
            )
    state_text = {
        "running": "running",
        "paused": "paused by the referee",
        "over": "over",
        "new": "not started yet",
    }[game.state]
    _reply(
        ctx,
        game,
        player,
        "status",
        "player/status.txt.j2",
        state_text=state_text,
        position=state.positions[player.name],
        used=", ".join(map(str, state.used_in_set(player.name))) or "none",
        open_values=", ".join(map(str, state.open_values(player.name))),
        round=round_,
        orders_text=orders_text,
        deadline=show(round_.deadline, zone(game.timezone)) if round_ else "",
    )


def _find_game(session: Session, commands: Commands, sender: str | None) -> Game | None:
    if commands.game is not None:
        return session.scalar(select(Game).where(Game.key == commands.game))
    if sender is None:
        return None
    games = session.scalars(
        select(Game)
        .join(Player, Player.game_id == Game.id)
        .where(func.lower(Player.email) == sender, Game.state.in_(("running", "paused")))
    ).all()
    return games[0] if len(set(g.id for g in games)) == 1 else None


def _registered(session: Session, game: Game | None, sender: str | None) -> Player | None:
    if sender is None:
        return None
    query = select(Player).where(func.lower(Player.email) == sender, Player.active)
    if game is not None:
        query = query.where(Player.game_id == game.id)
    return session.scalars(query.limit(1)).first()


def _notice_to_sender(ctx: _Context, game: Game | None, message: str) -> None:
    """Only a registered player's address ever gets a reply: no backscatter to forgeries."""
    player = _registered(ctx.session, game, ctx.mail.sender)
    if player is None:
        log.info("inbound %d: no reply to unregistered sender %s", ctx.row.id, ctx.mail.sender)
        return
    owner = ctx.session.get(Game, player.game_id)
    _reply(ctx, owner, player, "notice", "player/notice.txt.j2", message=message, line_problems=())


def _reply(
    ctx: _Context, game: Game | None, player: Player, kind: str, template: str, **context: Any
) -> None:
    """A reply to the player's registered address, threaded, unless the rate limit holds."""
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
    if recent >= limit:
        log.warning(
            "reply to %s held: %d replies in the last hour (limit %d)", player.name, recent, limit
        )
        return
    subject = ctx.mail.subject or "your orders"
    subject = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    enqueue_mail(
        ctx.session,
        ctx.config,
        game=game,
        kind=kind,
        to=player.email,
        now=ctx.now,
        template=template,
        auto_submitted="auto-replied",
        in_reply_to=ctx.mail.message_id,
        references=ctx.mail.references,
        subject=subject,
        player=player,
        **context,
    )


def _redact(line: str, key: str | None) -> str:
    """Never echo a key: any occurrence of it in an echoed line becomes ****."""
    if key and len(key) >= 3:
        return re.sub(re.escape(key), "****", line, flags=re.IGNORECASE)
    return line


def _redacted(problems: tuple[LineProblem, ...], key: str | None) -> list[LineProblem]:
    return [LineProblem(_redact(p.line, key), p.reason) for p in problems]
