"""The referee by email: STATUS, EXTEND, PAUSE, RESUME, CLOSE ROUND, ROLLBACK, START,
APPROVE, REFUSE and REPLACE, sent to the game address.

A message is the referee's business when a KEY line gives the referee's key
(``mail.referee_key``, kept hashed: ``server_keys``), or when it comes from the referee's
address (``mail.referee``) with a referee command in it. It is obeyed only when both hold,
its From header plainly showing that one address. Its commands then run in the order
written, each in a savepoint of its own (one refused leaves the others done), inside the
intake's transaction, and one reply to the referee's address lists what each did or why
not. STATUS in it is the referee's private status (``snl-pbem status``).

Anything else of the referee's business is refused whole: nothing is done; the sender is
never answered (a From line can be forged, and an answer would tell a forger whether the
key was right); the refusal is audited ("referee-refused"); and the referee's address is
told, at most once an hour, so that a flood of forgeries costs one mail an hour. The
referee's key given from any other address is the alarming case: its notice says so, and
has an hourly bound of its own, so that forgeries without the key cannot hide it.

A referee command in anyone else's message (another address, no referee key) is refused on
its own line and the rest is read as that player's message: a referee word never costs a
player their orders.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy import select

from snl_pbem.app.lookup import audit, game_by_id, game_time
from snl_pbem.app.membership_mail import STARTED
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.referee import (
    extend_locked,
    extension_caps,
    pause_locked,
    render_status,
    resume_locked,
    status_locked,
)
from snl_pbem.app.reopened import rolled_back
from snl_pbem.app.replies import Context, redact, redacted, send
from snl_pbem.app.rounds import close_round_locked, rollback_round_locked
from snl_pbem.app.seats import replace_seat
from snl_pbem.app.server_keys import REFEREE, is_referee_key
from snl_pbem.app.signup import approve_signup, refuse_signup, start_forming_game
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.mail.commands import REFEREE_ACTIONS, Action, LineProblem
from snl_pbem.rules.outcome import ranked
from snl_pbem.store import Game, OutboxMessage, ServerKey
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind
from snl_pbem.timeutil import format_duration, parse_duration, show, zone

log = logging.getLogger("snl_pbem.referee_mail")

REPLY_TEMPLATE = "referee/reply.txt.j2"
REFUSED_TEMPLATE = "referee/refused.txt.j2"
REFUSED_SUBJECT = "Snakes and Ladders: referee commands refused"
ALARM_SUBJECT = "Snakes and Ladders: ALERT: your referee key was used from another address"
"""The two notices of refused referee mail, each sent at most once an hour; the outbox
keeps no template name, so the hourly bound finds each by its subject."""
NOT_YOURS = (
    "only the referee can give this command (from the referee's address, with the "
    "referee's key): not done"
)
VIA = "mail"


@dataclass(frozen=True)
class Outcome:
    """One command of the referee's message and what became of it, for the reply."""

    line: str
    """The command as written (keys redacted); "" for a note on the whole message."""
    done: bool
    text: str
    """What it did, or why not."""
    block: str = ""
    """Lines to show below it (the status)."""
    started: bool = False
    """It started a game (START, or an APPROVE that filled one)."""


# -- which mail is the referee's --------------------------------------------------------


def is_referee_mail(ctx: Context) -> bool:
    """True when the message is the referee's business (see the module's docstring):
    :func:`handle_referee_mail` answers it. A referee command in anyone else's message is
    taken out of ``ctx.commands`` here, with a line saying why it was not done, so that the
    rest of that message is read as usual."""
    commands = ctx.commands
    if any(is_referee_key(ctx.session, key) for key in commands.order_keys):
        return True
    words = [a for a in commands.actions if a.word in REFEREE_ACTIONS]
    if not words:
        return False
    if ctx.mail.sender == _referee(ctx) and not (commands.order_keys and commands.has_orders):
        return True  # the referee's address, without the key (and not a player's orders)
    keys = commands.order_keys
    ctx.commands = replace(
        commands,
        actions=tuple(a for a in commands.actions if a.word not in REFEREE_ACTIONS),
        problems=(
            *commands.problems,
            *(LineProblem(redact(a.line, keys), NOT_YOURS) for a in words),
        ),
    )
    audit(
        ctx.session,
        ctx.now,
        "intake",
        "referee-refused",
        None,
        via=VIA,
        address=ctx.mail.sender,
        why="a referee command in a player's message (the rest of it was read as usual)",
        inbound=ctx.row.id,
        commands=_asked(ctx, words),
    )
    return False


def _referee(ctx: Context) -> str:
    return ctx.config.settings.mail.referee.lower()


