"""The referee's commands on a running game: status, extend, pause and resume (the
stored mail the referee looks at and sends again is ``app/stored_mail.py``).

Each change is audit-logged, with how the referee gave it (``via``: "cli" or "mail").
``status`` is the referee's private view: who has orders in and whether they are
valid — never sent to players. ``extend`` stays within the game's limits
(``max_extend``, ``max_total_extend``) and, like ``pause`` and ``resume`` given the
config, tells every active player in one notice each, in the same transaction.

Each command is a session-level function (``extend_locked``, ``pause_locked``,
``resume_locked``: the caller's transaction, the game row locked), which the referee's
mail runs inside the intake's transaction, and a database-level one the command line runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import audit, game_by_name, game_time, open_round
from snl_pbem.app.reports import enqueue_deadline_notice
from snl_pbem.app.state import latest_orders, load_state
from snl_pbem.config import Config, GameSettings
from snl_pbem.errors import LifecycleError
from snl_pbem.rules.words import counted
from snl_pbem.store import Database, Game, InboundMessage, OutboxMessage, Player, Round
from snl_pbem.store.states import GamePhase, InboundStatus, OutboxStatus
from snl_pbem.timeutil import format_duration


def _game(session: Session, game_name: str, lock: bool = False) -> Game:
    return game_by_name(session, game_name, lock=lock)


def _open_round(session: Session, game: Game) -> Round:
    round_ = open_round(session, game, lock=True)
    if round_ is None:
        raise LifecycleError(f"{game.name}: no round is open (the game is {game.state})")
    return round_


@dataclass(frozen=True)
class ExtensionCaps:
    """A game's limits on the referee's extensions, and the config keys that set them."""

    one: timedelta
    total: timedelta
    one_key: str
    total_key: str


def extension_caps(config: Config, game: Game) -> ExtensionCaps:
    """The game's ``max_extend`` and ``max_total_extend`` (the defaults for a game the
    config no longer has), named as check-config names them."""
    for candidate in config.games:
        if candidate.id == game.name:
            settings, where = candidate.settings, candidate.where  # its file's, if games_dir
            return ExtensionCaps(
                settings.max_extend,
                settings.max_total_extend,
                f"{where}max_extend",
                f"{where}max_total_extend",
            )
    defaults, gone = GameSettings.model_fields, f"{game.name} is not in {config.path.name}"
    return ExtensionCaps(
        defaults["max_extend"].default,
        defaults["max_total_extend"].default,
        f"the default max_extend: {gone}",
        f"the default max_total_extend: {gone}",
    )


def _check_caps(config: Config, game: Game, added: timedelta) -> None:
    """Refuse an extension past the game's limits (a move earlier adds nothing)."""
    if added <= timedelta(0):
        return
    caps = extension_caps(config, game)
    if added > caps.one:
        raise LifecycleError(
            f"{game.name}: an extension of {format_duration(added)} is over the limit of "
            f"{format_duration(caps.one)} for one extension ({caps.one_key})"
        )
    so_far = timedelta(seconds=game.extended_s or 0)
    if so_far + added > caps.total:
        raise LifecycleError(
            f"{game.name}: {format_duration(added)} more would make "
            f"{format_duration(so_far + added)} of extensions in all, over the limit of "
            f"{format_duration(caps.total)} ({caps.total_key}; "
            f"{format_duration(so_far)} used so far)"
        )


def extend(
    db: Database,
    game_name: str,
    now: datetime,
    *,
    config: Config,
    by: timedelta | None = None,
    until: datetime | None = None,
    actor: str = "referee",
    via: str | None = None,
) -> datetime:
    """:func:`extend_locked` in a transaction of its own."""
    if (by is None) == (until is None):
        raise LifecycleError("give either --by DURATION or --until TIME")
    with db.transaction() as session:
        game = _game(session, game_name, lock=True)
        return extend_locked(session, config, game, now, by=by, until=until, actor=actor, via=via)


