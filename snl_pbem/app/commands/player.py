"""A seated player's own affairs, with their GAME and KEY lines like orders: HISTORY,
ABSENT, NEW KEY, ADDRESS, RESIGN (HELP lists them in this order). What each does is in
``players`` and ``seats``; here is the answer, always to the player's registered address,
never elsewhere.

Each command's ``run`` is ``run(ctx, game, player, action) -> str`` (registry.py): the
game is the one the message's key locked, the player the key's; it returns the intake's
note.
"""

from __future__ import annotations

import re
from datetime import datetime

from snl_pbem.app import codes, players, seats, views
from snl_pbem.app.commands.answers import player_reply
from snl_pbem.app.commands.registry import Command, Who, lookup, register
from snl_pbem.app.commands.signup import run_in_keyed
from snl_pbem.app.replies import Context, guest_budget, reply, send, subject
from snl_pbem.errors import LifecycleError, said
from snl_pbem.mail.commands import READERS, Action
from snl_pbem.rules.words import joined, ntr, tr
from snl_pbem.store import Game, Player
from snl_pbem.store.states import GamePhase, MailKind, Purpose
from snl_pbem.timeutil import zone


def handle_keyed(ctx: Context, game: Game, player: Player) -> list[str]:
    """A player's life-cycle commands (their key is checked): each done and answered."""
    done: list[str] = []
    seen: set[str] = set()
    for action in ctx.commands.actions:
        if not player.active:  # resigned (by this message): nothing more is done for them
            break
        if action.word in seen:
            continue  # one of each per message (one NEW KEY, one RESIGN step...)
        seen.add(action.word)
        command = lookup(action.word)
        if command is None or command.run is None:
            continue
        if command.who is Who.PLAYER:
            done.append(command.run(ctx, game, player, action))
        elif command.who is Who.ANYONE:
            note = run_in_keyed(ctx, game, player, action)
            if note is not None:
                done.append(note)
    return done


# -- what each does -------------------------------------------------------------------


