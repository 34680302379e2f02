"""The player's life cycle by mail: LIST, JOIN, CONFIRM, OBSERVE and UNOBSERVE (no key
needed: the address proves itself with a code), and RESIGN, ABSENT, NEW KEY, ADDRESS
and HISTORY (with the player's key, like orders). What each does is in ``signup``,
``codes``, ``seats``, ``players`` and ``observers``; here is who may ask, and the answer.

Answers to mail without a key go to the From address (the only one that can have asked)
on the guests' budgets (``replies.GUEST_LIMITS``): a few a day to one address, a bound
per domain for codes, a bound for all of them together; a code is mailed only to the
address it must come back from. Answers to a player go to their registered address, never
elsewhere.

A flood starves no one: whatever a forger sends in an honest address's name lands in that
address's own mailbox, so the answers that matter to its owner (a code is pending, too
many codes today, a wrong code, codes resting, try again in an hour) are notes sent at
most once an hour each (``_note``), which no other answer uses up: the owner's next
request in a new hour is answered again, never met with silence. A repeated JOIN or
OBSERVE for a game whose code still waits sends no new code (and cannot void the one
waiting): it reminds. A JOIN under another name gets a code of its own; the first used
voids the others.

A sender our MTA vouches for (``replies.verified_sender``: DKIM or DMARC aligned with
the From domain) cannot be forged, so it meets only its own address's budget, counted
by its own signed requests, and its CONFIRM is checked even while its code rests.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from sqlalchemy import select

from snl_pbem.app import codes, observers, players, seats, signup, views
from snl_pbem.app.lookup import game_time
from snl_pbem.app.replies import (
    Context,
    guest_budget,
    guest_help,
    guest_limit,
    reply,
    send,
    subject,
    verified_sender,
)
from snl_pbem.config import address_problem
from snl_pbem.errors import LifecycleError
from snl_pbem.mail.commands import Action
from snl_pbem.store import Confirmation, Game, Player
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind, Purpose
from snl_pbem.timeutil import zone

log = logging.getLogger("snl_pbem.intake")

OPEN_WORDS = frozenset(("LIST", "JOIN", "CONFIRM", "OBSERVE", "UNOBSERVE"))
"""Commands anyone may send, without a key."""
KEYED_WORDS = frozenset(("RESIGN", "ABSENT", "NEW KEY", "ADDRESS", "HISTORY"))
"""Commands of a player, with GAME and KEY like orders."""
NOTE_EVERY = timedelta(hours=1)
"""Each kind of note goes to one address at most this often (``_note``)."""
STARTED = "the game started"
"""Ends the intake's note of a CONFIRM whose seat filled the game (starts = "when_full"):
``serve`` then plans round 1's deadline at once instead of at its next rescan."""


def usable_sender(ctx: Context) -> str | None:
    """The From address to answer and to bind codes to; None when it is not plainly one."""
    sender = ctx.mail.sender
    if sender is None or ctx.mail.sender_doubt or address_problem(sender):
        return None  # not plainly one address the server can send to (and seat, later)
    return sender.lower()


def handle_open(ctx: Context) -> tuple[str, str] | None:
    """A message without a KEY line holding LIST, JOIN, CONFIRM, OBSERVE or UNOBSERVE:
    each is done and answered; None when it holds none of them."""
    actions = [a for a in ctx.commands.actions if a.word in OPEN_WORDS]
    if not actions:
        return _open_problems(ctx)
    address = usable_sender(ctx)
    if address is None:
        log.info("inbound %d: %s from an unclear address: not done", ctx.row.id, actions[0].word)
        return InboundStatus.REJECTED, "sign-up commands from an unclear From address"
    done, touched = [], False
    for action in actions:
        if action.word == "LIST":
            done.append(_open_action(ctx, action, address, None))
        elif touched:  # one game per message: each locks its game (no two messages can
            done.append(f"{action.word}: not done (one per message)")  # wait on each other)
        else:
            touched = True
            done.append(_open_action(ctx, action, address, None))
    if ctx.commands.help:
        guest_help(ctx, None)
        done.append("help sent")
    return InboundStatus.PROCESSED, "; ".join(done)


