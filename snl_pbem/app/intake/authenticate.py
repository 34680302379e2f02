"""Step four, authenticate: who sent the message and for which game. The referee's mail
is recognised (the referee key); otherwise the game is found (GAME line, subject, or the
one game the sender plays) and locked, and the order key checked: a player, or a refusal
(no key, wrong key) with key guessing counted and reported. A key used from another
address than the player's own is noted for the referee."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app import ahead
from snl_pbem.app.commands import read as read_commands
from snl_pbem.app.commands.referee import is_referee_mail
from snl_pbem.app.commands.signup import confirm_address
from snl_pbem.app.intake.commands import run_of
from snl_pbem.app.intake.context import Message, Outcome
from snl_pbem.app.intake.reply import noting_cut
from snl_pbem.app.lookup import audit
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.replies import Context, guest_notice
from snl_pbem.app.txcache import forget, peek, remember, start
from snl_pbem.keys import hash_key
from snl_pbem.mail.commands import Commands
from snl_pbem.mail.parse import ParsedMail
from snl_pbem.rules.words import tr
from snl_pbem.store import Game, InboundMessage, OutboxMessage, Player
from snl_pbem.store.states import InboundStatus, MailKind

log = logging.getLogger("snl_pbem.intake")

WRONG_KEYS_PER_SENDER_PER_HOUR = 5
WRONG_KEYS_PER_GAME_PER_HOUR = 20
"""Past these, wrong keys get no more notices and the referee is told (once an hour)."""
WRONG_KEY = "authentication failed (wrong key)"


def referee(msg: Message) -> None:
    """Note whether this is the referee's mail (the referee's words run it all)."""
    msg.referee = is_referee_mail(msg.ctx)


def game(msg: Message) -> Outcome | None:
    """Find the game and lock it; refuse a message for no game (or two), and answer a
    stranger's HELP."""
    ctx = msg.ctx
    session, mail, commands = ctx.session, ctx.mail, ctx.commands
    found = _find_game(session, commands, mail.sender)
    if found is None:
        if commands.help and commands.order_key is None:
            run_of("HELP")(ctx, None, None, None)
            return Outcome(InboundStatus.PROCESSED, "help sent")
        if commands.game is not None and not commands.game_from_subject:
            guest_notice(
                ctx,
                tr(
                    "Your message's GAME line names a game that is not on this server: check "
                    "the game id in your welcome message."
                ),
            )
            return Outcome(InboundStatus.REJECTED, f"unknown game {commands.game!r}")
        guest_notice(
            ctx,
            noting_cut(
                tr(
                    "Your message did not say which game it is for: add a line GAME <id> (or "
                    "put [id] in the subject)."
                ),
                commands,
            ),
        )
        return Outcome(InboundStatus.REJECTED, "no game given")
    # The game row is locked, as a close locks it, and before anything that refers to it is
    # written (a foreign key's share lock first would let two intakes deadlock): an order is
    # either stored before a close reads the orders (and counts), or looked at after it (and
    # refused with the reason), never stored for a round a concurrent close has adjudicated.
    ahead.lock(session, [found])  # once a transaction: a batch's later messages hold it
    ctx.row.game_id = found.id
    msg.game = found
    if commands.conflict is not None:
        guest_notice(
            ctx,
            tr(
                "Your message was not applied: {conflict}. Send one order set per message, "
                "with one GAME and one KEY line.",
                conflict=commands.conflict,
            ),
            found,
        )
        return Outcome(InboundStatus.REJECTED, f"not one order set: {commands.conflict}")
    if commands.help and commands.order_key is None:
        run_of("HELP")(ctx, found, None, None)
        return Outcome(InboundStatus.PROCESSED, "help sent")
    return None


