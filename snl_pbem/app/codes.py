"""Confirmation codes: asked for by mail, checked once, slowed when guessed, never voided.

Addresses are always confirmed before they are used: a JOIN, an OBSERVE or an ADDRESS
change mails a code to the address, and only a message from that address carrying the
code completes it (so nobody can sign up or move someone else). Codes are stored as
salted hashes, used once, and expire; wrong tries are slowed, never voiding (a forger
writing in someone's name must not be able to spoil the code they wait for). A
resignation is confirmed by a second message naming the game.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import audit
from snl_pbem.keys import ALPHABET, hash_key
from snl_pbem.store import (
    AuditEntry,
    Confirmation,
    Game,
)
from snl_pbem.store.states import Purpose

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
VOUCHED = "vouched"
"""Marks in a code's ``payload`` that the request for it was vouched for by our MTA's
DKIM or DMARC result (``replies.verified_sender``): such codes alone make up the
address's own budget of codes for a vouched-for request (``replies.guest_limit``), which
a forger's requests in its name therefore cannot spend."""


def new_code() -> str:
    """A confirmation code: 8 letters and digits without look-alikes (``k7mq-x2pa``)."""
    raw = "".join(secrets.choice(ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def _code_hash(code: str, game: Game) -> str:
    return hash_key(code.replace("-", ""), game.order_key_salt)


def open_confirmations(
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


def ask_code(
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
        for c in open_confirmations(session, address, now)
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
    for confirmation in open_confirmations(session, address, now):
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
    for confirmation in open_confirmations(session, address, now, purpose):
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
    for confirmation in open_confirmations(session, address, now, Purpose.JOIN):
        if confirmation.game_id == game.id:
            confirmation.used_at = now
            confirmation.payload = {**confirmation.payload, "void": "another code was used"}
            voided += 1
    return voided


def has_open(session: Session, address: str, now: datetime, purpose: str) -> bool:
    """Whether a confirmation for ``purpose`` waits at ``address``."""
    return bool(open_confirmations(session, address, now, purpose))


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