def extend_locked(
    session: Session,
    config: Config,
    game: Game,
    now: datetime,
    *,
    by: timedelta | None = None,
    until: datetime | None = None,
    actor: str,
    via: str | None = None,
) -> datetime:
    """Move the open round's deadline (by a duration, or to a time; ``game`` locked), within
    the game's limits (``max_extend``, ``max_total_extend``: a move later counts, a move
    earlier does not); every active player is told when it moved."""
    if (by is None) == (until is None):
        raise LifecycleError("give either a duration (BY 2d) or a time")
    round_ = _open_round(session, game)
    new = round_.deadline + by if by is not None else until
    assert new is not None
    if new <= now:
        raise LifecycleError(f"{game.name}: {game_time(game, new)} has already passed")
    old = round_.deadline
    added = new - old
    _check_caps(config, game, added)
    if added > timedelta(0):
        game.extended_s = (game.extended_s or 0) + int(added.total_seconds())
    round_.deadline, round_.deadline_source = new, "referee"
    round_.held_at = None  # a held round with a new deadline is judged again at that time
    audit(
        session,
        now,
        actor,
        "extend",
        game,
        via=via,
        round=round_.number,
        old=old.isoformat(),
        new=new.isoformat(),
        extended_s=game.extended_s,
    )
    reason = "extended" if new > old else "earlier"
    enqueue_deadline_notice(session, config, game, round_, old=old, new=new, reason=reason, now=now)
    return new


def pause(
    db: Database,
    game_name: str,
    now: datetime,
    *,
    actor: str = "referee",
    config: Config | None = None,
    via: str | None = None,
) -> None:
    """:func:`pause_locked` in a transaction of its own."""
    with db.transaction() as session:
        game = _game(session, game_name, lock=True)
        pause_locked(session, config, game, now, actor=actor, via=via)


def pause_locked(
    session: Session,
    config: Config | None,
    game: Game,
    now: datetime,
    *,
    actor: str,
    via: str | None = None,
) -> None:
    """Stop the clock (``game`` locked): a paused game's deadline does not fire. With
    ``config``, every active player is told (orders wait until the game resumes)."""
    if game.state != GamePhase.RUNNING:
        raise LifecycleError(f"{game.name}: only a running game can be paused (it is {game.state})")
    game.state, game.paused_at = GamePhase.PAUSED, now
    audit(session, now, actor, "pause", game, via=via)
    round_ = open_round(session, game)
    if config is not None and round_ is not None:
        enqueue_deadline_notice(
            session,
            config,
            game,
            round_,
            old=round_.deadline,
            new=round_.deadline,
            reason="paused",
            now=now,
        )


def resume(
    db: Database,
    game_name: str,
    now: datetime,
    *,
    actor: str = "referee",
    config: Config | None = None,
    via: str | None = None,
) -> datetime:
    """:func:`resume_locked` in a transaction of its own."""
    with db.transaction() as session:
        game = _game(session, game_name, lock=True)
        return resume_locked(session, config, game, now, actor=actor, via=via)


def resume_locked(
    session: Session,
    config: Config | None,
    game: Game,
    now: datetime,
    *,
    actor: str,
    via: str | None = None,
) -> datetime:
    """Restart the clock (``game`` locked): the open deadline, and the schedule after it,
    move by the pause (in whole seconds; it is not an extension: the caps do not count
    it); with ``config``, every active player is told (when it moved)."""
    if game.state != GamePhase.PAUSED or game.paused_at is None:
        raise LifecycleError(f"{game.name}: not paused (it is {game.state})")
    shift = timedelta(seconds=int((now - game.paused_at).total_seconds()))
    round_ = _open_round(session, game)
    old = round_.deadline
    round_.deadline += shift
    round_.deadline_source = "referee"
    round_.held_at = None  # judged again at its new deadline
    game.schedule_shift_s += int(shift.total_seconds())
    game.state, game.paused_at = GamePhase.RUNNING, None
    audit(
        session,
        now,
        actor,
        "resume",
        game,
        via=via,
        shifted_s=int(shift.total_seconds()),
        deadline=round_.deadline.isoformat(),
    )
    if config is not None and round_.deadline > now:
        enqueue_deadline_notice(
            session,
            config,
            game,
            round_,
            old=old,
            new=round_.deadline,
            reason="resumed",
            now=now,
        )
    # else a round reopened after its deadline (rollback): it closes at once, and its
    # close tells the players; a "deadline now" already past would only mislead them
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
    id: str
    """The game id."""
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