def run_history(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """HISTORY: everyone's position after each round so far."""
    reply(
        ctx,
        game,
        player,
        MailKind.MEMBERSHIP,
        "player/history.txt.j2",
        rounds=views.standings_by_round(ctx.session, game),
    )
    return "history sent"


def run_new_key(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """NEW KEY: a new order key to the player's address; the old one stops."""
    session, now = ctx.session, ctx.now
    refusal = players.new_key_refusal(session, game, player, now)
    if refusal is not None:
        player_reply(ctx, game, player, refusal)
        return "new key refused"
    order_key = players.new_key(session, game, player, now)
    send(  # always sent (not held by the replies' budget): the old key has stopped
        ctx,
        game,
        player.email,
        MailKind.MEMBERSHIP,
        "player/new_key.txt.j2",
        subject=subject(game, tr("Your new order key")),
        player=player,
        order_key=order_key,
        secret=True,  # scrubbed once sent, like a welcome
    )
    return "new key sent"


def run_resign(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """RESIGN: asks to confirm; the same again within RESIGN_LIFETIME resigns."""
    session, config, now = ctx.session, ctx.config, ctx.now
    named = action.args[0] if action.args else None
    if named is not None and named != game.name:
        player_reply(
            ctx,
            game,
            player,
            tr(
                "Your RESIGN line names {named}, but your key is for {game}: nothing changed.",
                named=named,
                game=game.name,
            ),
        )
        return "resign: another game named"
    refusal = seats.resign_refusal(config, game, player)
    if refusal is not None:
        player_reply(ctx, game, player, refusal)
        return "resign refused"
    forming = game.state == GamePhase.NEW
    if seats.resign(session, config, game, player, now, named, ctx.row.id):
        if forming:
            player_reply(
                ctx,
                game,
                player,
                tr(
                    "You have left {title} before it started: your seat is free for someone "
                    "else. Send LIST to see other games.",
                    title=game.title or game.name,
                ),
            )
            return "left before the start"
        player_reply(
            ctx,
            game,
            player,
            tr(
                "You have resigned from {title}. Your key no longer works and you will get no "
                "more mail about this game. Your seat plays on by the no-orders default until "
                "the referee gives it to someone. Thanks for playing.",
                title=game.title or game.name,
            ),
        )
        return "resigned"
    player_reply(
        ctx,
        game,
        player,
        ntr(
            "To resign from {game}, send one more message within {n} day with these lines "
            "(nothing changes until then):",
            "To resign from {game}, send one more message within {n} days with these lines "
            "(nothing changes until then):",
            seats.RESIGN_LIFETIME.days,
            game=game.name,
        ),
        joined(  # the lines as written in every language; only the key's place is words
            "\n",
            (
                f"GAME {game.name}",
                joined(" ", ("KEY", tr("(your order key)"))),
                f"RESIGN {game.name}",
            ),
        ),
    )
    return "resign: confirmation asked"


def run_absent(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """ABSENT UNTIL <date> or ABSENT OFF."""
    try:
        until = _absent_until(game, action.args) if action.args[0] == "until" else None
        message = players.absent(ctx.session, ctx.config, game, player, until, ctx.now)
    except (LifecycleError, ValueError) as exc:
        player_reply(ctx, game, player, tr("{reason} Nothing changed.", reason=said(exc)))
        return f"absent refused: {exc}"
    player_reply(ctx, game, player, message)
    return "absent" if until else "absent off"


def run_address(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """ADDRESS new@example.org: a code to the new address (CONFIRM from there moves the
    mail: ``commands.signup.confirm_address``)."""
    session, config, now = ctx.session, ctx.config, ctx.now
    new = action.args[0]
    refusal = players.address_refusal(session, config, game, player, new)
    if refusal is not None:
        player_reply(ctx, game, player, tr("{reason} Nothing changed.", reason=refusal))
        return f"address refused: {refusal}"
    refusal = players.address_code_refusal(session, game, player, now)
    if refusal is not None:
        player_reply(ctx, game, player, refusal)
        return "address: no code sent (the player's or the game's codes for the day)"
    if not guest_budget(ctx, new, MailKind.ADDRESS_CODE):
        player_reply(
            ctx,
            game,
            player,
            tr("Too many codes went to {address} lately; try again tomorrow.", address=new),
        )
        return "address: no code sent (budget)"
    code = players.request_address(session, game, player, new, now)
    send(
        ctx,
        game,
        new,
        MailKind.ADDRESS_CODE,
        "player/code.txt.j2",
        purpose=Purpose.ADDRESS,
        name=player.name,
        code=code,
        days=codes.CODE_LIFETIME.days,
        secret=True,
    )
    player_reply(
        ctx,
        game,
        player,
        tr(
            "We mailed a code to {address}. Your mail moves there once you send the code back "
            "from that address, with your order key. Until then nothing changes.",
            address=new,
        ),
    )
    return "address: code sent"


_WHEN = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ tT](\d{1,2}):(\d{2}))?$")


def _absent_until(game: Game, args: tuple[str, ...]) -> datetime:
    """ABSENT UNTIL 2026-12-24 (to the end of that day, 23:59 in the game's zone) or
    ABSENT UNTIL 2026-12-24 18:00; a month or day may have one digit."""
    text = args[1].strip()
    found = _WHEN.match(text)
    wrong = tr("{date} is not a future date (write it year first: 2026-12-24).", date=repr(text))
    if found is None:
        raise ValueError(wrong)
    year, month, day, hour, minute = found.groups()
    if not 2000 <= int(year) <= 2999:
        raise ValueError(wrong)
    try:
        if hour is None:
            return datetime(int(year), int(month), int(day), 23, 59, tzinfo=zone(game.timezone))
        return datetime(
            int(year), int(month), int(day), int(hour), int(minute), tzinfo=zone(game.timezone)
        )
    except ValueError:
        raise ValueError(wrong) from None


for word, run, help_text in (
    ("HISTORY", run_history, tr("HISTORY            everyone's position after each round so far")),
    (
        "ABSENT",
        run_absent,
        tr(
            "ABSENT UNTIL 2026-12-24   away: no reminders, and rounds you miss\n"
            "                   are not held against you (ABSENT OFF when back)"
        ),
    ),
    (
        "NEW KEY",
        run_new_key,
        tr("NEW KEY            a new order key to your address; the old one stops"),
    ),
    (
        "ADDRESS",
        run_address,
        tr(
            "ADDRESS ann@new.example   move your mail (we mail a code there; send it\n"
            "                   back from there with CONFIRM, GAME and KEY)"
        ),
    ),
    ("RESIGN", run_resign, tr("RESIGN             leave the game (we ask you to confirm)")),
):
    register(
        Command(
            word=word,
            who=Who.PLAYER,
            read=READERS[word.split()[0]],
            run=run,
            help=help_text,
            group="player",
        )
    )