def _open_problems(ctx: Context) -> tuple[str, str] | None:
    """A keyless message whose only commands are misspelt sign-up lines ("JOIN" alone,
    "CONFIRM k7mq x2pa"): the reasons go back (not the lines: never echo a stranger)."""
    reasons = [
        p.reason
        for p in ctx.commands.problems
        if p.line.split(maxsplit=1)[0].upper().rstrip(":") in OPEN_WORDS
    ]
    address = usable_sender(ctx)
    if not reasons or address is None or ctx.commands.has_orders:
        return None
    _guest_reply(ctx, None, address, "Your message was not done: " + "; ".join(reasons) + ".")
    return InboundStatus.REJECTED, "sign-up line not understood"


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
        if action.word in KEYED_WORDS:
            done.append(_keyed_action(ctx, game, player, action))
        elif action.word == "LIST":
            done.append(_open_action(ctx, action, player.email.lower(), player))
        elif action.word in ("OBSERVE", "UNOBSERVE", "JOIN"):
            target = action.args[0] if action.args else game.name
            if target == game.name:  # the game this message's key locked: no other
                done.append(_open_action(ctx, action, player.email.lower(), player))
            else:
                _player_reply(
                    ctx,
                    game,
                    player,
                    f"{action.word} {target} was not done: send it in a message of its own, "
                    "without your GAME and KEY lines.",
                )
                done.append(f"{action.word} {target}: not done (another game)")
    return done


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
        _player_reply(
            ctx,
            game,
            player,
            _resting_text(*rest)
            if found is None and rest is not None
            else "That code is not right, has expired, or is not for this address. Send "
            "ADDRESS again to get a new one.",
        )
        return "address code refused" + (" (codes resting)" if rest and found is None else "")
    old = players.move_address(ctx.session, ctx.config, game, player, address, ctx.now)
    _player_reply(
        ctx,
        game,
        player,
        f"Your mail for {game.name} now comes to this address, {address}. Your order key is "
        f"unchanged. Your old address ({old}) has been told.",
    )
    return f"address moved to {address}"


# -- commands anyone may send ---------------------------------------------------------


def _open_action(ctx: Context, action: Action, address: str, player: Player | None) -> str:
    if action.word == "LIST":
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
    game_id = action.args[0] if action.args else ctx.commands.game
    if action.word == "CONFIRM":
        return _confirm(ctx, address, action.args[0])
    game = _game(ctx, game_id)
    if game is None:
        _guest_reply(
            ctx,
            None,
            address,
            f"There is no game {game_id!r} on this server."
            if game_id
            else f"Which game? Write {action.word} and the game's id, e.g. {action.word} spring26.",
            "Send LIST for the games you can join or follow.",
        )
        return f"{action.word}: unknown game {game_id!r}"
    ctx.session.refresh(game, with_for_update=True)  # before writing for it, as intake does
    if action.word == "JOIN":
        return _join(ctx, game, address, action.args[1] if len(action.args) > 1 else "")
    if action.word == "OBSERVE":
        if game.state == GamePhase.OVER:
            _guest_reply(ctx, game, address, f"{game.name} is over: there is nothing to follow.")
            return "observe: game over"
        current = observers.observing(ctx.session, game, address)
        if current is not None and current.active:
            _guest_reply(ctx, game, address, f"You already follow {game.name}.")
            return "observe: already"
        refusal = observers.observe_refusal(ctx.session, game)
        if refusal is not None:
            _guest_reply(ctx, game, address, refusal)
            return "observe: refused (full)"
        return _send_code(ctx, game, address, Purpose.OBSERVE, "")
    # UNOBSERVE: answered only to an address that was observing (no backscatter)
    if observers.unobserve(ctx.session, game, address, ctx.now):
        _guest_reply(
            ctx,
            game,
            address,
            f"You no longer get {game.name}'s reports. Send OBSERVE {game.name} to follow it "
            "again.",
        )
        return "unobserved"
    return "unobserve: was not observing"


def _join(ctx: Context, game: Game, address: str, name: str) -> str:
    if not name:
        _guest_reply(
            ctx,
            game,
            address,
            f"Write your name after the game: JOIN {game.name} Ann Lee (the name others see "
            "in the reports).",
        )
        return "join: no name"
    refusal = signup.join_refusal(ctx.session, ctx.config, game, address, name, ctx.now)
    if refusal is not None:
        _guest_reply(ctx, game, address, refusal, "Send LIST for the games you can join.")
        return f"join refused: {refusal}"
    return _send_code(ctx, game, address, Purpose.JOIN, name)


