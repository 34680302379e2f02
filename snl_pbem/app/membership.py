"""Who plays: sign-ups, standby, resignations, replacements, absences, keys, addresses
and observers; and starting a game that takes sign-ups.

Everything here works in the caller's session (the intake's transaction for mail, one
of its own for the command line and the scheduler), after the caller has locked the
game row: a sign-up and a round close of the same game are never interleaved.

Addresses are always confirmed before they are used: a JOIN, an OBSERVE or an ADDRESS
change mails a code to the address, and only a message from that address carrying the
code completes it (so nobody can sign up or move someone else). Codes are stored as
salted hashes, used once, and expire; wrong tries are slowed, never voiding (a forger
writing in someone's name must not be able to spoil the code they wait for). A
resignation is confirmed by a second message naming the game.

Nobody may take two seats, nor pass for another player: names are unique by their
skeleton (``name_skeleton``: punctuation, case and look-alike digits do not make a new
name), and addresses by their mailbox (``mailbox``: ``ann+2@example.org`` is
``ann@example.org``).

A seat is a Player row: its name carries its position and its dice history, so giving
the seat to someone else (``replace_seat``) changes only the address and the key.
"""

from __future__ import annotations

import logging
import re
import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from snl_pbem.app.games import (
    audit,
    game_by_id,
    game_time,
    open_round,
    ruleset_of,
    start_in,
)
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.config import Config, GameConfig, address_problem
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.keys import ALPHABET, generate_key, hash_key
from snl_pbem.rules.words import agree, counted
from snl_pbem.store import (
    AuditEntry,
    Confirmation,
    Database,
    Game,
    Observer,
    Player,
    Round,
    Signup,
    TurnRecord,
)
from snl_pbem.store.states import GamePhase, MailKind, ManagedBy, Purpose, SignupState

log = logging.getLogger("snl_pbem.membership")

CODE_LIFETIME = timedelta(days=3)
CODE_TRIES_PER_HOUR = 100
"""Wrong codes counted against one open code in an hour (one per message). Past them the
code rests: codes from its address are not checked against it (and do not count) until
the hour since the first of those tries has passed; it is never void. So a forger who
wants to keep the owner's right code from being checked must send a hundred wrong ones
in her name every hour (2,400 a day, which the referee sees), and a message that our
MTA's DKIM or DMARC result vouches for (``replies.verified_sender``) is checked even
while the code rests: a forger cannot write one. The arithmetic: a code is 8 characters
of a 31-letter alphabet, 31**8 = 8.5e11 (39.6 bits); at 100 tries an hour for the 72
hours it lives, 7,200 tries find it with a chance of 7,200 / 8.5e11, about 8.5 in a
billion; and the guesses must come from the very address the code went to."""
CODE_TRY_WINDOW = timedelta(hours=1)
MAX_UNCONFIRMED_PER_GAME = 20
"""Sign-up codes one game sends in SIGNUP_WINDOW, at most. Past it a JOIN is refused
with a reason (try again later) and the referee is told; codes already sent stay good
(a flood of sign-ups nobody confirms must neither void the honest ones waiting nor keep
the game shut for the codes' three days)."""
SIGNUP_WINDOW = timedelta(hours=1)
ADDRESS_CODES_PER_PLAYER_PER_DAY = 3
"""ADDRESS codes one player may have sent in a day (each goes to an address that has not
shown it wants our mail: with a stolen or a careless key, no more than a few)."""
ADDRESS_CODES_PER_GAME_PER_DAY = 20
"""ADDRESS codes for all players of one game together in a day."""
FLOOD_NOTICE_EVERY = timedelta(hours=1)
"""The referee hears of a sign-up flood on a game at most this often."""
RESIGN_LIFETIME = timedelta(days=3)


def game_config(config: Config, game: Game) -> GameConfig | None:
    """The game's table in the config (None when it was removed from it)."""
    return config.find(game.name)


def signup_mode(config: Config, game: Game) -> str:
    found = game_config(config, game)
    return found.settings.signup if found is not None else "closed"


def seated(session: Session, game: Game) -> list[Player]:
    """The players holding a seat (neither resigned nor removed from the config)."""
    return list(
        session.scalars(
            select(Player).where(Player.game_id == game.id, Player.active).order_by(Player.id)
        )
    )


def signups(session: Session, game: Game, *states: str) -> list[Signup]:
    return list(
        session.scalars(
            select(Signup)
            .where(Signup.game_id == game.id, Signup.state.in_(states))
            .order_by(Signup.id)
        )
    )


# -- codes ------------------------------------------------------------------------------


