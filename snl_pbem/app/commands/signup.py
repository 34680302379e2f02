"""Finding and joining a game, and following one: LIST, JOIN, CONFIRM, OBSERVE,
UNOBSERVE. Anyone may send them, no key needed: the address proves itself with a code
(HELP lists them in this order). What each does is in ``app.signup``, ``codes`` and
``observers``; here is who may ask, and the answer (commands/answers.py words it).

Answers to mail without a key go to the From address (the only one that can have asked)
on the guests' budgets (``replies.GUEST_LIMITS``): a few a day to one address, a bound
per domain for codes, a bound for all of them together; a code is mailed only to the
address it must come back from. A repeated JOIN or OBSERVE for a game whose code still
waits sends no new code (and cannot void the one waiting): it reminds. A JOIN under
another name gets a code of its own; the first used voids the others.

A sender our MTA vouches for (``replies.verified_sender``: DKIM or DMARC aligned with
the From domain) cannot be forged, so it meets only its own address's budget, counted
by its own signed requests, and its CONFIRM is checked even while its code rests.

Each command's ``run`` is ``run(ctx, action, address, player) -> str`` (registry.py):
``address`` is the one to answer, ``player`` the sender's seat when the message came with
its key (then only for the game it holds locked), else None; it returns the intake's note.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from snl_pbem.app import codes, observers, players, signup, views
from snl_pbem.app.commands.answers import (
    guest_reply,
    note,
    player_reply,
    resting_text,
    send_code,
)
from snl_pbem.app.commands.language import asked_language
from snl_pbem.app.commands.registry import Command, Who, lookup, register
from snl_pbem.app.replies import Context, guest_budget, guest_help, send, verified_sender
from snl_pbem.config import address_problem
from snl_pbem.errors import LifecycleError, said
from snl_pbem.i18n import LANGUAGES, language
from snl_pbem.mail.commands import READERS, Action
from snl_pbem.rules.words import joined, tr
from snl_pbem.store import Game, Player
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind, Purpose

log = logging.getLogger("snl_pbem.intake")


def open_word(word: str) -> bool:
    """Whether ``word`` is a command anyone may send that :func:`handle_open` runs (the
    sign-up group's words; HELP, which anyone may send too, is answered by the intake)."""
    command = lookup(word)
    return command is not None and command.who is Who.ANYONE and command.group == "signup"


def usable_sender(ctx: Context) -> str | None:
    """The From address to answer and to bind codes to; None when it is not plainly one."""
    sender = ctx.mail.sender
    if sender is None or ctx.mail.sender_doubt or address_problem(sender):
        return None  # not plainly one address the server can send to (and seat, later)
    return sender.lower()


def handle_open(ctx: Context) -> tuple[str, str] | None:
    """A message without a KEY line holding LIST, JOIN, CONFIRM, OBSERVE or UNOBSERVE:
    each is done and answered; None when it holds none of them."""
    actions = [a for a in ctx.commands.actions if open_word(a.word)]
    if not actions:
        return _open_problems(ctx)
    address = usable_sender(ctx)
    if address is None:
        log.info("inbound %d: %s from an unclear address: not done", ctx.row.id, actions[0].word)
        return InboundStatus.REJECTED, "sign-up commands from an unclear From address"
    done, touched = [], False
    for action in actions:
        if action.word == "LIST":
            done.append(_run(ctx, action, address, None))
        elif touched:  # one game per message: each locks its game (no two messages can
            done.append(f"{action.word}: not done (one per message)")  # wait on each other)
        else:
            touched = True
            done.append(_run(ctx, action, address, None))
    if ctx.commands.help:
        guest_help(ctx, None)
        done.append("help sent")
    return InboundStatus.PROCESSED, "; ".join(done)


def _run(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    """The registry's ``run`` of an open word (see the module's docstring)."""
    command = lookup(action.word)
    assert command is not None and command.run is not None, action.word
    result: str = command.run(ctx, action, address, player)
    return result


def _open_problems(ctx: Context) -> tuple[str, str] | None:
    """A keyless message whose only commands are misspelt sign-up lines ("JOIN" alone,
    "CONFIRM k7mq x2pa"): the reasons go back (not the lines: never echo a stranger)."""
    reasons = [
        p.reason
        for p in ctx.commands.problems
        if open_word(p.line.split(maxsplit=1)[0].rstrip(":"))
    ]
    address = usable_sender(ctx)
    if not reasons or address is None or ctx.commands.has_orders:
        return None
    guest_reply(
        ctx,
        None,
        address,
        tr(
            "Nothing in your message was carried out: {reasons}.", reasons=joined(tr("; "), reasons)
        ),
    )
    return InboundStatus.REJECTED, "sign-up line not understood"


def run_in_keyed(ctx: Context, game: Game, player: Player, action: Action) -> str | None:
    """An open word in a player's keyed message (``commands.player.handle_keyed``): done
    for the game its key locked (LIST, or the word naming that game or none), refused for
    another; None for CONFIRM (``confirm_address`` reads it)."""
    if action.word == "CONFIRM":
        return None
    target = action.args[0] if action.args else game.name
    if target == game.name:  # the game this message's key locked: no other
        return _run(ctx, action, player.email.lower(), player)
    player_reply(
        ctx,
        game,
        player,
        tr(
            "{word} {game} was not carried out: send it in a message of its own, without your "
            "GAME and KEY lines.",
            word=action.word,
            game=target,
        ),
    )
    return f"{action.word} {target}: not done (another game)"


def confirm_address(ctx: Context, game: Game, player: Player) -> str | None:
    """CONFIRM with the player's key, from the new address of an ADDRESS change: the move
    is made (and the old address told). None when the message has no CONFIRM."""
    confirms = [a for a in ctx.commands.actions if a.word == "CONFIRM"]
    address = usable_sender(ctx)
    if not confirms or address is None:
        return None
    if not codes.has_open(ctx.session, address, ctx.now, Purpose.ADDRESS):
        # no address move waits here: a sign-up or observer code sent with GAME and KEY out
        # of habit; only for this message's game (it holds that game's lock, no other)
        return _confirm(ctx, address, confirms[0].args[0], game)
    vouched = verified_sender(ctx)  # checked even while resting: no forger wrote it
    rest = (
        None
        if vouched
        else codes.resting(ctx.session, address, ctx.now, purposes=(Purpose.ADDRESS,))
    )
    found = codes.check_code(
        ctx.session,
        address,
        confirms[0].args[0],
        ctx.now,
        purposes=(Purpose.ADDRESS,),
        vouched=vouched,
    )
    if found is None or found.confirmation.payload.get("player_id") != player.id:
        player_reply(
            ctx,
            game,
            player,
            resting_text(*rest)
            if found is None and rest is not None
            else tr(
                "That code is not right, has expired, or is not for this address. Send "
                "ADDRESS again to get a new one."
            ),
        )
        return "address code refused" + (" (codes resting)" if rest and found is None else "")
    old = players.move_address(ctx.session, ctx.config, game, player, address, ctx.now)
    player_reply(
        ctx,
        game,
        player,
        tr(
            "Your mail for {game} now comes to this address, {address}. Your order key is "
            "unchanged. Your old address ({old}) has been told.",
            game=game.name,
            address=address,
            old=old,
        ),
    )
    return f"address moved to {address}"


# -- what each does -------------------------------------------------------------------


def run_list(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    """LIST: the games here one can join or follow."""
    if guest_budget(ctx, address, MailKind.LIST):
        send(
            ctx,
            None,
            address,
            MailKind.LIST,
            "player/list.txt.j2",
            games=views.listed_games(ctx.session, ctx.config),
        )
        return "list sent"
    return "list not sent (budget)"


def run_confirm(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    """CONFIRM of a sign-up or observer code."""
    return _confirm(ctx, address, action.args[0])


def run_join(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    """JOIN spring26 Ann: a code to the address, or why none goes."""
    game = _asked_game(ctx, action, address)
    if isinstance(game, str):
        return game
    name, asked = joined_as(action.args[1] if len(action.args) > 1 else "")
    # every answer in the language asked for (JOIN ... LANGUAGE th, or a LANGUAGE line),
    # else the one the message is written in: a refusal too
    language = asked or asked_language(ctx.commands.actions) or ctx.written_in
    if not name:
        guest_reply(
            ctx,
            game,
            address,
            tr(
                "Write your name after the game: JOIN {game} Ann Lee (the name others see in "
                "the reports).",
                game=game.name,
            ),
            language=language,
        )
        return "join: no name"
    refusal = signup.join_refusal(ctx.session, ctx.config, game, address, name, ctx.now)
    if refusal is not None:
        guest_reply(
            ctx,
            game,
            address,
            refusal,
            tr("Send LIST for the games you can join."),
            language=language,
        )
        return f"join refused: {refusal}"
    return send_code(ctx, game, address, Purpose.JOIN, name, language)


def joined_as(text: str) -> tuple[str, str | None]:
    """The name of a JOIN line, and the language it asks for at its end, if any: ``Ann
    Lee LANGUAGE th`` is Ann Lee in Thai (a name ending in "language" and a word that is
    no language stays whole)."""
    words = text.split()
    if len(words) >= 2 and words[-2].casefold() in ("language", "lang"):
        code = language(words[-1])
        if code is not None:
            return " ".join(words[:-2]), code
    return text, None


def run_observe(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    """OBSERVE spring26: a code to the address, or why none goes."""
    game = _asked_game(ctx, action, address)
    if isinstance(game, str):
        return game
    if game.state == GamePhase.OVER:
        guest_reply(
            ctx, game, address, tr("{game} is over: there is nothing to follow.", game=game.name)
        )
        return "observe: game over"
    current = observers.observing(ctx.session, game, address)
    if current is not None and current.active:
        guest_reply(ctx, game, address, tr("You already follow {game}.", game=game.name))
        return "observe: already"
    refusal = observers.observe_refusal(ctx.session, game)
    if refusal is not None:
        guest_reply(ctx, game, address, refusal)
        return "observe: refused (full)"
    language = asked_language(ctx.commands.actions) or ctx.written_in
    return send_code(ctx, game, address, Purpose.OBSERVE, "", language)


def run_unobserve(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    """UNOBSERVE spring26: answered only to an address that was observing (no
    backscatter)."""
    game = _asked_game(ctx, action, address)
    if isinstance(game, str):
        return game
    if observers.unobserve(ctx.session, game, address, ctx.now):
        guest_reply(
            ctx,
            game,
            address,
            tr(
                "You no longer get {game}'s reports. Send OBSERVE {game} to follow it again.",
                game=game.name,
            ),
        )
        return "unobserved"
    return "unobserve: was not observing"


def _asked_game(ctx: Context, action: Action, address: str) -> Game | str:
    """The game a JOIN, OBSERVE or UNOBSERVE names (or the message's GAME line), locked
    before anything is written for it, as intake does; else the note of the answer that
    says there is none."""
    game_name = action.args[0] if action.args else ctx.commands.game
    game = _game(ctx, game_name)
    if game is None:
        guest_reply(
            ctx,
            None,
            address,
            tr("There is no game {game} on this server.", game=repr(game_name))
            if game_name
            else tr(
                "Which game? Write {word} and the game's id, e.g. {word} spring26.",
                word=action.word,
            ),
            tr("Send LIST for the games you can join or follow."),
        )
        return f"{action.word}: unknown game {game_name!r}"
    ctx.session.refresh(game, with_for_update=True)
    return game


def _confirm(ctx: Context, address: str, code: str, locked: Game | None = None) -> str:
    """CONFIRM of a sign-up or observer code (``locked``: only one for that game, whose row
    the caller holds locked). A CONFIRM our MTA vouches for (``verified_sender``) is
    checked against every open code, resting or not: wrong codes forged in the owner's
    name can slow only what could be forged. A code that seats (or lists) voids the
    address's other JOIN codes for that game (``codes.void_other_joins``)."""
    purposes = (Purpose.JOIN, Purpose.OBSERVE)
    vouched = verified_sender(ctx)
    rest = (
        None
        if vouched
        else codes.resting(  # before the check: codes resting now are not checked
            ctx.session,
            address,
            ctx.now,
            purposes=purposes,
            game_id=locked.id if locked is not None else None,
        )
    )
    found = codes.check_code(
        ctx.session,
        address,
        code,
        ctx.now,
        purposes=purposes,
        game_id=locked.id if locked is not None else None,
        vouched=vouched,
    )
    if found is None:
        if rest is not None:  # the owner's right code may be among those not checked
            note(ctx, rest[0], address, "code-resting", resting_text(*rest))
            return "confirm: not checked (codes resting)"
        text = tr(
            "That code is not right or has expired. A code works once, only from the address "
            "it was sent to, for a few days."
        )
        again = tr("Ask again (JOIN or OBSERVE) for a new one.")
        # two answers an hour at most: a forger's wrong codes cannot silence the owner's
        any(note(ctx, None, address, about, text, again) for about in ("code-wrong", "re-wrong"))
        return "confirm: wrong or expired code"
    game, confirmation = found.game, found.confirmation
    ctx.session.refresh(game, with_for_update=True)  # as a round close locks it
    joiner = confirmation.payload.get("language")
    joiner = joiner if joiner in LANGUAGES else None
    if confirmation.purpose == Purpose.OBSERVE:
        observers.observe(ctx.session, game, address, ctx.now, joiner)
        guest_reply(
            ctx,
            game,
            address,
            tr(
                "You now follow {title}: each round's report (the positions, nothing secret) "
                "will come to this address.",
                title=game.title or game.name,
            ),
            tr("Send UNOBSERVE {game} to stop.", game=game.name),
            language=joiner,
        )
        return "observing"
    name = str(confirmation.payload.get("name", ""))

    def tell(outcome: signup.JoinOutcome) -> None:  # before the welcome, if it starts
        send(
            ctx,
            game,
            address,
            MailKind.MEMBERSHIP,
            "player/signup.txt.j2",
            name=name,
            outcome=str(outcome.state),
            started=outcome.started,
            language=joiner,
        )

    try:
        outcome = signup.complete_join(
            ctx.session,
            ctx.config,
            game,
            name,
            address,
            ctx.now,
            tell,
            language=joiner,
        )
    except LifecycleError as exc:
        guest_reply(
            ctx, game, address, said(exc), tr("Send LIST for the games you can join."), joiner
        )
        return f"join refused: {exc}"
    codes.void_other_joins(ctx.session, game, address, ctx.now)
    if not outcome.started:
        return f"joined {game.name} as {name}: {outcome.state}"
    ctx.started.add(game.name)  # serve plans round 1's deadline at once
    return f"joined {game.name} as {name}: {outcome.state}; the game started"


def _game(ctx: Context, game_name: str | None) -> Game | None:
    if not game_name:
        return None
    return ctx.session.scalar(select(Game).where(Game.name == game_name.lower()))


for word, run, help_line in (
    ("LIST", run_list, tr("LIST               the games here you can join or follow")),
    ("JOIN", run_join, tr('JOIN spring26 Ann  ask for a seat as "Ann" (we mail you a code)')),
    ("CONFIRM", run_confirm, tr("CONFIRM abcd-efgh  send the code back, from the same address")),
    ("OBSERVE", run_observe, tr("OBSERVE spring26   get each round's report without playing")),
    ("UNOBSERVE", run_unobserve, tr("UNOBSERVE spring26 stop getting them")),
):
    register(
        Command(
            word=word, who=Who.ANYONE, read=READERS[word], run=run, help=help_line, group="signup"
        )
    )