def _send_code(ctx: Context, game: Game, address: str, purpose: str, name: str) -> str:
    """A code for a JOIN or OBSERVE, or the reason none goes: a code for this very request
    already waits at the address (a reminder, no new code: a forged repeat can neither
    void the code nor spend the address's codes), the game's sign-ups are full for the
    hour, or a budget holds (the address's, its domain's, all addresses'). A JOIN under
    another name than a code waiting there gets a code of its own (the waiting one stays
    good: it may be the owner's, or a forger's asked in her name, and the first used
    voids the others); when none can go, the reminder of the waiting one carries the
    reason. Never silence, except that each reason goes to one address at most once an
    hour. A sender our MTA vouches for (``verified_sender``) meets only its own budget:
    a flood of forgeries holds back only the senders it could be."""
    word = "JOIN" if purpose == Purpose.JOIN else "OBSERVE"
    vouched = verified_sender(ctx)
    same = codes.pending_code(
        ctx.session, game, address, ctx.now, purpose, name if purpose == Purpose.JOIN else None
    )
    if same is not None:
        return _remind(ctx, game, address, purpose, same)
    waiting = codes.pending_code(ctx.session, game, address, ctx.now, purpose)
    refused: tuple[str, str] | None = None  # (why, the reason told)
    if purpose == Purpose.JOIN and not vouched:
        refusal = signup.join_code_refusal(ctx.session, game, ctx.now)
        if refusal is not None:
            signup.flood_noticed(
                ctx.session,
                ctx.config,
                game,
                ctx.now,
                f"at most {signup.MAX_UNCONFIRMED_PER_GAME} sign-up codes an hour for one game",
            )
            refused = ("the game's sign-ups for the hour", refusal)
            if waiting is None:
                _note(ctx, game, address, f"signups-full {game.name}", refusal)
                return "join: no code sent (the game's sign-ups for the hour)"
    limit = None if refused else guest_limit(ctx, address, MailKind.CODE)
    if limit == "address":
        refused = (
            "budget: address",
            "You asked for too many codes today; try again tomorrow. Codes already sent to "
            "this address still work.",
        )
        if waiting is None:
            _note(ctx, game, address, "codes-over-budget", refused[1])
            return f"{purpose}: no code sent (budget: address)"
    elif limit is not None:
        domain = address.rpartition("@")[2]
        if limit != "all" or not vouched:
            signup.flood_noticed(
                ctx.session,
                ctx.config,
                game,
                ctx.now,
                f"codes to addresses at {domain}" if limit == "domain" else "codes in all",
            )
        refused = (
            f"budget: {limit}",
            f"Many requests came from addresses at {domain} in the last hour, more than "
            f"we answer at once: please send your {word} again in an hour."
            if limit == "domain"
            else "We have sent as many codes as we may in the last hour: please send your "
            f"{word} again in an hour.",
        )
        if waiting is None:
            _note(ctx, game, address, "codes-busy", refused[1])
            return f"{purpose}: no code sent (budget: {limit})"
    if refused is not None:
        assert waiting is not None
        _remind(ctx, game, address, purpose, waiting, refused[1])
        return f"{purpose}: no code sent ({refused[0]}); reminded of the code waiting"
    if purpose == Purpose.JOIN:
        code = signup.request_join(ctx.session, game, address, name, ctx.now, vouched)
    else:
        code = observers.request_observe(ctx.session, game, address, ctx.now, vouched)
    send(
        ctx,
        game,
        address,
        MailKind.CODE,
        "player/code.txt.j2",
        purpose=purpose,
        name=name,
        code=code,
        days=codes.CODE_LIFETIME.days,
        secret=True,  # the code is stored only hashed: the sent copy is scrubbed too
    )
    return f"{purpose}: code sent" + (" (another waits)" if waiting is not None else "")