def _asked(ctx: Context, words: list[Action] | None = None) -> list[str]:
    """The referee commands a message asked for, as written (keys redacted, cut short)."""
    commands = ctx.commands
    if words is None:
        words = [a for a in commands.actions if a.word in REFEREE_ACTIONS]
    lines = [redact(a.line, commands.order_keys)[:100] for a in words]
    return (["STATUS"] if commands.status else []) + lines


# -- refused ------------------------------------------------------------------------------


def _refusal(ctx: Context) -> tuple[str, bool] | None:
    """Why the referee's business in this message is not obeyed, and whether that is the
    alarming case (the referee's key, not plainly from the referee's address); None when
    it is obeyed."""
    session, mail, referee = ctx.session, ctx.mail, _referee(ctx)
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


def _refuse(ctx: Context, why: str, *, alarm: bool) -> tuple[str, str]:
    """Nothing done, nobody but the referee told (at most once an hour), the refusal
    audited."""
    session, config, mail = ctx.session, ctx.config, ctx.mail
    asked = _asked(ctx)
    game = _named_game(ctx)
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


def _named_game(ctx: Context) -> Game | None:
    """The one game the message names (on its commands, GAME line or subject), locked;
    None when it names none, several, or none that exists."""
    commands = ctx.commands
    names = {
        a.args[0] for a in commands.actions if a.word in REFEREE_ACTIONS and a.args and a.args[0]
    }
    named = _message_game(ctx)
    if named is not None:
        names.add(named)
    if len(names) != 1:
        return None
    try:  # locked before the message refers to it, as the intake does
        return game_by_id(ctx.session, names.pop(), lock=True)
    except NotFound:
        return None


# -- obeyed ---------------------------------------------------------------------------------


def handle_referee_mail(ctx: Context) -> tuple[str, str]:
    """Obey the referee's message, or refuse it whole; (status, detail) as the intake
    records them."""
    refused = _refusal(ctx)
    if refused is not None:
        why, alarm = refused
        return _refuse(ctx, why, alarm=alarm)
    outcomes = _obey(ctx)
    game = _named_game(ctx)
    if game is not None:
        ctx.row.game_id = game.id
    commands = ctx.commands
    done = sum(1 for o in outcomes if o.done)
    not_done = len(outcomes) - done
    title = "Snakes and Ladders: your referee commands"
    if not_done:
        title += f": {done} done, {not_done} not done"
    send(
        ctx,
        game,
        ctx.config.settings.mail.referee,
        MailKind.REFEREE_REPLY,
        REPLY_TEMPLATE,
        subject=title,
        outcomes=outcomes,
        problems=redacted(commands.problems, commands.order_keys),
        help=commands.help or not outcomes,
        private=any(o.block for o in outcomes),
    )
    detail = f"referee's commands: {done} done, {not_done} not done"
    if any(o.done and o.started for o in outcomes):  # serve plans round 1's close at once
        detail += f"; {STARTED}"
    return InboundStatus.PROCESSED, detail


def _obey(ctx: Context) -> list[Outcome]:
    """Each command in the order written, each in a savepoint of its own; a STATUS shows
    the games as the commands above it left them."""
    commands = ctx.commands
    if commands.conflict is not None:
        return [Outcome("", False, f"nothing was done: {commands.conflict}")]
    actor = _referee(ctx)[:64]  # AuditEntry.actor's length
    outcomes = []
    for index, action in enumerate(commands.actions):
        outcomes += [_status(ctx) for at in commands.status_at if at == index]
        line = redact(action.line, commands.order_keys)
        if action.word not in REFEREE_ACTIONS:
            outcomes.append(Outcome(line, False, "a player's command: not read in referee mail"))
            continue
        try:
            with ctx.session.begin_nested():
                game = game_by_id(ctx.session, _game_for(ctx, action), lock=True)
                was = game.state
                text = _run(ctx, action, game, actor)
        except (LifecycleError, NotFound) as exc:
            outcomes.append(Outcome(line, False, str(exc)))
        else:
            started = was == GamePhase.NEW and game.state != GamePhase.NEW
            outcomes.append(Outcome(line, True, text, started=started))
    last = len(commands.actions)
    after = [at for at in commands.status_at if at >= last]
    if commands.status and not commands.status_at:
        after = [last]
    outcomes += [_status(ctx) for _ in after]
    if commands.has_orders or commands.clear:
        outcomes.append(
            Outcome("", False, "DICE, TRAPDOOR, ROLL and CLEAR are a player's: not read here")
        )
    return outcomes


def _status(ctx: Context) -> Outcome:
    """STATUS at its place in the message: the games as the commands before it left them."""
    try:
        games = status_locked(ctx.session, _message_game(ctx))
    except NotFound as exc:
        return Outcome("STATUS", False, str(exc))
    block = "\n".join(render_status(g) for g in games) or "no games\n"
    where = "now" if not ctx.commands.actions else "at this point of your message"
    return Outcome("STATUS", True, f"the games as they are {where}:", block)