def new_code() -> str:
    """A confirmation code: 8 letters and digits without look-alikes (``k7mq-x2pa``)."""
    raw = "".join(secrets.choice(ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def _code_hash(code: str, game: Game) -> str:
    return hash_key(code.replace("-", ""), game.order_key_salt)


def _open_confirmations(
    session: Session, address: str, now: datetime, purpose: str | None = None
) -> list[Confirmation]:
    query = select(Confirmation).where(
        Confirmation.email == address.lower(),
        Confirmation.used_at.is_(None),
        Confirmation.expires_at > now,
    )
    if purpose is not None:
        query = query.where(Confirmation.purpose == purpose)
    return list(session.scalars(query.order_by(Confirmation.id)))


def _ask(
    session: Session,
    game: Game,
    purpose: str,
    address: str,
    now: datetime,
    payload: dict[str, Any],
) -> str:
    """A new code for ``purpose`` at ``address``. Earlier open codes stay good: a forged
    request from the address must not void the code its owner is about to send back
    (how many go to one address is bounded by the replies' budget, a few a day)."""
    code = new_code()
    session.add(
        Confirmation(
            game_id=game.id,
            purpose=purpose,
            email=address.lower(),
            code_hash=_code_hash(code, game),
            payload=payload,
            created_at=now,
            expires_at=now + CODE_LIFETIME,
            wrong=0,
        )
    )
    return code


@dataclass(frozen=True)
class Confirmed:
    """A code that matched: what it was for."""

    confirmation: Confirmation
    game: Game


def check_code(
    session: Session,
    address: str,
    code: str,
    now: datetime,
    *,
    purposes: tuple[str, ...],
    game_id: int | None = None,
    vouched: bool = False,
) -> Confirmed | None:
    """The open confirmation for one of ``purposes`` at ``address`` this code completes
    (marked used), or None. A wrong code counts one try against each such open code that
    is not resting; a code with CODE_TRIES_PER_HOUR tries in its hour rests (it is not
    checked at all) until that hour has passed (``resting``). ``vouched``: our MTA's
    DKIM or DMARC result says the message comes from ``address`` itself, which no forger
    can write: every open code is checked, resting or not, and a wrong one counts no try
    (the tries stop guessing by someone who does not hold the mailbox; this sender
    does). ``game_id``: only confirmations for that game. The rows are not locked (a
    CONFIRM with a key already holds its game's lock, and rows locked before a game
    would invite a deadlock): two messages at the very same moment may count one try,
    which a bound of a hundred tries an hour over 39 bits can spare."""
    pending = [
        c
        for c in _open_confirmations(session, address, now)
        if c.purpose in purposes
        and (game_id is None or c.game_id == game_id)
        and c.code_hash is not None
    ]
    awake = pending if vouched else [c for c in pending if _rests_until(c, now) is None]
    for confirmation in awake:
        game = session.get(Game, confirmation.game_id)
        if game is None or confirmation.code_hash is None:
            continue
        if secrets.compare_digest(_code_hash(code, game), confirmation.code_hash):
            confirmation.used_at = now
            return Confirmed(confirmation, game)
    if vouched:
        return None
    for confirmation in awake:
        tries, since = _tries(confirmation, now)
        confirmation.wrong += 1  # every counted try, for the record
        confirmation.payload = {  # a new dict: JSON columns see assignment, not mutation
            **confirmation.payload,
            "tries": tries + 1,
            "tries_from": since.isoformat(),
        }
        if tries + 1 >= CODE_TRIES_PER_HOUR:
            log.warning(
                "confirmation %d rests: %d wrong codes within %s",
                confirmation.id,
                tries + 1,
                CODE_TRY_WINDOW,
            )
    return None


def _tries(confirmation: Confirmation, now: datetime) -> tuple[int, datetime]:
    """Wrong tries counted in the code's current hour, and when that hour began (a new
    hour begins at the first try after the last one ended)."""
    since = confirmation.payload.get("tries_from")
    if isinstance(since, str):
        began = datetime.fromisoformat(since)
        if began.tzinfo is None:
            began = began.replace(tzinfo=now.tzinfo)
        if now - began < CODE_TRY_WINDOW:
            return int(confirmation.payload.get("tries", 0)), began
    return 0, now


def _rests_until(confirmation: Confirmation, now: datetime) -> datetime | None:
    """When a resting code is checked again (None: it is checked now)."""
    tries, since = _tries(confirmation, now)
    return since + CODE_TRY_WINDOW if tries >= CODE_TRIES_PER_HOUR else None


def resting(
    session: Session,
    address: str,
    now: datetime,
    *,
    purposes: tuple[str, ...],
    game_id: int | None = None,
) -> tuple[Game, datetime] | None:
    """A resting open code at ``address`` (its game, and when it is checked again), for
    the answer to a code that did not match: the owner's right code may have been among
    the unchecked ones, so she is told when to send it again."""
    for confirmation in _open_confirmations(session, address, now):
        if confirmation.purpose not in purposes or (
            game_id is not None and confirmation.game_id != game_id
        ):
            continue
        until = _rests_until(confirmation, now)
        game = session.get(Game, confirmation.game_id)
        if until is not None and game is not None:
            return game, until
    return None


def pending_code(
    session: Session,
    game: Game,
    address: str,
    now: datetime,
    purpose: str,
    name: str | None = None,
) -> Confirmation | None:
    """The open code for ``purpose`` in ``game`` that waits at ``address`` (the first);
    ``name``: only a JOIN code for that name (in any case)."""
    for confirmation in _open_confirmations(session, address, now, purpose):
        if confirmation.game_id != game.id:
            continue
        if name is None or str(confirmation.payload.get("name", "")).lower() == name.lower():
            return confirmation
    return None


def void_other_joins(session: Session, game: Game, address: str, now: datetime) -> int:
    """Once a JOIN code has seated (or listed) ``address`` in ``game``, the other JOIN codes
    still open at that address for that game (under other names, asked by its owner or
    by a forger in its name) are void: one seat per address, and a forger's name must not
    linger. (A code at another form of the mailbox, ``ann+2@``, is left to be refused
    with its reason at its CONFIRM: ``_address_taken``.) Returns how many."""
    voided = 0
    for confirmation in _open_confirmations(session, address, now, Purpose.JOIN):
        if confirmation.game_id == game.id:
            confirmation.used_at = now
            confirmation.payload = {**confirmation.payload, "void": "another code was used"}
            voided += 1
    return voided


def has_open(session: Session, address: str, now: datetime, purpose: str) -> bool:
    """Whether a confirmation for ``purpose`` waits at ``address``."""
    return bool(_open_confirmations(session, address, now, purpose))


def unconfirmed_count(session: Session, game: Game, now: datetime) -> int:
    return (
        session.scalar(
            select(func.count())
            .select_from(Confirmation)
            .where(
                Confirmation.game_id == game.id,
                Confirmation.purpose == Purpose.JOIN,
                Confirmation.used_at.is_(None),
                Confirmation.expires_at > now,
            )
        )
        or 0
    )


# -- joining ----------------------------------------------------------------------------


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
    sign-ups waiting or on standby."""
    if not name or len(name) > MAX_NAME or not _NAME.match(name) or "  " in name:
        return (
            f"A name is 1 to {MAX_NAME} plain letters (A to Z), digits, spaces, dots, "
            "hyphens or apostrophes, e.g. JOIN spring26 Ann Lee"
        )
    skeleton = name_skeleton(name)
    if skeleton in {name_skeleton(reserved) for reserved in RESERVED_NAMES}:
        return f"{name!r} cannot be a player's name here: choose another"
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
            return f"The name {name!r} is taken in {game.name}: choose another"
        if name_skeleton(taken) == skeleton:
            return (
                f"The name {name!r} looks too like one taken in {game.name} (names must "
                "differ in their letters, not only in case, spaces, punctuation or digits "
                "that look like letters): choose another"
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


def _same_domain(column: Any, address: str) -> Any:
    """A filter for the addresses that may share ``address``'s mailbox (its domain's)."""
    domain = address.lower().rpartition("@")[2]
    domains = GMAIL_DOMAINS if domain in GMAIL_DOMAINS else (domain,)
    return or_(*(func.lower(column).endswith("@" + d, autoescape=True) for d in domains))


def _address_taken(session: Session, game: Game, address: str) -> str | None:
    """Why ``address`` cannot sign up for ``game``: its mailbox (``mailbox``) holds a
    seat, or has signed up already, under this or another form of the address."""
    box = mailbox(address)
    for player in session.scalars(
        select(Player).where(
            Player.game_id == game.id, Player.active, _same_domain(Player.email, address)
        )
    ):
        if player.email.lower() == address.lower():
            return f"{address} already plays in {game.name} (as {player.name})"
        if mailbox(player.email) == box:
            return (
                f"{address} is another form of an address that already plays in "
                f"{game.name} (as {player.name}): one seat per mailbox"
            )
    for waiting in session.scalars(
        select(Signup).where(
            Signup.game_id == game.id,
            Signup.state.in_((SignupState.WAITING, SignupState.STANDBY)),
            _same_domain(Signup.email, address),
        )
    ):
        if mailbox(waiting.email) != box:
            continue
        where = "the standby list" if waiting.state == SignupState.STANDBY else "the referee's list"
        if waiting.email.lower() == address.lower():
            return f"{address} has already signed up for {game.name} ({waiting.name}, on {where})"
        return (
            f"{address} is another form of an address that has signed up for {game.name} "
            f"({waiting.name}, on {where}): one seat per mailbox"
        )
    return None


def own_address(config: Config, address: str) -> bool:
    """Whether ``address`` is one of the game's own (``+tag`` forms too: the server's
    mailbox gets them, and would read its own mail as orders or loop)."""
    own = (config.settings.mail.address, config.settings.mail.referee)
    return mailbox(address) in {mailbox(a) for a in own}


def join_refusal(
    session: Session, config: Config, game: Game, address: str, name: str, now: datetime
) -> str | None:
    """Why ``address`` cannot ask to join ``game`` as ``name`` now (None: it may)."""
    mode = signup_mode(config, game)
    if mode == "closed":
        return f"{game.name} does not take sign-ups by mail: ask the referee."
    if game.state == GamePhase.OVER:
        return f"{game.name} is over."
    if own_address(config, address) or no_person(address):
        return "The game's own addresses, and robots' (postmaster, no-reply...), cannot join."
    problem = _address_taken(session, game, address) or _name_problem(session, game, name)
    if problem:
        return problem + "."
    return None


def join_codes_sent(session: Session, game: Game, now: datetime) -> int:
    """Sign-up codes ``game`` sent in the last SIGNUP_WINDOW (used or not)."""
    return (
        session.scalar(
            select(func.count())
            .select_from(Confirmation)
            .where(
                Confirmation.game_id == game.id,
                Confirmation.purpose == Purpose.JOIN,
                Confirmation.created_at > now - SIGNUP_WINDOW,
            )
        )
        or 0
    )


def join_code_refusal(session: Session, game: Game, now: datetime) -> str | None:
    """Why no sign-up code goes out for ``game`` now: MAX_UNCONFIRMED_PER_GAME were sent
    within the hour. The newcomer is refused rather than an older code voided (an honest
    joiner confirms within minutes; a flood's codes never, and evicting them would let the
    flood void the honest ones instead). The caller holds the game's lock, so two JOINs at
    once cannot both take the last place."""
    if join_codes_sent(session, game, now) < MAX_UNCONFIRMED_PER_GAME:
        return None
    return (
        f"{game.name} has had many sign-ups in the last hour, more than it takes at once. "
        "Please send your JOIN again in an hour."
    )


VOUCHED = "vouched"
"""Marks in a code's ``payload`` that the request for it was vouched for by our MTA's
DKIM or DMARC result (``replies.verified_sender``): such codes alone make up the
address's own budget of codes for a vouched-for request (``replies.guest_limit``), which
a forger's requests in its name therefore cannot spend."""