def status(db: Database, game_name: str | None = None) -> list[GameStatus]:
    """The referee's view of every game (or one)."""
    with db.transaction() as session:
        return status_locked(session, game_name)


def status_locked(session: Session, game_name: str | None = None) -> list[GameStatus]:
    """:func:`status` in the caller's transaction."""
    query = select(Game).order_by(Game.name)
    games = [_game(session, game_name)] if game_name else list(session.scalars(query))
    return [_status(session, game) for game in games]


def _status(session: Session, game: Game) -> GameStatus:
    players = list(
        session.scalars(select(Player).where(Player.game_id == game.id).order_by(Player.id))
    )
    state = load_state(session, game, players)
    round_ = open_round(session, game)
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

    waiting = (OutboxMessage.game_id == game.id, OutboxMessage.status == OutboxStatus.PENDING)
    since = session.scalar(select(func.min(OutboxMessage.created_at)).where(*waiting))
    last_error = session.scalar(
        select(OutboxMessage.last_error)
        .where(*waiting, OutboxMessage.last_error.is_not(None))
        .order_by(OutboxMessage.id.desc())
        .limit(1)
    )

    return GameStatus(
        id=game.name,
        title=game.title,
        state=game.state,
        timezone=game.timezone,
        rounds_played=game.rounds_played,
        round=round_.number if round_ else None,
        round_turns=round_.turns if round_ else None,
        deadline=round_.deadline if round_ else None,
        deadline_shown=game_time(game, round_.deadline) if round_ else None,
        players=rows,
        result=game.result,
        mail_failed=count(
            OutboxMessage,
            OutboxMessage.game_id == game.id,
            OutboxMessage.status == OutboxStatus.FAILED,
        ),
        mail_pending=count(
            OutboxMessage,
            OutboxMessage.game_id == game.id,
            OutboxMessage.status == OutboxStatus.PENDING,
        ),
        inbound_set_aside=count(
            InboundMessage,
            InboundMessage.game_id == game.id,
            InboundMessage.status == InboundStatus.SET_ASIDE,
        ),
        mail_waiting_since=since,
        mail_waiting_since_shown=game_time(game, since) if since else None,
        mail_last_error=last_error,
    )


def render_status(game: GameStatus) -> str:
    """The status as ``snl-pbem status`` prints it (and a referee's STATUS by mail)."""
    lines = [f"{game.id}: {game.title or '(no title)'} [{game.state}]"]
    if game.round is not None:
        kind = "one turn" if game.round_turns == 1 else "two turns"
        valid = sum(1 for p in game.players if p.orders == "valid")
        lines.append(
            f"  round {game.round} ({kind}), deadline {game.deadline_shown}; "
            f"valid orders from {valid} of {len(game.players)}"
        )
    if game.result:
        lines.append(f"  result: {json.dumps(game.result, sort_keys=True)}")
    width = max([len(p.name) for p in game.players] + [6])
    lines.append(f"  {'player':<{width}}  position  orders")
    for p in game.players:
        note = f" ({'; '.join(p.problems)})" if p.problems else ""
        gone = "  [not in the config]" if not p.active else ""
        lines.append(f"  {p.name:<{width}}  {p.position:>8}  {p.orders}{note}{gone}")
    lines.append(
        f"  mail: {game.mail_pending} waiting to be sent, {game.mail_failed} failed; "
        f"{counted(game.inbound_set_aside, 'incoming message')} set aside"
    )
    if game.mail_pending and game.mail_waiting_since_shown:
        lines.append(f"  the oldest mail waiting was written {game.mail_waiting_since_shown}")
    if game.mail_pending and game.mail_last_error:
        lines.append(f"  last sending error: {game.mail_last_error.splitlines()[0][:200]}")
    if game.mail_failed:
        lines.append(
            f"  failed mail: snl-pbem outbox list --game {game.id}; "
            "send it again with outbox retry ID"
        )
    return "\n".join(lines) + "\n"
