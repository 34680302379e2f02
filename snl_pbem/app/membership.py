"""Who plays, the shared part: a game's config table and sign-up mode, its seated
players and sign-ups, and the two kinds of membership mail (to a member, to the referee).

The use cases are in ``codes`` (confirmation codes), ``identity`` (names and addresses),
``signup`` (joining and starting a game that takes sign-ups), ``seats`` (resign,
replace, standby), ``players`` (absences, keys, addresses), ``observers``; what anyone
may see is in ``views``.

Everything there works in the caller's session (the intake's transaction for mail, one
of its own for the command line and the scheduler), after the caller has locked the
game row: a sign-up and a round close of the same game are never interleaved.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.config import Config, GameConfig
from snl_pbem.store import (
    Game,
    Player,
    Signup,
)
from snl_pbem.store.states import MailKind


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


def mail_member(
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


def tell_referee(
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