def _run(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """One referee command on ``game`` (locked); what it did, in a sentence.
    LifecycleError or NotFound says why not."""
    session, config, now = ctx.session, ctx.config, ctx.now
    word = action.word
    if word == "EXTEND":
        new = extend_locked(
            session, config, game, now, by=_duration(action.args[1]), actor=actor, via=VIA
        )
        caps = extension_caps(config, game)
        used = timedelta(seconds=game.extended_s)
        return (
            f"{game.name}: deadline now {game_time(game, new)}; the players are told "
            f"({format_duration(used)} of the {format_duration(caps.total)} of extensions "
            "allowed are used)"
        )
    if word == "PAUSE":
        pause_locked(session, config, game, now, actor=actor, via=VIA)
        return f"{game.name}: paused; its deadline stops until RESUME; the players are told"
    if word == "RESUME":
        new = resume_locked(session, config, game, now, actor=actor, via=VIA)
        if new <= now:
            return (
                f"{game.name}: resumed; its deadline {game_time(game, new)} has passed: the "
                "round closes at once (the players get its mail)"
            )
        return f"{game.name}: resumed; deadline now {game_time(game, new)}; the players are told"
    if word == "CLOSE ROUND":
        outcome = close_round_locked(session, game, now, actor=actor, config=config, via=VIA)
        if outcome is None:
            raise LifecycleError(f"{game.name}: no round is open (the game is {game.state})")
        positions = ", ".join(f"{n} {p}" for n, p in ranked(outcome.adjudication.positions))
        text = f"{game.name}: round {outcome.round} closed; positions: {positions}; "
        if outcome.next_round is not None and outcome.next_deadline is not None:
            deadline = game_time(game, outcome.next_deadline)
            return text + f"round {outcome.next_round} open, deadline {deadline}"
        return text + "the game is over"
    if word == "ROLLBACK":
        number = rollback_round_locked(
            session,
            game,
            now,
            actor=actor,
            via=VIA,
            force_hint=(
                "by mail a rollback never discards orders (on the server, "
                f"snl-pbem rollback {game.name} --force does)"
            ),
            reveal_hint=(
                "by mail it stays over (on the server, "
                f"snl-pbem rollback {game.name} --force reopens it all the same)"
            ),
            config=config,
        )
        return f"{game.name}: {rolled_back(session, game, number, now)}; then CLOSE ROUND or RESUME"
    if word == "START":
        return start_forming_game(session, config, game, now, actor=actor, via=VIA)
    if word == "APPROVE":
        return approve_signup(session, config, game, action.args[1], now, actor=actor, via=VIA)
    if word == "REFUSE":
        return refuse_signup(session, config, game, action.args[1], now, actor=actor, via=VIA)
    assert word == "REPLACE", word  # REFEREE_ACTIONS, each handled above
    name, address = action.args[1], action.args[2]
    return replace_seat(session, config, game, name, address, now, actor=actor, via=VIA)


def _game_for(ctx: Context, action: Action) -> str:
    """The game a command is for: its own argument, else the message's game (GAME line or
    subject), else the server's only game."""
    if action.args and action.args[0]:
        return action.args[0]
    named = _message_game(ctx)
    if named is not None:
        return named
    names = list(ctx.session.scalars(select(Game.name).order_by(Game.name)))
    if len(names) == 1:
        return names[0]
    raise LifecycleError(
        f"which game? Name it ({action.word} {names[0] if names else 'g1'} ...) or add a "
        f"line GAME <id> (games: {', '.join(names) or 'none'})"
    )


def _message_game(ctx: Context) -> str | None:
    """The GAME line's game, else the first [id] of the subject that is a game here (a
    gateway's "[EXTERNAL]" may come first), else None."""
    commands = ctx.commands
    if commands.game is not None and not commands.game_from_subject:
        return commands.game
    for candidate in commands.subject_games:
        if ctx.session.scalar(select(Game.id).where(Game.name == candidate)) is not None:
            return candidate
    return None


_UNITS = {"week": "w", "weeks": "w", "day": "d", "days": "d", "hour": "h", "hours": "h"}


def _duration(text: str) -> timedelta:
    """EXTEND's duration: 12h, 2d, 1w, or 2 days, 3 hours, 1 week."""
    match = re.fullmatch(r"(\d+)\s*([a-z]+)", text.strip().lower())
    try:
        if match is None:
            raise ValueError(text)
        number, unit = match.groups()
        return parse_duration(number + _UNITS.get(unit, unit))
    except ValueError:
        raise LifecycleError(f"{text!r} is not a duration: write 12h, 2d or 1w") from None