def request_join(
    session: Session, game: Game, address: str, name: str, now: datetime, vouched: bool = False
) -> str:
    """A code for ``address`` to confirm its sign-up (after ``join_refusal`` and
    ``join_code_refusal`` said None). Codes sent earlier stay good, under any name: the
    first confirmed seats the address and voids the others (``void_other_joins``)."""
    payload: dict[str, Any] = {"name": name}
    if vouched:
        payload[VOUCHED] = "yes"
    return _ask(session, game, Purpose.JOIN, address, now, payload)


def flood_noticed(session: Session, config: Config, game: Game, now: datetime, what: str) -> bool:
    """Tell the referee that a sign-up limit held ``game``'s joiners back (``what``: which
    one), at most once per FLOOD_NOTICE_EVERY per game; True when told now."""
    recent = session.scalar(
        select(func.count())
        .select_from(AuditEntry)
        .where(
            AuditEntry.game_id == game.id,
            AuditEntry.action == "signup-flood",
            AuditEntry.at > now - FLOOD_NOTICE_EVERY,
        )
    )
    if recent:
        return False
    audit(session, now, "intake", "signup-flood", game, limit=what)
    _tell_referee(
        session,
        config,
        game,
        now,
        "many sign-ups",
        f"{game.name} is getting more sign-up requests than its limits let through "
        f"({what}). Those over the limit are refused with a short reason (try again "
        "later); codes already sent stay good. If it goes on, it is likely a flood of "
        'forged JOINs: you may set signup = "closed" or "approval" for a while. '
        "You hear of it at most once an hour.",
    )
    return True


def noted(session: Session, address: str, about: str, now: datetime, within: timedelta) -> bool:
    """Whether a note ``about`` something went to ``address`` within ``within`` (a few
    answers to keyless mail are sent at most once an hour each; the audit log remembers
    them). Else records one now and returns False: the caller sends it."""
    if session.scalar(
        select(func.count())
        .select_from(AuditEntry)
        .where(
            AuditEntry.action == "guest-note",
            AuditEntry.at > now - within,
            AuditEntry.detail["to"].as_string() == address.lower(),
            AuditEntry.detail["about"].as_string() == about,
        )
    ):
        return True
    audit(session, now, "intake", "guest-note", None, to=address.lower(), about=about)
    return False


@dataclass(frozen=True)
class JoinOutcome:
    state: str
    """seated, standby or waiting (SignupState)."""
    name: str
    started: bool = False
    message: str = ""


def complete_join(
    session: Session,
    config: Config,
    game: Game,
    name: str,
    address: str,
    now: datetime,
    tell: Callable[[JoinOutcome], None],
) -> JoinOutcome:
    """A confirmed sign-up: seated (a forming game with room), on the standby list (full,
    or already running), or waiting for the referee (signup = "approval"). ``tell`` queues
    the joiner's answer, before the welcome when their seat starts the game."""
    refusal = _address_taken(session, game, address) or _name_problem(session, game, name)
    if refusal is not None:
        raise LifecycleError(refusal + ".")
    if game.state == GamePhase.OVER:
        raise LifecycleError(f"{game.name} is over.")
    if signup_mode(config, game) == "closed":  # closed since the code was sent
        raise LifecycleError(f"{game.name} no longer takes sign-ups by mail: ask the referee.")
    approval = signup_mode(config, game) == "approval"
    signup = Signup(
        game_id=game.id,
        name=name,
        email=address.lower(),
        created_at=now,
        state=SignupState.WAITING if approval else SignupState.STANDBY,  # _place may seat it
    )
    session.add(signup)
    if approval:
        audit(session, now, address.lower(), "signup-waiting", game, name=name, via="mail")
        _tell_referee(
            session,
            config,
            game,
            now,
            f"{name} asks to join",
            f"{name} <{address}> asks to join {game.name}. Reply with APPROVE {game.name} "
            f"{name} or REFUSE {game.name} {name} (with your referee key), or run "
            f"snl-pbem approve {game.name} {shlex.quote(name)}.",
        )
        outcome = JoinOutcome(SignupState.WAITING, name)
        tell(outcome)
        return outcome
    return _place(session, config, game, signup, now, tell, actor=address.lower(), via="mail")


