"""Observers: OBSERVE (confirmed by a code) and UNOBSERVE. Who observes is read by
``state.observers``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.codes import VOUCHED, ask_code
from snl_pbem.app.lookup import audit
from snl_pbem.app.state import observers
from snl_pbem.rules.words import tr
from snl_pbem.store import (
    Game,
    Observer,
)
from snl_pbem.store.states import Purpose


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
        return tr("{game} has as many observers as it can take; ask the referee.", game=game.name)
    return None


def request_observe(
    session: Session,
    game: Game,
    address: str,
    now: datetime,
    vouched: bool = False,
    language: str | None = None,
) -> str:
    """A code for ``address`` to confirm it follows ``game``; ``language``: the one the
    OBSERVE was written in (their reports')."""
    payload: dict[str, str] = {VOUCHED: "yes"} if vouched else {}
    if language is not None:
        payload["language"] = language
    return ask_code(session, game, Purpose.OBSERVE, address, now, payload)


def observe(
    session: Session, game: Game, address: str, now: datetime, language: str | None = None
) -> None:
    found = observing(session, game, address)
    if found is None:
        session.add(
            Observer(
                game_id=game.id, email=address.lower(), since=now, active=True, language=language
            )
        )
    else:
        found.active, found.since, found.language = True, now, language
    audit(session, now, address.lower(), "observe", game, via="mail")


def unobserve(session: Session, game: Game, address: str, now: datetime) -> bool:
    found = observing(session, game, address)
    if found is None or not found.active:
        return False
    found.active = False
    audit(session, now, address.lower(), "unobserve", game, via="mail")
    return True
