"""The answers of the life-cycle commands (commands/signup.py and commands/player.py):
codes for JOIN and OBSERVE, the reminder that one waits, and the notes and answers to an
address without a key, on the guests' budgets (``replies.GUEST_LIMITS``); the answers to
a player, to their registered address. Shared by both groups, so here.

A flood starves no one: whatever a forger sends in an honest address's name lands in that
address's own mailbox, so the answers that matter to its owner (a code is pending, too
many codes today, a wrong code, codes resting, try again in an hour) are notes sent at
most once an hour each (``note``), which no other answer uses up.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from snl_pbem.app import codes, observers, signup
from snl_pbem.app.lookup import game_time
from snl_pbem.app.replies import (
    Context,
    guest_budget,
    guest_limit,
    reply,
    send,
    subject,
    verified_sender,
)
from snl_pbem.rules.words import tr
from snl_pbem.store import Confirmation, Game, Player
from snl_pbem.store.states import MailKind, Purpose

log = logging.getLogger("snl_pbem.intake")

NOTE_EVERY = timedelta(hours=1)
"""Each kind of note goes to one address at most this often (``note``)."""


def send_code(
    ctx: Context, game: Game, address: str, purpose: str, name: str, language: str | None = None
) -> str:
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
        return remind(ctx, game, address, purpose, same, language=language)
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
                note(ctx, game, address, f"signups-full {game.name}", refusal, language=language)
                return "join: no code sent (the game's sign-ups for the hour)"
    limit = None if refused else guest_limit(ctx, address, MailKind.CODE)
    if limit == "address":
        refused = (
            "budget: address",
            tr(
                "You asked for too many codes today; try again tomorrow. Codes already sent "
                "to this address still work."
            ),
        )
        if waiting is None:
            note(ctx, game, address, "codes-over-budget", refused[1], language=language)
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
            tr(
                "Many requests came from addresses at {domain} in the last hour, more than "
                "we answer at once: please send your {word} again in an hour.",
                domain=domain,
                word=word,
            )
            if limit == "domain"
            else tr(
                "We have sent as many codes as we may in the last hour: please send your "
                "{word} again in an hour.",
                word=word,
            ),
        )
        if waiting is None:
            note(ctx, game, address, "codes-busy", refused[1], language=language)
            return f"{purpose}: no code sent (budget: {limit})"
    if refused is not None:
        assert waiting is not None
        remind(ctx, game, address, purpose, waiting, refused[1], language=language)
        return f"{purpose}: no code sent ({refused[0]}); reminded of the code waiting"
    if purpose == Purpose.JOIN:
        code = signup.request_join(ctx.session, game, address, name, ctx.now, vouched, language)
    else:
        code = observers.request_observe(ctx.session, game, address, ctx.now, vouched, language)
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
        **({"language": language} if language else {}),
    )
    return f"{purpose}: code sent" + (" (another waits)" if waiting is not None else "")


def remind(
    ctx: Context,
    game: Game,
    address: str,
    purpose: str,
    pending: Confirmation,
    refused: str = "",
    language: str | None = None,
) -> str:
    """A note that a code waits (at most once an hour): for a JOIN or OBSERVE repeated
    while its code waits (no new code: it cannot be sent again, being kept only hashed,
    so the note says where to find it), or for a JOIN under another name when no code
    could go (``refused``: why)."""
    wanted = str(pending.payload.get("name", ""))
    sent, until = game_time(game, pending.created_at), game_time(game, pending.expires_at)
    if purpose == Purpose.JOIN:
        waits = tr(
            "A code to join {game} as {name} was sent to this address on {sent} and works "
            'until {until}. Look for the message "[{game}] Your confirmation code" and send '
            "its CONFIRM line back from this address.",
            game=game.name,
            name=repr(wanted),
            sent=sent,
            until=until,
        )
    else:
        waits = tr(
            "A code to follow {game} was sent to this address on {sent} and works until "
            '{until}. Look for the message "[{game}] Your confirmation code" and send its '
            "CONFIRM line back from this address.",
            game=game.name,
            sent=sent,
            until=until,
        )
    told = note(
        ctx,
        game,
        address,
        f"code-pending {game.name}",
        tr("No code was sent for your new request: {reason} {waits}", reason=refused, waits=waits)
        if refused
        else tr("{waits} No new code is sent while it waits.", waits=waits),
        tr("If you did not ask for it, ignore it: nothing happens."),
        language,
    )
    return f"{purpose}: a code already waits (" + ("reminded)" if told else "reminded lately)")


def note(
    ctx: Context,
    game: Game | None,
    address: str,
    about: str,
    message: str,
    next: str = "",
    language: str | None = None,
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
    to_stranger(ctx, game, address, MailKind.GUEST_NOTE, message, next, language)
    return True


def resting_text(game: Game, until: datetime) -> str:
    return tr(
        "That code was not checked: too many wrong codes came from this address in the "
        "last hour, so its codes rest until {until}. If yours is right, send it again "
        "after that: it still works.",
        until=game_time(game, until),
    )


def guest_reply(
    ctx: Context,
    game: Game | None,
    address: str,
    message: str,
    next: str = "",
    language: str | None = None,
) -> None:
    if guest_budget(ctx, address, MailKind.GUEST_REPLY):
        to_stranger(ctx, game, address, MailKind.GUEST_REPLY, message, next, language)


def to_stranger(
    ctx: Context,
    game: Game | None,
    address: str,
    kind: str,
    message: str,
    next: str,
    language: str | None = None,
) -> None:
    """An answer about a request, to the address that asked (its budget already checked),
    in ``language`` (None: the one the request was written in, if clear, or the game's)."""
    send(
        ctx,
        game,
        address,
        kind,
        "player/membership.txt.j2",
        subject=subject(game, tr("About your request")),
        player=None,
        name=None,
        message=message,
        next=next,
        line_problems=[],  # never echo a stranger's lines to an address it named
        **({"language": language} if language else {}),
    )


def player_reply(ctx: Context, game: Game, player: Player, message: str, next: str = "") -> None:
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
