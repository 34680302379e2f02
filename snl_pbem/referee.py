"""The referee's commands on a running game: status, extend, pause and resume.

Each change is audit-logged. ``status`` is the referee's private view: who
has orders in and whether they are valid — never sent to players.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.games import LifecycleError, audit
from snl_pbem.rounds import latest_orders, load_state
from snl_pbem.store import Database, Game, InboundMessage, OutboxMessage, Player, Round
from snl_pbem.timeutil import show, zone


def _game(session: Session, game_key: str, lock: bool = False) -> Game:
    query = select(Game).where(Game.key == game_key)
    game = session.scalar(query.with_for_update() if lock else query)
    if game is None:
        known = ", ".join(session.scalars(select(Game.key).order_by(Game.key))) or "none"
        raise LifecycleError(f"no game {game_key!r} in the database (games: {known})")
    return game


def _open_round(session: Session, game: Game) -> Round:
    round_ = session.scalar(
        select(Round).where(Round.game_id == game.id, Round.state == "open").with_for_update()
    )
    if round_ is None:
        raise LifecycleError(f"{game.key}: no round is open (the game is {game.state})")
    return round_


def extend(
    db: Database,
    game_key: str,
    now: datetime,
    *,
    by: timedelta | None = None,
    until: datetime | None = None,
    actor: str = "referee",
) -> datetime:
    """Move the open round's deadline later (by a duration, or to a time)."""
    if (by is None) == (until is None):
        raise LifecycleError("give either --by DURATION or --until TIME")
    with db.transaction() as session:
        game = _game(session, game_key, lock=True)
        round_ = _open_round(session, game)
        new = round_.deadline + by if by is not None else until
        assert new is not None
        if new <= now:
            raise LifecycleError(f"{game_key}: {show(new, zone(game.timezone))} has already passed")
        old = round_.deadline
        round_.deadline, round_.deadline_source = new, "referee"
        round_.held_at = None  # a held round with a new deadline is judged again at that time
        audit(
            session,
            now,
            actor,
            "extend",
            game,
            round=round_.number,
            old=old.isoformat(),
            new=new.isoformat(),
        )
        return new


def pause(db: Database, game_key: str, now: datetime, *, actor: str = "referee") -> None:
    """Stop the clock: a paused game's deadline does not fire."""
    with db.transaction() as session:
        game = _game(session, game_key, lock=True)
        if game.state != "running":
            raise LifecycleError(
                f"{game_key}: only a running game can be paused (it is {game.state})"
            )
        game.state, game.paused_at = "paused", now
        audit(session, now, actor, "pause", game)


def resume(db: Database, game_key: str, now: datetime, *, actor: str = "referee") -> datetime:
    """Restart the clock: the open deadline, and the schedule after it, move by the pause."""
    with db.transaction() as session:
        game = _game(session, game_key, lock=True)
        if game.state != "paused" or game.paused_at is None:
            raise LifecycleError(f"{game_key}: not paused (it is {game.state})")
        shift = now - game.paused_at
        round_ = _open_round(session, game)
        round_.deadline += shift
        round_.deadline_source = "referee"
        round_.held_at = None  # judged again at its new deadline
        game.schedule_shift_s += int(shift.total_seconds())
        game.state, game.paused_at = "running", None
        audit(
            session,
            now,
            actor,
            "resume",
            game,
            shifted_s=int(shift.total_seconds()),
            deadline=round_.deadline.isoformat(),
        )
        return round_.deadline


@dataclass
class PlayerStatus:
    name: str
    email: str
    active: bool
    position: int
    orders: str
    """none, valid, invalid (with reasons), or withdrawn."""
    problems: list[str] = field(default_factory=list)


@dataclass
class GameStatus:
    key: str
    title: str
    state: str
    timezone: str
    rounds_played: int
    round: int | None
    round_turns: int | None
    deadline: datetime | None
    deadline_shown: str | None
    players: list[PlayerStatus]
    result: dict[str, Any] | None
    mail_failed: int
    mail_pending: int
    inbound_set_aside: int
    mail_waiting_since: datetime | None = None
    """When the oldest message still waiting to be sent was written."""
    mail_waiting_since_shown: str | None = None
    mail_last_error: str | None = None
    """The latest error of a message still waiting (an SMTP outage shows here)."""

    def as_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["deadline"] = self.deadline.isoformat() if self.deadline else None
        since = self.mail_waiting_since
        data["mail_waiting_since"] = since.isoformat() if since else None
        data["players"] = [p.__dict__ for p in self.players]
        return data


def status(db: Database, game_key: str | None = None) -> list[GameStatus]:
    """The referee's view of every game (or one)."""
    with db.transaction() as session:
        query = select(Game).order_by(Game.key)
        games = [_game(session, game_key)] if game_key else list(session.scalars(query))
        return [_status(session, game) for game in games]


def _status(session: Session, game: Game) -> GameStatus:
    tz = zone(game.timezone)
    players = list(
        session.scalars(select(Player).where(Player.game_id == game.id).order_by(Player.id))
    )
    state = load_state(session, game, players)
    round_ = session.scalar(select(Round).where(Round.game_id == game.id, Round.state == "open"))
    latest = latest_orders(session, round_.id) if round_ is not None else {}
    rows = []
    for player in players:
        found = latest.get(player.id)
        problems: list[str] = []
        if found is None:
            orders = "none"
        elif found.withdrawn:
            orders = "withdrawn"
        else:
            orders = "valid" if found.valid else "invalid"
            problems = [] if found.valid else list(found.problems)
        rows.append(
            PlayerStatus(
                player.name,
                player.email,
                player.active,
                state.positions[player.name],
                orders,
                list(problems),
            )
        )

    def count(model: Any, *conditions: Any) -> int:
        return session.scalar(select(func.count()).select_from(model).where(*conditions)) or 0

    waiting = (OutboxMessage.game_id == game.id, OutboxMessage.status == "pending")
    since = session.scalar(select(func.min(OutboxMessage.created_at)).where(*waiting))
    last_error = session.scalar(
        select(OutboxMessage.last_error)
        .where(*waiting, OutboxMessage.last_error.is_not(None))
        .order_by(OutboxMessage.id.desc())
        .limit(1)
    )

    return GameStatus(
        key=game.key,
        title=game.title,
        state=game.state,
        timezone=game.timezone,
        rounds_played=game.rounds_played,
        round=round_.number if round_ else None,
        round_turns=round_.turns if round_ else None,
        deadline=round_.deadline if round_ else None,
        deadline_shown=show(round_.deadline, tz) if round_ else None,
        players=rows,
        result=game.result,
        mail_failed=count(
            OutboxMessage, OutboxMessage.game_id == game.id, OutboxMessage.status == "failed"
        ),
        mail_pending=count(
            OutboxMessage, OutboxMessage.game_id == game.id, OutboxMessage.status == "pending"
        ),
        inbound_set_aside=count(
            InboundMessage, InboundMessage.game_id == game.id, InboundMessage.status == "failed"
        ),
        mail_waiting_since=since,
        mail_waiting_since_shown=show(since, tz) if since else None,
        mail_last_error=last_error,
    )