def _remind(
    ctx: Context,
    game: Game,
    address: str,
    purpose: str,
    pending: Confirmation,
    refused: str = "",
) -> str:
    """A note that a code waits (at most once an hour): for a JOIN or OBSERVE repeated
    while its code waits (no new code: it cannot be sent again, being kept only hashed,
    so the note says where to find it), or for a JOIN under another name when no code
    could go (``refused``: why)."""
    wanted = str(pending.payload.get("name", ""))
    what = (
        f"to join {game.name} as {wanted!r}"
        if purpose == Purpose.JOIN
        else f"to follow {game.name}"
    )
    waits = (
        f"A code {what} was sent to this address on {game_time(game, pending.created_at)} "
        f"and works until {game_time(game, pending.expires_at)}. Look for the message "
        f'"[{game.name}] Your confirmation code" and send its CONFIRM line back from this '
        "address."
    )
    told = _note(
        ctx,
        game,
        address,
        f"code-pending {game.name}",
        f"No code was sent for your new request: {refused} {waits}"
        if refused
        else f"{waits} No new code is sent while it waits.",
        "If you did not ask for it, ignore it: nothing happens.",
    )
    return f"{purpose}: a code already waits (" + ("reminded)" if told else "reminded lately)")


def _note(
    ctx: Context, game: Game | None, address: str, about: str, message: str, next: str = ""
) -> bool:
    """A note to the address that asked, ``about`` one thing (a code pending, too many
    codes...), at most once per NOTE_EVERY each, within the notes' own budget and the
    bound on all mail to non-players: never counted against the address's answers of the
    day, so a forger's flood in its name cannot silence them. True when sent."""
    if guest_limit(ctx, address, MailKind.GUEST_NOTE) is not None:
        return False
    if codes.noted(ctx.session, address, about, ctx.now, NOTE_EVERY):
        log.info("inbound %d: note %r sent to %s lately", ctx.row.id, about, address)
        return False
    _to_stranger(ctx, game, address, MailKind.GUEST_NOTE, message, next)
    return True


def _resting_text(game: Game, until: datetime) -> str:
    return (
        "That code was not checked: too many wrong codes came from this address in the "
        f"last hour, so its codes rest until {game_time(game, until)}. If yours is right, "
        "send it again after that: it still works."
    )


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
            _note(ctx, rest[0], address, "code-resting", _resting_text(*rest))
            return "confirm: not checked (codes resting)"
        text = (
            "That code is not right or has expired. A code works once, only from the address "
            "it was sent to, for a few days."
        )
        again = "Ask again (JOIN or OBSERVE) for a new one."
        # two answers an hour at most: a forger's wrong codes cannot silence the owner's
        any(_note(ctx, None, address, about, text, again) for about in ("code-wrong", "re-wrong"))
        return "confirm: wrong or expired code"
    game, confirmation = found.game, found.confirmation
    ctx.session.refresh(game, with_for_update=True)  # as a round close locks it
    if confirmation.purpose == Purpose.OBSERVE:
        observers.observe(ctx.session, game, address, ctx.now)
        _guest_reply(
            ctx,
            game,
            address,
            f"You now follow {game.title or game.name}: each round's report (the positions, "
            "nothing secret) will come to this address.",
            f"Send UNOBSERVE {game.name} to stop.",
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
        )

    try:
        outcome = signup.complete_join(ctx.session, ctx.config, game, name, address, ctx.now, tell)
    except LifecycleError as exc:
        _guest_reply(ctx, game, address, str(exc), "Send LIST for the games you can join.")
        return f"join refused: {exc}"
    codes.void_other_joins(ctx.session, game, address, ctx.now)
    started = f"; {STARTED}" if outcome.started else ""
    return f"joined {game.name} as {name}: {outcome.state}{started}"


def _guest_reply(
    ctx: Context, game: Game | None, address: str, message: str, next: str = ""
) -> None:
    if guest_budget(ctx, address, MailKind.GUEST_REPLY):
        _to_stranger(ctx, game, address, MailKind.GUEST_REPLY, message, next)


def _to_stranger(
    ctx: Context, game: Game | None, address: str, kind: str, message: str, next: str
) -> None:
    """An answer about a request, to the address that asked (its budget already checked)."""
    send(
        ctx,
        game,
        address,
        kind,
        "player/membership.txt.j2",
        subject=subject(game, "About your request"),
        player=None,
        name=None,
        message=message,
        next=next,
        line_problems=[],  # never echo a stranger's lines to an address it named
    )


def _game(ctx: Context, game_id: str | None) -> Game | None:
    if not game_id:
        return None
    return ctx.session.scalar(select(Game).where(Game.name == game_id.lower()))


# -- a player's commands ----------------------------------------------------------------


