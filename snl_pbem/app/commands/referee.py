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

Each command's ``run`` is ``run(ctx, action, game, actor) -> str`` (registry.py): the
game is the one it names (else the message's), locked, inside a savepoint; it returns
what it did in a sentence, or raises LifecycleError or NotFound saying why not.
The refusals are in commands/referee_refusal.py.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy import select

from snl_pbem.app.commands.referee_refusal import (
    VIA,
    asked_for,
    message_game,
    named_game,
    referee_address,
    referee_words,
    refusal,
    refuse,
)
from snl_pbem.app.commands.registry import Command, Who, lookup, register
from snl_pbem.app.lookup import audit, game_by_name, game_time
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
from snl_pbem.app.server_keys import is_referee_key
from snl_pbem.app.signup import approve_signup, refuse_signup, start_forming_game
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.mail.commands import READERS, Action, LineProblem
from snl_pbem.rules.outcome import ranked
from snl_pbem.rules.words import tr
from snl_pbem.store import Game
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind
from snl_pbem.timeutil import format_duration, parse_duration

log = logging.getLogger("snl_pbem.referee_mail")

REPLY_TEMPLATE = "referee/reply.txt.j2"
NOT_YOURS = tr(
    "only the referee can give this command (from the referee's address, with the "
    "referee's key): not done"
)


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


def is_referee_mail(ctx: Context) -> bool:
    """True when the message is the referee's business (see the module's docstring):
    :func:`handle_referee_mail` answers it. A referee command in anyone else's message is
    taken out of ``ctx.commands`` here, with a line saying why it was not done, so that the
    rest of that message is read as usual."""
    commands = ctx.commands
    if any(is_referee_key(ctx.session, key) for key in commands.order_keys):
        return True
    words = [a for a in commands.actions if a.word in referee_words()]
    if not words:
        return False
    if ctx.mail.sender == referee_address(ctx) and not (
        commands.order_keys and commands.has_orders
    ):
        return True  # the referee's address, without the key (and not a player's orders)
    keys = commands.order_keys
    ctx.commands = replace(
        commands,
        actions=tuple(a for a in commands.actions if a.word not in referee_words()),
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
        commands=asked_for(ctx, words),
    )
    return False


def handle_referee_mail(ctx: Context) -> tuple[str, str]:
    """Obey the referee's message, or refuse it whole; (status, detail) as the intake
    records them."""
    refused = refusal(ctx)
    if refused is not None:
        why, alarm = refused
        return refuse(ctx, why, alarm=alarm)
    outcomes = _obey(ctx)
    game = named_game(ctx)
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
    if ctx.started:  # for the record (serve reads ctx.started)
        detail += "; the game started"
    return InboundStatus.PROCESSED, detail


def _obey(ctx: Context) -> list[Outcome]:
    """Each command in the order written, each in a savepoint of its own; a STATUS shows
    the games as the commands above it left them."""
    commands = ctx.commands
    if commands.conflict is not None:
        return [Outcome("", False, f"nothing was done: {commands.conflict}")]
    actor = referee_address(ctx)[:64]  # AuditEntry.actor's length
    outcomes = []
    for index, action in enumerate(commands.actions):
        outcomes += [_status(ctx) for at in commands.status_at if at == index]
        line = redact(action.line, commands.order_keys)
        command = lookup(action.word)
        if command is None or command.who is not Who.REFEREE or command.run is None:
            outcomes.append(Outcome(line, False, "a player's command: not read in referee mail"))
            continue
        try:
            with ctx.session.begin_nested():
                game = game_by_name(ctx.session, _game_for(ctx, action), lock=True)
                was = game.state
                text = command.run(ctx, action, game, actor)
        except (LifecycleError, NotFound) as exc:
            outcomes.append(Outcome(line, False, str(exc)))
        else:
            if ctx.row.game_id is None:  # the result's game: an all-in round closes early
                ctx.row.game_id = game.id
            if was == GamePhase.NEW and game.state != GamePhase.NEW:  # START, or an APPROVE
                ctx.started.add(game.name)  # that filled it: serve plans round 1 at once
            outcomes.append(Outcome(line, True, text))
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
        games = status_locked(ctx.session, message_game(ctx))
    except NotFound as exc:
        return Outcome("STATUS", False, str(exc))
    block = "\n".join(render_status(g) for g in games) or "no games\n"
    where = "now" if not ctx.commands.actions else "at this point of your message"
    return Outcome("STATUS", True, f"the games as they are {where}:", block)


# -- what each does -------------------------------------------------------------------


def run_extend(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """EXTEND g1 BY 2d: the deadline later, within the caps."""
    new = extend_locked(
        ctx.session, ctx.config, game, ctx.now, by=_duration(action.args[1]), actor=actor, via=VIA
    )
    caps = extension_caps(ctx.config, game)
    used = timedelta(seconds=game.extended_s)
    return (
        f"{game.name}: deadline now {game_time(game, new)}; the players are told "
        f"({format_duration(used)} of the {format_duration(caps.total)} of extensions "
        "allowed are used)"
    )


def run_pause(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """PAUSE g1: the clock stops."""
    pause_locked(ctx.session, ctx.config, game, ctx.now, actor=actor, via=VIA)
    return f"{game.name}: paused; its deadline stops until RESUME; the players are told"


def run_resume(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """RESUME g1: the clock restarts (a deadline passed meanwhile closes the round)."""
    now = ctx.now
    new = resume_locked(ctx.session, ctx.config, game, now, actor=actor, via=VIA)
    if new <= now:
        return (
            f"{game.name}: resumed; its deadline {game_time(game, new)} has passed: the "
            "round closes at once (the players get its mail)"
        )
    return f"{game.name}: resumed; deadline now {game_time(game, new)}; the players are told"


def run_close_round(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """CLOSE ROUND g1: the open round closes now."""
    outcome = close_round_locked(
        ctx.session, game, ctx.now, actor=actor, config=ctx.config, via=VIA
    )
    if outcome is None:
        raise LifecycleError(f"{game.name}: no round is open (the game is {game.state})")
    positions = ", ".join(f"{n} {p}" for n, p in ranked(outcome.adjudication.positions))
    text = f"{game.name}: round {outcome.round} closed; positions: {positions}; "
    if outcome.next_round is not None and outcome.next_deadline is not None:
        deadline = game_time(game, outcome.next_deadline)
        return text + f"round {outcome.next_round} open, deadline {deadline}"
    return text + "the game is over"


def run_rollback(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """ROLLBACK g1: the last closed round reopens (never discarding orders by mail)."""
    number = rollback_round_locked(
        ctx.session,
        game,
        ctx.now,
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
        config=ctx.config,
    )
    return (
        f"{game.name}: {rolled_back(ctx.session, game, number, ctx.now)}; "
        "then CLOSE ROUND or RESUME"
    )


def run_start(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """START g1: a forming game starts with the players it has."""
    return start_forming_game(ctx.session, ctx.config, game, ctx.now, actor=actor, via=VIA)


def run_approve(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """APPROVE g1 Ann: a sign-up waiting for approval is seated."""
    return approve_signup(
        ctx.session, ctx.config, game, action.args[1], ctx.now, actor=actor, via=VIA
    )


def run_refuse(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """REFUSE g1 Ann: a sign-up is turned down (or taken off the standby list)."""
    return refuse_signup(
        ctx.session, ctx.config, game, action.args[1], ctx.now, actor=actor, via=VIA
    )


def run_replace(ctx: Context, action: Action, game: Game, actor: str) -> str:
    """REPLACE g1 Ann new@example.org: Ann's seat goes to another address."""
    name, address = action.args[1], action.args[2]
    return replace_seat(ctx.session, ctx.config, game, name, address, ctx.now, actor=actor, via=VIA)


def _game_for(ctx: Context, action: Action) -> str:
    """The game a command is for: its own argument, else the message's game (GAME line or
    subject), else the server's only game."""
    if action.args and action.args[0]:
        return action.args[0]
    named = message_game(ctx)
    if named is not None:
        return named
    names = list(ctx.session.scalars(select(Game.name).order_by(Game.name)))
    if len(names) == 1:
        return names[0]
    raise LifecycleError(
        f"which game? Name it ({action.word} {names[0] if names else 'g1'} ...) or add a "
        f"line GAME <id> (games: {', '.join(names) or 'none'})"
    )


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


for word, run, help_line in (
    ("EXTEND", run_extend, "EXTEND g1 BY 2d    the deadline later (12h, 2d, 1w)"),
    ("PAUSE", run_pause, "PAUSE g1           stop the clock"),
    ("RESUME", run_resume, "RESUME g1          restart it"),
    ("CLOSE ROUND", run_close_round, "CLOSE ROUND g1     close the open round now"),
    ("ROLLBACK", run_rollback, "ROLLBACK g1        reopen the last closed round"),
    (
        "REPLACE",
        run_replace,
        "REPLACE g1 Ann new@example.org   give Ann's seat to another address",
    ),
    ("APPROVE", run_approve, "APPROVE g1 Ann     seat a sign-up waiting for approval"),
    (
        "REFUSE",
        run_refuse,
        "REFUSE g1 Ann      turn a sign-up down (or take it off the standby list)",
    ),
    ("START", run_start, "START g1           start a game"),
):
    register(
        Command(
            word=word,
            who=Who.REFEREE,
            read=READERS[word.split()[0]],
            run=run,
            help=help_line,
            group="referee",
        )
    )