def key(msg: Message) -> Outcome | None:
    """Check the order key: the player, or a refusal. A CONFIRM from the new address of an
    ADDRESS change is done here, before the sender's address is compared with the
    player's (it makes that address the player's own)."""
    ctx, found = msg.ctx, msg.game
    assert found is not None
    session, commands = ctx.session, ctx.commands
    player = None
    if commands.order_key is not None:
        key_hash = hash_key(commands.order_key, found.order_key_salt)
        seats = peek(session, ahead.players_key(found))
        player = seats.get(key_hash) if seats is not None else None
    if player is None and commands.order_key is not None:
        with session.no_autoflush:  # only the message's own row is pending: not read here
            player = session.scalar(
                select(Player).where(
                    Player.game_id == found.id,
                    Player.active,
                    Player.order_key_hash == key_hash,
                )
            )
    if player is None:
        return _not_authenticated(ctx, found)
    ctx.row.player_id = player.id
    msg.player = player
    moved = confirm_address(ctx, found, player)  # from the new address
    if moved:
        msg.done.append(moved)
    msg.other = _other_address(ctx.mail, player)
    if msg.other:
        log.warning("inbound %d: %s's key used from %s", ctx.row.id, player.name, msg.other)
        audit(
            session,
            ctx.now,
            "intake",
            "key-elsewhere",
            found,
            player=player.name,
            address=msg.other,
            inbound=ctx.row.id,
        )
    return None


def _other_address(mail: ParsedMail, player: Player) -> str | None:
    """The address the key was used from, when it is not plainly the player's own: another
    address, none we could read, or a From header whose name shows another address."""
    if mail.sender is None:
        return tr(
            "an address we could not read ({why})",
            why=mail.sender_doubt or tr("no From address"),
        )
    if mail.sender != player.email.lower():
        return mail.sender
    if mail.sender_doubt:
        return tr("{address} ({why})", address=mail.sender, why=mail.sender_doubt)
    return None


def _not_authenticated(ctx: Context, game: Game) -> Outcome:
    """No active player has this key: refused; the registered sender is told (within the
    guests' budget), and key guessing is counted and reported."""
    session, commands, mail = ctx.session, ctx.commands, ctx.mail
    reason = "no KEY line" if commands.order_key is None else "wrong key"
    log.warning(
        "inbound %d for %s: authentication failed (%s) from %s",
        ctx.row.id,
        game.name,
        reason,
        mail.sender,
    )
    quiet = False
    if commands.order_key is not None:
        audit(
            session, ctx.now, "intake", "wrong-key", game, address=mail.sender, inbound=ctx.row.id
        )
        quiet = _key_guessing(ctx, game)
    if not quiet:
        said = (
            tr(
                "Your message had no order key, so nothing in it was applied. Every order "
                "needs the line KEY followed by your order key (see your welcome message)."
            )
            if commands.order_key is None
            else tr(
                "Your message had a wrong order key, so nothing in it was applied. Every order "
                "needs the line KEY followed by your order key (see your welcome message)."
            )
        )
        guest_notice(ctx, noting_cut(said, commands), game)
    return Outcome(InboundStatus.REJECTED, f"authentication failed ({reason})")


