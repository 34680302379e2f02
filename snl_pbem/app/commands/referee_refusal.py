"""Which referee mail is refused, and how (commands/referee.py obeys the rest): nothing is
done; the sender is never answered (a From line can be forged, and an answer would tell a
forger whether the key was right); the refusal is audited ("referee-refused"); and the
referee's address is told, at most once an hour, so that a flood of forgeries costs one
mail an hour. The referee's key given from any other address is the alarming case: its
notice says so, and has an hourly bound of its own. Also the look-ups both share: the
referee's words, address and the game a message names.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select

from snl_pbem.app.commands.registry import Who
from snl_pbem.app.commands.registry import commands as registered
from snl_pbem.app.lookup import audit, game_by_name
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.replies import Context, redact
from snl_pbem.app.server_keys import REFEREE, is_referee_key
from snl_pbem.errors import NotFound
from snl_pbem.mail.commands import Action
from snl_pbem.store import Game, OutboxMessage, ServerKey
from snl_pbem.store.states import InboundStatus, MailKind
from snl_pbem.timeutil import show, zone

log = logging.getLogger("snl_pbem.referee_mail")

REFUSED_TEMPLATE = "referee/refused.txt.j2"
REFUSED_SUBJECT = "Snakes and Ladders: referee commands refused"
ALARM_SUBJECT = "Snakes and Ladders: ALERT: your referee key was used from another address"
"""The two notices of refused referee mail, each sent at most once an hour; the outbox
keeps no template name, so the hourly bound finds each by its subject."""
VIA = "mail"


def referee_words() -> frozenset[str]:
    """The referee's commands: the registry's Who.REFEREE."""
    return frozenset(c.word for c in registered(who=Who.REFEREE))


def referee_address(ctx: Context) -> str:
    return ctx.config.settings.mail.referee.lower()


def asked_for(ctx: Context, words: list[Action] | None = None) -> list[str]:
    """The referee commands a message asked for, as written (keys redacted, cut short)."""
    commands = ctx.commands
    if words is None:
        words = [a for a in commands.actions if a.word in referee_words()]
    lines = [redact(a.line, commands.order_keys)[:100] for a in words]
    return (["STATUS"] if commands.status else []) + lines


def refusal(ctx: Context) -> tuple[str, bool] | None:
    """Why the referee's business in this message is not obeyed, and whether that is the
    alarming case (the referee's key, not plainly from the referee's address); None when
    it is obeyed."""
    session, mail, referee = ctx.session, ctx.mail, referee_address(ctx)
    keys = ctx.commands.order_keys
    plainly = mail.sender == referee and mail.sender_doubt is None
    if any(is_referee_key(session, key) for key in keys):
        if plainly:
            return None
        where = mail.sender or "no address that could be read"
        doubt = f" ({mail.sender_doubt})" if mail.sender_doubt else ""
        return (
            f"it gave the referee's key, but came from {where}{doubt}, not plainly from {referee}"
        ), True
    if session.get(ServerKey, REFEREE) is None:
        why = "referee commands by mail are off: mail.referee_key is not set in the config"
    elif not keys:
        why = "it had no KEY line with the referee's key"
    else:
        why = "its KEY was not the referee's key"
    if mail.sender_doubt:
        why += f"; and its From line is doubtful ({mail.sender_doubt})"
    return why, False


def refuse(ctx: Context, why: str, *, alarm: bool) -> tuple[str, str]:
    """Nothing done, nobody but the referee told (at most once an hour), the refusal
    audited."""
    session, config, mail = ctx.session, ctx.config, ctx.mail
    asked = asked_for(ctx)
    game = named_game(ctx)
    if game is not None:
        ctx.row.game_id = game.id  # the round summary lists it with the game's rejected mail
    audit(
        session,
        ctx.now,
        "intake",
        "referee-refused",
        game,
        via=VIA,
        address=mail.sender,
        why=why,
        alarm=alarm,
        inbound=ctx.row.id,
        commands=asked,
    )
    log.warning("inbound %d: referee command refused (%s) from %s", ctx.row.id, why, mail.sender)
    title = ALARM_SUBJECT if alarm else REFUSED_SUBJECT
    if not _told_this_hour(ctx, title):
        enqueue_mail(
            session,
            config,
            game=None,
            kind=MailKind.REFEREE_NOTICE,
            to=config.settings.mail.referee,
            now=ctx.now,
            template=REFUSED_TEMPLATE,
            subject=title,
            alarm=alarm,
            referee=config.settings.mail.referee,
            sender=mail.sender or "(no address that could be read)",
            doubt=mail.sender_doubt,
            why=why,
            asked=asked,
            inbound=ctx.row.id,
            received=show(ctx.now, zone(config.settings.timezone)),
        )
    return InboundStatus.REJECTED, f"referee command refused: {why}"


def _told_this_hour(ctx: Context, title: str) -> bool:
    """Whether the referee has had the notice titled ``title`` within the last hour."""
    messages = ctx.session.scalars(
        select(OutboxMessage.message).where(
            OutboxMessage.kind == MailKind.REFEREE_NOTICE,
            OutboxMessage.recipient == ctx.config.settings.mail.referee,
            OutboxMessage.created_at > ctx.now - timedelta(hours=1),
        )
    )
    header = f"\r\nSubject: {title}\r\n".encode()  # ours, ASCII: written unfolded
    return any(header in message for message in messages)


def named_game(ctx: Context) -> Game | None:
    """The one game the message names (on its commands, GAME line or subject), locked;
    None when it names none, several, or none that exists."""
    commands = ctx.commands
    names = {
        a.args[0] for a in commands.actions if a.word in referee_words() and a.args and a.args[0]
    }
    named = message_game(ctx)
    if named is not None:
        names.add(named)
    if len(names) != 1:
        return None
    try:  # locked before the message refers to it, as the intake does
        return game_by_name(ctx.session, names.pop(), lock=True)
    except NotFound:
        return None


def message_game(ctx: Context) -> str | None:
    """The GAME line's game, else the first [id] of the subject that is a game here (a
    gateway's "[EXTERNAL]" may come first), else None."""
    commands = ctx.commands
    if commands.game is not None and not commands.game_from_subject:
        return commands.game
    for candidate in commands.subject_games:
        if ctx.session.scalar(select(Game.id).where(Game.name == candidate)) is not None:
            return candidate
    return None
