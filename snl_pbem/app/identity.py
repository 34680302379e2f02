"""Who is who: names unique by their skeleton, addresses by their mailbox.

Nobody may take two seats, nor pass for another player: names are unique by their
skeleton (``name_skeleton``: punctuation, case and look-alike digits do not make a new
name), and addresses by their mailbox (``mailbox``: ``ann+2@example.org`` is
``ann@example.org``).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from snl_pbem.config import Config
from snl_pbem.rules.words import tr
from snl_pbem.store import (
    Game,
    Player,
    Signup,
)
from snl_pbem.store.states import SignupState

MAX_NAME = 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 .'_-]*$")
_LOOK_ALIKE = str.maketrans("0123456789", "olzeasbtbg")
RESERVED_NAMES = ("referee", "standby", "you")


def name_skeleton(name: str) -> str:
    """What a name looks like in a report, for uniqueness: case-folded, look-alike digits
    read as the letters they resemble (0 o, 1 l, 2 z, 3 e, 4 a, 5 s, 6 b, 7 t, 8 b, 9 g),
    everything but letters dropped (spaces, dots, hyphens, apostrophes), and the pairs a
    reader mixes up made one (rn m, vv w, i l). So 'Dee.', 'D3e', 'De e' and 'DEE' are
    all 'Dee', and 'Bi11' is 'Bill'. It refuses a few honest names too ('Li' beside
    'Ll'): a second name is cheap, a player passing for another is not."""
    letters = "".join(ch for ch in name.casefold().translate(_LOOK_ALIKE) if "a" <= ch <= "z")
    return letters.replace("rn", "m").replace("vv", "w").replace("i", "l")


def _name_problem(session: Session, game: Game, name: str) -> str | None:
    """Why ``name`` cannot be a joiner's name. Names chosen by mail are plain ASCII letters,
    digits, spaces and . ' _ - (no look-alike letters from other scripts, so nobody can
    pass for another player in the reports), at most MAX_NAME long (the reports' columns),
    and unique in the game by their skeleton (``name_skeleton``), among seats and the
    sign-ups waiting or on standby. A sentence, for the joiner."""
    if not name or len(name) > MAX_NAME or not _NAME.match(name) or "  " in name:
        return tr(
            "A name is 1 to {most} plain letters (A to Z), digits, spaces, dots, hyphens or "
            "apostrophes, e.g. JOIN spring26 Ann Lee.",
            most=MAX_NAME,
        )
    skeleton = name_skeleton(name)
    if skeleton in {name_skeleton(reserved) for reserved in RESERVED_NAMES}:
        return tr("{name} cannot be a player's name here: choose another.", name=repr(name))
    names = list(session.scalars(select(Player.name).where(Player.game_id == game.id))) + list(
        session.scalars(
            select(Signup.name).where(
                Signup.game_id == game.id,
                Signup.state.in_((SignupState.WAITING, SignupState.STANDBY)),
            )
        )
    )
    for taken in names:
        if taken.lower() == name.lower():
            return tr(
                "The name {name} is taken in {game}: choose another.",
                name=repr(name),
                game=game.name,
            )
        if name_skeleton(taken) == skeleton:
            return tr(
                "The name {name} looks too like one taken in {game} (names must differ in "
                "their letters, not only in case, spaces, punctuation or digits that look "
                "like letters): choose another.",
                name=repr(name),
                game=game.name,
            )
    return None


GMAIL_DOMAINS = ("gmail.com", "googlemail.com")
NO_PERSON = frozenset(("mailerdaemon", "postmaster", "noreply", "donotreply", "nobody"))
"""Local parts (without + tag, dots, hyphens or underscores) of addresses no person reads
mail at: a code sent there is backscatter, or mail to a robot that may answer it."""


def mailbox(address: str) -> str:
    """The mailbox ``address`` delivers to, for one seat per person: lower case, without a
    ``+tag`` (``ann+2@example.org`` is ``ann@example.org``: nearly every provider delivers
    it so), and at Gmail without dots (``a.nn@gmail.com`` is ``ann@gmail.com``, as Gmail
    documents; googlemail.com is gmail.com). Elsewhere dots are kept: a provider may give
    ``a.nn`` and ``ann`` to two people, and we cannot know which do. Used to compare, never
    to send: mail goes to the address as written."""
    local, _, domain = address.lower().rpartition("@")
    local = local.split("+", 1)[0] or local
    if domain in GMAIL_DOMAINS:
        local, domain = local.replace(".", "") or local, GMAIL_DOMAINS[0]
    return f"{local}@{domain}"


def no_person(address: str) -> bool:
    """Whether ``address`` is a robot's (mailer-daemon@, postmaster@, noreply@...)."""
    local = address.lower().rpartition("@")[0].split("+", 1)[0]
    return re.sub(r"[-._]", "", local) in NO_PERSON


def same_domain(column: Any, address: str) -> Any:
    """A filter for the addresses that may share ``address``'s mailbox (its domain's)."""
    domain = address.lower().rpartition("@")[2]
    domains = GMAIL_DOMAINS if domain in GMAIL_DOMAINS else (domain,)
    return or_(*(func.lower(column).endswith("@" + d, autoescape=True) for d in domains))


def _address_taken(session: Session, game: Game, address: str) -> str | None:
    """Why ``address`` cannot sign up for ``game``: its mailbox (``mailbox``) holds a
    seat, or has signed up already, under this or another form of the address. A
    sentence, for the joiner."""
    box = mailbox(address)
    for player in session.scalars(
        select(Player).where(
            Player.game_id == game.id, Player.active, same_domain(Player.email, address)
        )
    ):
        if player.email.lower() == address.lower():
            return tr(
                "{address} already plays in {game} (as {name}).",
                address=address,
                game=game.name,
                name=player.name,
            )
        if mailbox(player.email) == box:
            return tr(
                "{address} is another form of an address that already plays in {game} (as "
                "{name}): one seat per mailbox.",
                address=address,
                game=game.name,
                name=player.name,
            )
    for waiting in session.scalars(
        select(Signup).where(
            Signup.game_id == game.id,
            Signup.state.in_((SignupState.WAITING, SignupState.STANDBY)),
            same_domain(Signup.email, address),
        )
    ):
        if mailbox(waiting.email) != box:
            continue
        standby = waiting.state == SignupState.STANDBY
        if waiting.email.lower() == address.lower():
            return (
                tr(
                    "{address} has already signed up for {game} ({name}, on the standby list).",
                    address=address,
                    game=game.name,
                    name=waiting.name,
                )
                if standby
                else tr(
                    "{address} has already signed up for {game} ({name}, on the referee's list).",
                    address=address,
                    game=game.name,
                    name=waiting.name,
                )
            )
        return (
            tr(
                "{address} is another form of an address that has signed up for {game} "
                "({name}, on the standby list): one seat per mailbox.",
                address=address,
                game=game.name,
                name=waiting.name,
            )
            if standby
            else tr(
                "{address} is another form of an address that has signed up for {game} "
                "({name}, on the referee's list): one seat per mailbox.",
                address=address,
                game=game.name,
                name=waiting.name,
            )
        )
    return None


def own_address(config: Config, address: str) -> bool:
    """Whether ``address`` is one of the game's own (``+tag`` forms too: the server's
    mailbox gets them, and would read its own mail as orders or loop)."""
    own = (config.settings.mail.address, config.settings.mail.referee)
    return mailbox(address) in {mailbox(a) for a in own}