def _key_guessing(ctx: Context, game: Game) -> bool:
    """Count wrong keys; past the limits the sender gets no more notices and the referee
    is told (once an hour per game). True when this message should go unanswered.

    A right key is never refused for it: a forger could otherwise lock a player out by
    sending wrong keys from the player's address. Guessing gains nothing in any case:
    every reply goes to a registered address, never to the guesser."""
    session, sender = ctx.session, ctx.mail.sender
    since = ctx.now - timedelta(hours=1)
    wrong = (
        InboundMessage.game_id == game.id,
        InboundMessage.error == WRONG_KEY,
        InboundMessage.received_at > since,
        InboundMessage.id != ctx.row.id,
    )

    def bounded_count(*conditions: Any, limit: int) -> int:
        """How many (this message included), counted only up to just past ``limit``."""
        ids = select(InboundMessage.id).where(*conditions).limit(limit + 1).subquery()
        return 1 + (session.scalar(select(func.count()).select_from(ids)) or 0)

    over_sender = (
        sender is not None
        and bounded_count(
            *wrong, InboundMessage.sender == sender, limit=WRONG_KEYS_PER_SENDER_PER_HOUR
        )
        > WRONG_KEYS_PER_SENDER_PER_HOUR
    )
    over_game = bounded_count(*wrong, limit=WRONG_KEYS_PER_GAME_PER_HOUR) > (
        WRONG_KEYS_PER_GAME_PER_HOUR
    )
    if not (over_sender or over_game):
        return False
    # past the game's limit the referee is told; only a sender past its own limit is
    # quietened (one guesser must not silence every player's wrong-key notices)
    already = session.scalar(
        select(func.count())
        .select_from(OutboxMessage)
        .where(
            OutboxMessage.game_id == game.id,
            OutboxMessage.kind == MailKind.KEY_GUESSING,
            OutboxMessage.created_at > since,
        )
    )
    if not already:
        counts = session.execute(
            select(InboundMessage.sender, func.count())
            .where(*wrong)
            .group_by(InboundMessage.sender)
            .order_by(func.count().desc())
            .limit(20)
        ).all()
        senders = {address or "(no address)": n for address, n in counts}
        senders[sender or "(no address)"] = senders.get(sender or "(no address)", 0) + 1
        enqueue_mail(
            session,
            ctx.config,
            game=game,
            kind=MailKind.KEY_GUESSING,
            to=ctx.config.settings.mail.referee,
            now=ctx.now,
            template="referee/key_guessing.txt.j2",
            total=sum(senders.values()),
            senders=sorted(senders.items(), key=lambda item: -item[1]),
            per_sender=WRONG_KEYS_PER_SENDER_PER_HOUR,
            per_game=WRONG_KEYS_PER_GAME_PER_HOUR,
        )
        log.warning("%s: many wrong order keys in the last hour: referee told", game.name)
    return over_sender


def _game_named(session: Session, name: str) -> Game | None:
    """The game of that name, looked up once a batch (a batch's messages name the same few
    games, and a game is never renamed: ``txcache``)."""
    return remember(
        session, ahead.game_key(name), lambda: session.scalar(select(Game).where(Game.name == name))
    )


def read_ahead(session: Session, mails: Sequence[ParsedMail], *, savepoint: bool) -> None:
    """A batch's senders, and the game each of its messages is for (as ``_find_game``
    finds it), read ahead at once (``app.ahead``). With ``savepoint``, in one: should it
    fail, each message finds and locks its own game, as alone. Not the games of a batch
    with words beyond orders (a referee's, a sign-up's, RESIGN...): those may lock a game
    as they run, after the others, which two batches could each hold for the other."""
    start(session)  # (what is read ahead is kept for the batch)
    ahead.senders(session, [mail.sender for mail in mails])
    named: list[ahead.Named] = []
    for mail in mails:
        commands = read_commands(mail)
        if commands.actions:  # each message locks its game as it comes, as alone
            return
        if commands.game is not None and not commands.game_from_subject:
            named.append(((commands.game,), True, mail.sender))
        else:
            named.append((commands.subject_games, False, mail.sender))
    if not savepoint:
        ahead.games(session, named)
        return
    try:
        with session.begin_nested():
            ahead.games(session, named)
    except Exception as exc:  # (its locks went with the savepoint: PostgreSQL)
        log.warning("a batch's games could not be read ahead (%s): each looked up alone", exc)
        session.info.pop(ahead.LOCKED, None)
        forget(session)


def _find_game(session: Session, commands: Commands, sender: str | None) -> Game | None:
    """The game a GAME line names; else the first [id] of the subject that is a game here
    (a gateway's "[EXTERNAL]" may come first); else the one running game the sender
    plays in."""
    if commands.game is not None and not commands.game_from_subject:
        return _game_named(session, commands.game)
    for candidate in commands.subject_games:
        game = _game_named(session, candidate)
        if game is not None:
            return game
    if sender is None:
        return None
    return remember(  # (read ahead for a batch: ``ahead.games``)
        session,
        ahead.sender_game_key(sender),
        lambda: ahead.senders_games(session, [sender]).get(sender),
    )