def _keyed_action(ctx: Context, game: Game, player: Player, action: Action) -> str:
    session, config, now = ctx.session, ctx.config, ctx.now
    if action.word == "HISTORY":
        reply(
            ctx,
            game,
            player,
            MailKind.MEMBERSHIP,
            "player/history.txt.j2",
            rounds=views.standings_by_round(session, game),
        )
        return "history sent"
    if action.word == "NEW KEY":
        refusal = players.new_key_refusal(session, game, player, now)
        if refusal is not None:
            _player_reply(ctx, game, player, refusal)
            return "new key refused"
        order_key = players.new_key(session, game, player, now)
        send(  # always sent (not held by the replies' budget): the old key has stopped
            ctx,
            game,
            player.email,
            MailKind.MEMBERSHIP,
            "player/new_key.txt.j2",
            subject=subject(game, "Your new order key"),
            player=player,
            order_key=order_key,
            secret=True,  # scrubbed once sent, like a welcome
        )
        return "new key sent"
    if action.word == "RESIGN":
        named = action.args[0] if action.args else None
        if named is not None and named != game.name:
            _player_reply(
                ctx,
                game,
                player,
                f"Your RESIGN line names {named}, but your key is for {game.name}: nothing "
                "changed.",
            )
            return "resign: another game named"
        refusal = seats.resign_refusal(config, game, player)
        if refusal is not None:
            _player_reply(ctx, game, player, refusal)
            return "resign refused"
        forming = game.state == GamePhase.NEW
        if seats.resign(session, config, game, player, now, named, ctx.row.id):
            if forming:
                _player_reply(
                    ctx,
                    game,
                    player,
                    f"You have left {game.title or game.name} before it started: your seat "
                    "is free for someone else. Send LIST to see other games.",
                )
                return "left before the start"
            _player_reply(
                ctx,
                game,
                player,
                f"You have resigned from {game.title or game.name}. Your key no longer works "
                "and you will get no more mail about this game. Your seat plays on by the "
                "no-orders default until the referee gives it to someone. Thanks for playing.",
            )
            return "resigned"
        _player_reply(
            ctx,
            game,
            player,
            f"To resign from {game.name}, send one more message within "
            f"{seats.RESIGN_LIFETIME.days} days with these lines (nothing changes until "
            "then):",
            f"GAME {game.name}\nKEY (your order key)\nRESIGN {game.name}",
        )
        return "resign: confirmation asked"
    if action.word == "ABSENT":
        try:
            until = _absent_until(game, action.args) if action.args[0] == "until" else None
            message = players.absent(session, config, game, player, until, now)
        except (LifecycleError, ValueError) as exc:
            _player_reply(ctx, game, player, f"{exc} Nothing changed.")
            return f"absent refused: {exc}"
        _player_reply(ctx, game, player, message)
        return "absent" if until else "absent off"
    # ADDRESS
    new = action.args[0]
    refusal = players.address_refusal(session, config, game, player, new)
    if refusal is not None:
        _player_reply(ctx, game, player, f"{refusal} Nothing changed.")
        return f"address refused: {refusal}"
    refusal = players.address_code_refusal(session, game, player, now)
    if refusal is not None:
        _player_reply(ctx, game, player, refusal)
        return "address: no code sent (the player's or the game's codes for the day)"
    if not guest_budget(ctx, new, MailKind.ADDRESS_CODE):
        _player_reply(
            ctx, game, player, f"Too many codes went to {new} lately; try again tomorrow."
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
    _player_reply(
        ctx,
        game,
        player,
        f"We mailed a code to {new}. Your mail moves there once you send the code back from "
        "that address, with your order key. Until then nothing changes.",
    )
    return "address: code sent"


_WHEN = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ tT](\d{1,2}):(\d{2}))?$")


def _absent_until(game: Game, args: tuple[str, ...]) -> datetime:
    """ABSENT UNTIL 2026-12-24 (to the end of that day, 23:59 in the game's zone) or
    ABSENT UNTIL 2026-12-24 18:00; a month or day may have one digit."""
    text = args[1].strip()
    found = _WHEN.match(text)
    wrong = f"{text!r} is not a date to come (write it year first: 2026-12-24)."
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


def _player_reply(ctx: Context, game: Game, player: Player, message: str, next: str = "") -> None:
    reply(
        ctx,
        game,
        player,
        MailKind.MEMBERSHIP,
        "player/membership.txt.j2",
        name=None,
        message=message,
        next=next,
        line_problems=[],
    )