def _place(
    session: Session,
    config: Config,
    game: Game,
    signup: Signup,
    now: datetime,
    tell: Callable[[JoinOutcome], None],
    *,
    actor: str,
    via: str | None,
) -> JoinOutcome:
    """Seat an accepted sign-up if the game is forming and has room; else standby.
    ``tell`` queues the joiner's mail about it: before the game starts, when this seat
    fills it, so that "your welcome message follows" comes before the welcome."""
    found = game_config(config, game)
    limit = found.settings.max_players if found is not None else None
    if game.state == GamePhase.NEW and (limit is None or len(seated(session, game)) < limit):
        player = Player(
            game_id=game.id,
            name=signup.name,
            email=signup.email,
            joined_at=now,
            order_key_source="generated",
            managed_by=ManagedBy.MAIL,
        )
        session.add(player)
        session.flush()
        signup.state, signup.player_id, signup.decided_at = SignupState.SEATED, player.id, now
        audit(session, now, actor, "signup-seated", game, name=signup.name, via=via)
        started = (
            found is not None
            and found.settings.starts == "when_full"
            and limit is not None
            and len(seated(session, game)) >= limit
        )
        outcome = JoinOutcome(SignupState.SEATED, signup.name, started)
        tell(outcome)
        if started:
            start_in(session, config, game, now, actor="signup", shift_late_start=True)
        return outcome
    signup.state, signup.decided_at = SignupState.STANDBY, now
    audit(session, now, actor, "signup-standby", game, name=signup.name, via=via)
    outcome = JoinOutcome(SignupState.STANDBY, signup.name)
    tell(outcome)
    return outcome


def _waiting_signup(session: Session, game: Game, name: str, *states: str) -> Signup:
    found = session.scalar(
        select(Signup).where(
            Signup.game_id == game.id,
            func.lower(Signup.name) == name.lower(),
            Signup.state.in_(states or (SignupState.WAITING,)),
        )
    )
    if found is None:
        waiting = [s.name for s in signups(session, game, *(states or (SignupState.WAITING,)))]
        also = f" (waiting: {', '.join(waiting)})" if waiting else " (none is waiting)"
        where = (
            "for approval" if set(states) <= {SignupState.WAITING} else "for approval or on standby"
        )
        raise NotFound(f"{game.name}: no sign-up named {name!r} waits {where}{also}")
    return found


