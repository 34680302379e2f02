"""Seat views: what anyone may see (LIST, standings, the seats and how many observe) and
the referee's view of the seats. Reads only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import game_by_name, game_time, open_round
from snl_pbem.app.membership import game_config, seated, signups
from snl_pbem.app.outbox import mail_language
from snl_pbem.app.players import is_absent
from snl_pbem.app.state import observers
from snl_pbem.config import Config, GameConfig
from snl_pbem.i18n import DEFAULT as DEFAULT_LANGUAGE
from snl_pbem.i18n import When
from snl_pbem.rules.words import counted, tr
from snl_pbem.store import (
    Database,
    Game,
    Player,
    Round,
    TurnRecord,
)
from snl_pbem.store.states import GamePhase, SignupState
from snl_pbem.timeutil import zone


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
        starts = starts_text(found, game.timezone) if game.state == GamePhase.NEW else ""
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


def starts_text(found: GameConfig, timezone: str) -> str:
    """When a forming game starts, in words (LIST and the index page)."""
    if found.starts_at is not None:
        return When(found.starts_at, zone(timezone))
    if found.settings.starts == "when_full":
        return tr("when full")
    return tr("when the referee starts it")


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
    both = signups(session, game, SignupState.STANDBY, SignupState.WAITING)  # one query
    standby = [s for s in both if s.state == SignupState.STANDBY]
    if standby:
        lines.append("standby: " + ", ".join(f"{s.name} <{s.email}>" for s in standby))
    waiting = [s for s in both if s.state == SignupState.WAITING]
    if waiting:
        lines.append("waiting for your approval: " + ", ".join(s.name for s in waiting))
    return lines


def positions_line(
    config: Config, game: Game, players: Sequence[Player], positions: Iterable[tuple[str, int]]
) -> str:
    """Everyone's position (``positions``: name and position, in the standings' order) for
    the referee's summary: a player whose mail is not in the game's language has its code
    beside their name (``ann 38, chai (th) 38``; ``outbox.mail_language``)."""
    table = game_config(config, game)
    usual = table.settings.language if table is not None else DEFAULT_LANGUAGE
    languages = {}
    for player in players:
        if player.active:
            code = mail_language(config, game, player.email, "player/", player)
            if code != usual:
                languages[player.name] = f" ({code})"
    return ", ".join(f"{name}{languages.get(name, '')} {position}" for name, position in positions)


def in_game(
    db: Database,
    config: Config,
    game_name: str,
    now: datetime,
    action: Callable[[Session, Config, Game, datetime], str],
) -> str:
    """Run a session-level action (``replace_seat``, ``approve_signup``...) in a transaction
    of its own, the game row locked; its line of what it did."""
    with db.transaction() as session:
        game = game_by_name(session, game_name, lock=True)
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


def seats_of(db: Database, game_name: str, now: datetime) -> Seats:
    with db.transaction() as session:
        game = game_by_name(session, game_name)
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