def approve_signup(
    session: Session,
    config: Config,
    game: Game,
    name: str,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    """The referee accepts a waiting sign-up: seated, or standby when there is no seat."""
    signup = _waiting_signup(session, game, name)
    signup.decided_by = actor

    def tell(outcome: JoinOutcome) -> None:
        _mail(
            session,
            config,
            game,
            signup.email,
            now,
            "player/signup.txt.j2",
            name=signup.name,
            outcome="approved-" + outcome.state,
            started=outcome.started,
        )

    outcome = _place(session, config, game, signup, now, tell, actor=actor, via=via)
    where = "seated" if outcome.state == SignupState.SEATED else "on the standby list"
    started = "; the game is full and has started" if outcome.started else ""
    return f"{game.name}: {signup.name} approved, {where}{started}"


def refuse_signup(
    session: Session,
    config: Config,
    game: Game,
    name: str,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    signup = _waiting_signup(session, game, name, SignupState.WAITING, SignupState.STANDBY)
    signup.state, signup.decided_at, signup.decided_by = SignupState.REFUSED, now, actor
    audit(session, now, actor, "signup-refused", game, name=signup.name, via=via)
    _mail(
        session,
        config,
        game,
        signup.email,
        now,
        "player/signup.txt.j2",
        name=signup.name,
        outcome="refused",
        started=False,
    )
    return f"{game.name}: {signup.name}'s sign-up refused (they are told)"


# -- starting a game that takes sign-ups ------------------------------------------------


def start_forming_game(
    session: Session,
    config: Config,
    game: Game,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    """START by the referee: the game starts with the players it has (at least one)."""
    if game.state != GamePhase.NEW:
        raise LifecycleError(f"{game.name}: already started (it is {game.state})")
    if not seated(session, game):
        raise LifecycleError(f"{game.name}: nobody has a seat yet")
    report = start_in(
        session,
        config,
        game,
        now,
        actor=actor,
        via=via,
        shift_late_start=signup_mode(config, game) != "closed",
    )
    return (
        f"{game.name}: started with {counted(report.welcomes, 'player')}; round 1 deadline "
        f"{game_time(game, report.round_deadline)}"
    )


def start_due_games(db: Database, config: Config, now: datetime) -> list[str]:
    """Start each forming game whose ``starts`` time has come and that has ``min_players``;
    one that has too few waits, and the referee is told (once). Returns what happened."""
    done: list[str] = []
    due = [g for g in config.games if g.starts_at is not None and g.starts_at <= now]
    if not due:
        return done
    with db.transaction() as session:  # one look for all of them: most have started long ago
        forming = set(
            session.scalars(
                select(Game.name).where(
                    Game.state == GamePhase.NEW, Game.name.in_([g.id for g in due])
                )
            )
        )
    for game_config_ in due:
        settings = game_config_.settings
        if game_config_.id not in forming:
            continue
        assert game_config_.starts_at is not None
        with db.transaction() as session:
            game = session.scalar(
                select(Game).where(Game.name == game_config_.id).with_for_update()
            )
            if game is None or game.state != GamePhase.NEW:
                continue
            count = len(seated(session, game))
            if count >= settings.min_players:
                report = start_in(
                    session, config, game, now, actor="scheduler", shift_late_start=True
                )
                done.append(
                    f"{game.name}: started at its start time with "
                    f"{counted(report.welcomes, 'player')}"
                )
            elif game.start_noted_at is None:
                game.start_noted_at = now
                audit(session, now, "scheduler", "start-waiting", game, players=count)
                _tell_referee(
                    session,
                    config,
                    game,
                    now,
                    "not started: too few players",
                    f"{game.name} was due to start at {game_time(game, game_config_.starts_at)} "
                    f"but has {count} of the {counted(settings.min_players, 'player')} it "
                    "needs. It waits: it starts as soon as it has them (or when you send START "
                    f"{game.name}, or run snl-pbem start {game.name}).",
                )
                done.append(f"{game.name}: waiting for players ({count}/{settings.min_players})")
    return done


# -- leaving, and taking over a seat ---------------------------------------------------


def resign(
    session: Session,
    config: Config,
    game: Game,
    player: Player,
    now: datetime,
    named: str | None,
    inbound_id: int | None = None,
) -> bool:
    """RESIGN: the first message asks; a second one (``inbound_id``: another message)
    naming the game (``RESIGN spring26``) within RESIGN_LIFETIME confirms. True when the
    player has now resigned."""
    pending = [
        c
        for c in _open_confirmations(session, player.email, now, Purpose.RESIGN)
        if c.game_id == game.id
        and c.payload.get("player_id") == player.id
        and (inbound_id is None or c.payload.get("inbound") != inbound_id)
    ]
    if not pending or named != game.name:
        for earlier in pending:
            earlier.used_at = now
        session.add(
            Confirmation(
                game_id=game.id,
                purpose=Purpose.RESIGN,
                email=player.email.lower(),
                code_hash=None,
                payload={"player_id": player.id, "inbound": inbound_id},
                created_at=now,
                expires_at=now + RESIGN_LIFETIME,
                wrong=0,
            )
        )
        return False
    for confirmation in pending:
        confirmation.used_at = now
    if game.state == GamePhase.NEW:  # nothing played yet: the seat goes, not its history
        return _leave_before_start(session, config, game, player, now)
    player.active, player.resigned_at = False, now
    player.order_key_hash, player.managed_by = None, ManagedBy.MAIL
    player.absent_until = None
    audit(session, now, player.email.lower(), "resign", game, player=player.name, via="mail")
    round_ = open_round(session, game)
    how = (
        "Their seat plays on by the no-orders default until you give it to someone: "
        f"REPLACE {game.name} {player.name} new@address (or snl-pbem replace)"
    )
    if _auto(config, game):
        how += "; with auto_replace the first on the standby list takes it at the next round"
    _tell_referee(
        session,
        config,
        game,
        now,
        f"{player.name} resigned",
        f"{player.name} <{player.email}> resigned from {game.name}"
        + (f" during round {round_.number}" if round_ is not None else "")
        + f". {how}.",
    )
    return True


def resign_refusal(config: Config, game: Game, player: Player) -> str | None:
    """Why ``player`` cannot resign by mail (None: they may). Before the start, a player
    the config lists is the referee's to take off (a config reload would add them back)."""
    listed = game_config(config, game)
    names = {p.name.lower() for p in listed.settings.players} if listed is not None else set()
    if game.state == GamePhase.NEW and player.name.lower() in names:
        return (
            "The referee listed you in the game's config: ask them to take you off before "
            "the game starts."
        )
    return None


def _leave_before_start(
    session: Session, config: Config, game: Game, player: Player, now: datetime
) -> bool:
    """A joiner gives up their seat before the start: the seat is gone (nothing was played
    on it), and the first on the standby list takes the free place."""
    for signup in session.scalars(select(Signup).where(Signup.player_id == player.id)):
        signup.state, signup.decided_at, signup.player_id = SignupState.WITHDRAWN, now, None
    name, address = player.name, player.email
    player.active = False  # for the caller: nothing more is done for them
    session.delete(player)
    session.flush()
    audit(session, now, address.lower(), "resign", game, player=name, via="mail")
    how = "The game has not started: their seat is free again"
    waiting = signups(session, game, SignupState.STANDBY)
    if waiting:

        def tell(placed: JoinOutcome) -> None:
            if placed.state == SignupState.SEATED:
                _mail(
                    session,
                    config,
                    game,
                    waiting[0].email,
                    now,
                    "player/signup.txt.j2",
                    name=placed.name,
                    outcome=str(placed.state),
                    started=placed.started,
                )

        placed = _place(session, config, game, waiting[0], now, tell, actor="standby", via=None)
        if placed.state == SignupState.SEATED:
            how += f", and {placed.name} from the standby list has it"
    _tell_referee(
        session,
        config,
        game,
        now,
        f"{name} resigned",
        f"{name} <{address}> left {game.name}. {how}.",
    )
    return True


def _auto(config: Config, game: Game) -> bool:
    found = game_config(config, game)
    return bool(found is not None and found.settings.auto_replace)


def holder_name(session: Session, game: Game, player: Player) -> str | None:
    """The name the seat's holder goes by: the name they joined with (their own seat, or
    one they took from the standby list), the seat's own name for its first holder, or
    None for an address the referee gave the seat to (REPLACE knows no name)."""
    return holder_names(session, game, [player])[player.id]


def holder_names(session: Session, game: Game, players: Sequence[Player]) -> dict[int, str | None]:
    """:func:`holder_name` of each of ``players`` (by id), in two queries."""
    joined: dict[tuple[int | None, str], str] = {}
    for player_id, address, name in session.execute(
        select(Signup.player_id, Signup.email, Signup.name)
        .where(
            Signup.game_id == game.id,
            Signup.state == SignupState.SEATED,
            Signup.player_id.is_not(None),
        )
        .order_by(Signup.id)
    ):
        joined[(player_id, address.lower())] = name
    given = set()
    for detail in session.scalars(
        select(AuditEntry.detail).where(
            AuditEntry.game_id == game.id, AuditEntry.action == "replace"
        )
    ):
        given.add((detail.get("player"), str(detail.get("new", "")).lower()))
    names: dict[int, str | None] = {}
    for player in players:
        address = player.email.lower()
        if (player.id, address) in joined:
            names[player.id] = joined[(player.id, address)]
        else:
            names[player.id] = None if (player.name, address) in given else player.name
    return names


def replace_seat(
    session: Session,
    config: Config,
    game: Game,
    player_name: str,
    email: str,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    """Give ``player_name``'s seat (its position and dice history) to ``email`` with a new
    key: the old key stops at once; the old address, if it still held the seat, is told.
    Each holder is greeted by the name they go by (``holder_name``), never the other's."""
    email = email.strip().lower()
    player = session.scalar(
        select(Player).where(
            Player.game_id == game.id, func.lower(Player.name) == player_name.lower()
        )
    )
    if player is None:
        names = [p.name for p in session.scalars(select(Player).where(Player.game_id == game.id))]
        raise NotFound(f"{game.name}: no player {player_name!r} (players: {', '.join(names)})")
    if game.state == GamePhase.OVER:
        raise LifecycleError(f"{game.name}: the game is over")
    problem = address_problem(email)
    if problem is not None:
        raise LifecycleError(problem)
    if email in (config.settings.mail.address.lower(), config.settings.mail.referee.lower()):
        raise LifecycleError(f"{email} is one of the game's own addresses")
    other = session.scalar(
        select(Player).where(
            Player.game_id == game.id,
            func.lower(Player.email) == email,
            Player.active,
            Player.id != player.id,
        )
    )
    if other is not None:
        raise LifecycleError(f"{email} already plays in {game.name} (as {other.name})")
    old_email, was_playing = player.email, player.active
    old_holder = holder_name(session, game, player)
    order_key = generate_key()
    player.email = email
    # before the start the key is made, and mailed, with everyone's at the start
    player.order_key_hash = (
        None if game.state == GamePhase.NEW else hash_key(order_key, game.order_key_salt)
    )
    player.order_key_source = "generated"
    player.active, player.resigned_at, player.absent_until = True, None, None
    player.managed_by = ManagedBy.MAIL
    holder = None
    for signup in signups(session, game, SignupState.STANDBY, SignupState.WAITING):
        if signup.email.lower() == email:
            signup.state, signup.player_id, signup.decided_at = SignupState.SEATED, player.id, now
            holder = signup.name
    audit(
        session,
        now,
        actor,
        "replace",
        game,
        player=player.name,
        old=old_email,
        new=email,
        via=via,
    )
    if game.state != GamePhase.NEW:
        _mail_seat(session, config, game, player, holder, order_key, now)
    else:
        _mail(
            session,
            config,
            game,
            email,
            now,
            "player/seat_before_start.txt.j2",
            player=player,
            holder=holder,
        )
    if was_playing and old_email.lower() != email:
        _mail(session, config, game, old_email, now, "player/replaced.txt.j2", name=old_holder)
    who = f"{email}, who joined as {holder}," if holder else email
    if game.state == GamePhase.NEW:
        return (
            f"{game.name}: {player.name}'s seat now belongs to {who} (told; the key comes "
            "with the welcome at the start)"
        )
    return f"{game.name}: {player.name}'s seat now belongs to {who} (a new key was mailed)"


def _mail_seat(
    session: Session,
    config: Config,
    game: Game,
    player: Player,
    holder: str | None,
    order_key: str,
    now: datetime,
) -> None:
    """The new holder's welcome to a running (or paused) game: the key, the seat, and the
    game's state: paused or running, the open round, its deadline, and whether the seat
    has orders in for it already (its previous holder's: they count unless replaced)."""
    from snl_pbem.app.rounds import counting_orders, player_state

    round_ = open_round(session, game)
    state = player_state(session, game, player)
    has_orders = round_ is not None and player.name in counting_orders(session, round_, [player])
    enqueue_mail(
        session,
        config,
        game=game,
        kind=MailKind.WELCOME,
        to=player.email,
        now=now,
        template="player/seat.txt.j2",
        secret=True,
        player=player,
        holder=holder,
        order_key=order_key,
        position=state.positions[player.name],
        round=round_,
        deadline=game_time(game, round_.deadline) if round_ else "",
        paused=game.state == GamePhase.PAUSED,
        has_orders=has_orders,
        ruleset=ruleset_of(game).name,
    )


def fill_resigned_seats(session: Session, config: Config, game: Game, now: datetime) -> list[str]:
    """auto_replace: each resigned seat goes to the first on the standby list (a round
    close calls this as it opens the next round)."""
    if not _auto(config, game) or game.state != GamePhase.RUNNING:
        return []
    done = []
    resigned = session.scalars(
        select(Player)
        .where(Player.game_id == game.id, Player.resigned_at.is_not(None), ~Player.active)
        .order_by(Player.resigned_at, Player.id)
    ).all()
    line = iter(signups(session, game, SignupState.STANDBY))
    for player in resigned:
        signup = next(line, None)
        while signup is not None:
            try:  # a savepoint each: a standby that cannot take the seat is passed over
                with session.begin_nested():
                    done.append(
                        replace_seat(
                            session,
                            config,
                            game,
                            player.name,
                            signup.email,
                            now,
                            actor="auto-replace",
                            via=None,
                        )
                    )
                break
            except (LifecycleError, NotFound) as exc:
                signup.state, signup.decided_at, signup.decided_by = (
                    SignupState.REFUSED,
                    now,
                    "auto-replace",
                )
                _tell_referee(
                    session,
                    config,
                    game,
                    now,
                    f"{signup.name} could not take a seat",
                    f"auto_replace: {signup.name} <{signup.email}> on the standby list could "
                    f"not take {player.name}'s seat ({exc}); taken off the standby list.",
                )
                signup = next(line, None)
        if signup is None:
            break
        _tell_referee(
            session,
            config,
            game,
            now,
            f"{signup.name} took {player.name}'s seat",
            f"auto_replace: {signup.name} <{signup.email}> from the standby list took "
            f"{player.name}'s seat in {game.name}.",
        )
    return done


# -- absences, keys, addresses ----------------------------------------------------------


def absent(
    session: Session,
    config: Config,
    game: Game,
    player: Player,
    until: datetime | None,
    now: datetime,
) -> str:
    """ABSENT UNTIL (``until``) or ABSENT OFF (None). Raises LifecycleError past the
    config's limits (``max_absence`` ahead; ``max_absent`` players of a game at once)."""
    found = game_config(config, game)
    if until is None:
        if player.absent_until is None or player.absent_until <= now:
            player.absent_until = None
            return "You were not marked absent; nothing changed."
        player.absent_until = None
        audit(
            session, now, player.email.lower(), "absent-off", game, player=player.name, via="mail"
        )
        return "You are back: reminders start again, and your orders are expected."
    if game.state == GamePhase.OVER:
        raise LifecycleError(f"{game.name} is over.")
    limit = found.settings.max_absence if found else timedelta(days=14)
    most = found.settings.max_absent if found else 3
    if until <= now:
        raise LifecycleError("That date has passed: give a date to come.")
    if until > now + limit:
        raise LifecycleError(
            f"An absence may last at most {_days(limit)} in this game (until "
            f"{game_time(game, now + limit)} at the latest). Ask the referee if you need longer."
        )
    others = session.scalar(
        select(func.count())
        .select_from(Player)
        .where(
            Player.game_id == game.id,
            Player.active,
            Player.absent_until > now,
            Player.id != player.id,
        )
    )
    if (others or 0) >= most:
        raise LifecycleError(
            f"{counted(most, 'player')} of {game.name} {agree(most, 'is', 'are')} already absent, "
            "the most this game allows at once. Send your orders as usual, or ask the referee."
        )
    if player.absent_until is None or player.absent_until <= now:
        player.absences += 1
    player.absent_until = until
    audit(
        session,
        now,
        player.email.lower(),
        "absent",
        game,
        player=player.name,
        until=until.isoformat(),
        via="mail",
    )
    return (
        f"You are absent until {game_time(game, until)}: no reminders, and each round "
        "without your orders is played by the no-orders default without counting against "
        "you. Orders you send still count. Send ABSENT OFF when you are back early."
    )


def _days(delta: timedelta) -> str:
    days = delta.total_seconds() / 86400
    hours = delta.total_seconds() / 3600
    return f"{days:g} {agree(days, 'day')}" if days >= 1 else f"{hours:g} {agree(hours, 'hour')}"


def is_absent(player: Player, when: datetime) -> bool:
    return player.absent_until is not None and player.absent_until > when


NEW_KEY_AFTER_MOVE = timedelta(days=3)
NEW_KEYS_PER_DAY = 3


def new_key_refusal(session: Session, game: Game, player: Player, now: datetime) -> str | None:
    """Why NEW KEY is not done now. Not within NEW_KEY_AFTER_MOVE of an address move: the
    old address was told of the move, and its owner's key still works to move it back, so
    whoever holds a stolen key cannot also lock the owner out at once."""
    recent = session.scalars(
        select(AuditEntry.action).where(
            AuditEntry.game_id == game.id,
            AuditEntry.action.in_(("address", "new-key")),
            AuditEntry.at > now - NEW_KEY_AFTER_MOVE,
            AuditEntry.detail["player"].as_string() == player.name,
        )
    ).all()
    if "address" in recent:
        return (
            f"Your address changed less than {NEW_KEY_AFTER_MOVE.days} days ago: a new key "
            "can be asked for after that. Your key works as before."
        )
    if sum(1 for action in recent if action == "new-key") >= NEW_KEYS_PER_DAY:
        return f"You asked for {NEW_KEYS_PER_DAY} new keys lately: ask the referee."
    return None


def new_key(session: Session, game: Game, player: Player, now: datetime) -> str:
    """NEW KEY: a fresh key (the old one stops at once); the caller mails it."""
    order_key = generate_key()
    player.order_key_hash = hash_key(order_key, game.order_key_salt)
    player.order_key_source, player.managed_by = "generated", ManagedBy.MAIL
    audit(session, now, player.email.lower(), "new-key", game, player=player.name, via="mail")
    return order_key


def address_refusal(
    session: Session, config: Config, game: Game, player: Player, new: str
) -> str | None:
    """Why ``player`` cannot move to ``new``: not an address the server can send to; the
    game's own, or its ``+tag`` (our mailbox would read its own code as mail to it); a
    robot's (mailer-daemon@, postmaster@, noreply@: nobody there can confirm, and a code
    there is backscatter); or the mailbox of another player or sign-up of the game (one
    seat per mailbox, as for JOIN: ``mailbox``)."""
    new = new.lower()
    problem = address_problem(new)
    if problem is not None:
        return problem + "."
    if own_address(config, new):
        return "That is one of the game's own addresses: give your own."
    if no_person(new):
        return "Nobody reads mail at that address (it is a mail robot's): give your own."
    if new == player.email.lower():
        return "That is already your address."
    box = mailbox(new)
    for other in session.scalars(
        select(Player.email).where(
            Player.game_id == game.id, Player.id != player.id, _same_domain(Player.email, new)
        )
    ):
        if mailbox(other) == box:
            return "That address belongs to another player of this game."
    for waiting in session.scalars(
        select(Signup.email).where(
            Signup.game_id == game.id,
            Signup.state.in_((SignupState.WAITING, SignupState.STANDBY)),
            _same_domain(Signup.email, new),
        )
    ):
        if mailbox(waiting) == box:
            return "That address has signed up for this game."
    return None


def address_code_refusal(session: Session, game: Game, player: Player, now: datetime) -> str | None:
    """Why no ADDRESS code goes out now: ADDRESS_CODES_PER_PLAYER_PER_DAY for this player,
    or ADDRESS_CODES_PER_GAME_PER_DAY for the game, in the last day. (One stolen key once
    mailed 260 strangers a code in 260 seconds; the address's own budget bounds each
    stranger, these bound the key and the game.)"""
    sent = list(
        session.scalars(
            select(Confirmation.payload).where(
                Confirmation.game_id == game.id,
                Confirmation.purpose == Purpose.ADDRESS,
                Confirmation.created_at > now - timedelta(days=1),
            )
        )
    )
    mine = sum(1 for payload in sent if payload.get("player_id") == player.id)
    if mine >= ADDRESS_CODES_PER_PLAYER_PER_DAY:
        return (
            f"You asked for {mine} address codes in the last day, the most a player may: "
            "try again tomorrow. Nothing changed."
        )
    if len(sent) >= ADDRESS_CODES_PER_GAME_PER_DAY:
        return (
            f"{game.name} has sent as many address codes today as it may: try again "
            "tomorrow, or ask the referee. Nothing changed."
        )
    return None


def request_address(session: Session, game: Game, player: Player, new: str, now: datetime) -> str:
    """ADDRESS new: a code to the new address; the move waits for it to come back from
    there with the player's key."""
    return _ask(session, game, Purpose.ADDRESS, new, now, {"player_id": player.id})


def move_address(
    session: Session, config: Config, game: Game, player: Player, new: str, now: datetime
) -> str:
    old = player.email
    player.email, player.managed_by = new.lower(), ManagedBy.MAIL
    audit(session, now, new.lower(), "address", game, player=player.name, old=old, via="mail")
    _mail(session, config, game, old, now, "player/address_moved.txt.j2", name=player.name, new=new)
    return old


# -- observers --------------------------------------------------------------------------


def observing(session: Session, game: Game, address: str) -> Observer | None:
    return session.scalar(
        select(Observer).where(
            Observer.game_id == game.id, func.lower(Observer.email) == address.lower()
        )
    )


MAX_OBSERVERS_PER_GAME = 100
"""Observers of one game, at most (each round's close mails each one)."""


def observe_refusal(session: Session, game: Game) -> str | None:
    if len(observers(session, game)) >= MAX_OBSERVERS_PER_GAME:
        return f"{game.name} has as many observers as it can take; ask the referee."
    return None


def request_observe(
    session: Session, game: Game, address: str, now: datetime, vouched: bool = False
) -> str:
    return _ask(session, game, Purpose.OBSERVE, address, now, {VOUCHED: "yes"} if vouched else {})


def observe(session: Session, game: Game, address: str, now: datetime) -> None:
    found = observing(session, game, address)
    if found is None:
        session.add(Observer(game_id=game.id, email=address.lower(), since=now, active=True))
    else:
        found.active, found.since = True, now
    audit(session, now, address.lower(), "observe", game, via="mail")


def unobserve(session: Session, game: Game, address: str, now: datetime) -> bool:
    found = observing(session, game, address)
    if found is None or not found.active:
        return False
    found.active = False
    audit(session, now, address.lower(), "unobserve", game, via="mail")
    return True


def observers(session: Session, game: Game) -> list[str]:
    return list(
        session.scalars(
            select(Observer.email)
            .where(Observer.game_id == game.id, Observer.active)
            .order_by(Observer.id)
        )
    )


# -- what anyone may see -----------------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    """A game as LIST shows it."""

    id: str
    title: str
    ruleset: str
    state: str
    """forming, running, paused."""
    signup: str
    last: int
    players: int
    max_players: int | None
    min_players: int
    starts: str
    standby: int
    round: int | None
    deadline: str


def listed_games(session: Session, config: Config) -> list[Listed]:
    """The games forming (open for sign-up) and running, for LIST (nothing secret: no
    board, no names or addresses)."""
    rows = []
    for game in session.scalars(select(Game).order_by(Game.name)):
        found = game_config(config, game)
        if game.state == GamePhase.OVER or found is None:
            continue
        if game.state == GamePhase.NEW and found.settings.signup == "closed":
            continue
        round_ = open_round(session, game)
        starts = ""
        if game.state == GamePhase.NEW:
            if found.starts_at is not None:
                starts = game_time(game, found.starts_at)
            elif found.settings.starts == "when_full":
                starts = "when full"
            else:
                starts = "when the referee starts it"
        rows.append(
            Listed(
                id=game.name,
                title=game.title,
                ruleset=game.ruleset,
                state="forming" if game.state == GamePhase.NEW else str(game.state),
                signup=found.settings.signup,
                last=found.board.last,
                players=len(seated(session, game)),
                max_players=found.settings.max_players,
                min_players=found.settings.min_players,
                starts=starts,
                standby=len(signups(session, game, SignupState.STANDBY)),
                round=round_.number if round_ else None,
                deadline=game_time(game, round_.deadline) if round_ else "",
            )
        )
    return rows


def standings_by_round(session: Session, game: Game) -> list[tuple[int, list[tuple[str, int]]]]:
    """HISTORY: every closed round's positions (what each round's report showed, R19), in
    one query: each player's final position on the last turn of each round."""
    last = (
        select(TurnRecord.round_id, func.max(TurnRecord.turn).label("turn"))
        .where(TurnRecord.game_id == game.id)
        .group_by(TurnRecord.round_id)
        .subquery()
    )
    rows = session.execute(
        select(Round.number, Player.name, TurnRecord.final)
        .join(last, and_(TurnRecord.round_id == last.c.round_id, TurnRecord.turn == last.c.turn))
        .join(Round, Round.id == TurnRecord.round_id)
        .join(Player, Player.id == TurnRecord.player_id)
        .order_by(Round.number)
    ).all()
    by_round: dict[int, list[tuple[str, int]]] = {}
    for number, name, final in rows:
        by_round.setdefault(number, []).append((name, final))
    return [(number, sorted(row, key=lambda x: (-x[1], x[0]))) for number, row in by_round.items()]


def seat_lines(session: Session, game: Game, now: datetime) -> list[str]:
    """For the referee: who is absent, who resigned, who waits (the round summary)."""
    lines = []
    for player in session.scalars(  # only those with something to say (a close may have 10,000)
        select(Player)
        .where(
            Player.game_id == game.id,
            (Player.resigned_at.is_not(None)) | (Player.absent_until > now),
        )
        .order_by(Player.id)
    ):
        if player.resigned_at is not None:
            lines.append(f"{player.name}: resigned; plays by the no-orders default")
        elif is_absent(player, now):
            assert player.absent_until is not None
            lines.append(f"{player.name}: absent until {game_time(game, player.absent_until)}")
    standby = signups(session, game, SignupState.STANDBY)
    if standby:
        lines.append("standby: " + ", ".join(f"{s.name} <{s.email}>" for s in standby))
    waiting = signups(session, game, SignupState.WAITING)
    if waiting:
        lines.append("waiting for your approval: " + ", ".join(s.name for s in waiting))
    return lines


# -- the referee's command line -----------------------------------------------------------


def in_game(
    db: Database,
    config: Config,
    game_id: str,
    now: datetime,
    action: Callable[[Session, Config, Game, datetime], str],
) -> str:
    """Run a session-level action (``replace_seat``, ``approve_signup``...) in a transaction
    of its own, the game row locked; its line of what it did."""
    with db.transaction() as session:
        game = game_by_id(session, game_id, lock=True)
        return action(session, config, game, now)


@dataclass(frozen=True)
class SeatRow:
    name: str
    email: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Seats:
    """Who plays a game, for ``snl-pbem seats``."""

    game: str
    state: str
    players: tuple[SeatRow, ...]
    waiting: tuple[tuple[str, str], ...]
    standby: tuple[tuple[str, str], ...]
    observers: int


def seats_of(db: Database, game_id: str, now: datetime) -> Seats:
    with db.transaction() as session:
        game = game_by_id(session, game_id)
        rows = []
        for player in session.scalars(
            select(Player).where(Player.game_id == game.id).order_by(Player.id)
        ):
            notes = [f"by {player.managed_by}"]
            if player.resigned_at is not None:
                notes.append(f"resigned {game_time(game, player.resigned_at)}")
            elif not player.active:
                notes.append("not in the config")
            if is_absent(player, now):
                assert player.absent_until is not None
                notes.append(f"absent until {game_time(game, player.absent_until)}")
            if player.absences:
                notes.append(f"{counted(player.absences, 'absence')} declared")
            rows.append(SeatRow(player.name, player.email, tuple(notes)))
        return Seats(
            game.name,
            game.state,
            tuple(rows),
            tuple((s.name, s.email) for s in signups(session, game, SignupState.WAITING)),
            tuple((s.name, s.email) for s in signups(session, game, SignupState.STANDBY)),
            len(observers(session, game)),
        )


# -- mail ------------------------------------------------------------------------------


def _mail(
    session: Session,
    config: Config,
    game: Game,
    to: str,
    now: datetime,
    template: str,
    **context: Any,
) -> None:
    enqueue_mail(
        session,
        config,
        game=game,
        kind=MailKind.MEMBERSHIP,
        to=to,
        now=now,
        template=template,
        **context,
    )


def _tell_referee(
    session: Session, config: Config, game: Game, now: datetime, title: str, message: str
) -> None:
    enqueue_mail(
        session,
        config,
        game=game,
        kind=MailKind.REFEREE_NOTICE,
        to=config.settings.mail.referee,
        now=now,
        template="referee/membership.txt.j2",
        title=title,
        message=message,
    )
