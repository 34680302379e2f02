"""What the scheduler asks of the database, and the mail it sends: each a plain function
over the database, so the scheduler (``snl_pbem.runners.scheduler``) owns timing only.

Open rounds and their deadlines, reminders, close-when-all-in, the circuit breaker's
held rounds, and the messages still waiting to be processed before a close. What a close
job decides (close, hold, wait or re-plan) is ``snl_pbem.app.deadline``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, func, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from snl_pbem.app.lookup import game_time, ruleset_of, settings_of
from snl_pbem.app.outbox import enqueue_mail, greetings
from snl_pbem.app.players import is_absent
from snl_pbem.app.state import awaiting, latest_orders, load_state
from snl_pbem.config import Config
from snl_pbem.rules.words import reread
from snl_pbem.store import Database, Game, InboundMessage, OrderRecord, Player, Round
from snl_pbem.store.models import MailboxState, PlanChange
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind, RoundPhase
from snl_pbem.timeutil import format_duration


@dataclass(frozen=True)
class OpenRound:
    """An open round of a running game, as the scheduler plans its jobs."""

    game: str
    number: int
    deadline: datetime
    held: bool
    """Held by the circuit breaker: released by the held-rounds check only."""
    remind_at: datetime | None
    """When its reminders are due (None: the game sends none, or they were sent, or the
    time falls before the round opened)."""


def open_rounds(db: Database) -> list[OpenRound]:
    """Every running game's open round (the full plan: at start, on reload, and now and then
    as a safety net under the change feed)."""
    with db.transaction() as session:
        return _open_rounds(session, None)


def game_rounds(
    db: Database, *, names: Collection[str] = (), ids: Collection[int] = ()
) -> tuple[list[str], list[OpenRound]]:
    """The names of the games named or numbered (those that exist), and the open rounds of
    those that run: what re-planning just these games needs."""
    found: list[str] = []
    rounds: list[OpenRound] = []
    with db.transaction() as session:
        for column, keys in ((Game.name, sorted(set(names))), (Game.id, sorted(set(ids)))):
            for start in range(0, len(keys), 500):  # bound the IN list
                chunk = keys[start : start + 500]
                found += session.scalars(select(Game.name).where(column.in_(chunk))).all()
                rounds += _open_rounds(session, column.in_(chunk))
    return found, rounds


def game_open_rounds(session: Session, game_id: int) -> list[OpenRound]:
    """The open round of one game, if it runs (in the caller's transaction)."""
    return _open_rounds(session, Game.id == game_id)


def _open_rounds(session: Session, which: ColumnElement[bool] | None) -> list[OpenRound]:
    query = (
        select(
            Game.name,
            Game.remind_before_s,
            Round.number,
            Round.deadline,
            Round.held_at,
            Round.reminded_at,
            Round.opened_at,
        )
        .join(Round, Round.game_id == Game.id)
        .where(Game.state == GamePhase.RUNNING, Round.state == RoundPhase.OPEN)
    )
    if which is not None:
        query = query.where(which)
    found = []
    for name, remind_before_s, number, deadline, held_at, reminded_at, opened_at in session.execute(
        query
    ):
        remind_at = None
        if remind_before_s and reminded_at is None:
            at = deadline - timedelta(seconds=remind_before_s)
            if at > opened_at:
                remind_at = at
        found.append(OpenRound(name, number, deadline, held_at is not None, remind_at))
    return found


@dataclass
class ChangeFeed:
    """How far a scheduler has read ``plan_changes`` (the rows the database's triggers write
    whenever something that may move a game's jobs changes, migration 0007).

    SQLite has one writer at a time, so row ids come in commit order: what is new is what
    lies past ``last_id``. PostgreSQL commits in any order, so a row with a lower id may
    become visible after a higher one; there the feed keeps ``horizon``, the oldest
    transaction that was still running when it last looked (rows of every transaction
    below it are committed or never will be), and reads every row from it on, leaving out
    those it has already seen."""

    last_id: int = 0
    horizon: int | None = None
    seen: set[int] = field(default_factory=set)


def feed_start(db: Database) -> ChangeFeed:
    """A feed from now on: take it *before* reading the full plan, so that whatever changes
    after that read is in the feed."""
    with db.transaction() as session:
        if db.is_sqlite:
            return ChangeFeed(last_id=session.scalar(select(func.max(PlanChange.id))) or 0)
        return ChangeFeed(horizon=_horizon(session))


def read_changes(db: Database, feed: ChangeFeed) -> set[int]:
    """The ids of the games changed since ``feed`` last looked (it moves on)."""
    with db.transaction() as session:
        if db.is_sqlite:
            rows = session.execute(
                select(PlanChange.id, PlanChange.game_id).where(PlanChange.id > feed.last_id)
            ).all()
            if rows:
                feed.last_id = max(row_id for row_id, _ in rows)
            return {game_id for _, game_id in rows}
        horizon = _horizon(session)  # before the read: a row it cannot see yet lies above it
        rows3 = session.execute(
            select(PlanChange.id, PlanChange.game_id, PlanChange.tx).where(
                PlanChange.tx >= (feed.horizon or 0)
            )
        ).all()
        changed = {game_id for row_id, game_id, _ in rows3 if row_id not in feed.seen}
        feed.seen = {row_id for row_id, _, tx in rows3 if tx is not None and tx >= horizon}
        feed.horizon = horizon
        return changed


def _horizon(session: Session) -> int:
    return int(session.scalar(text("SELECT txid_snapshot_xmin(txid_current_snapshot())")))


def trim_changes(db: Database, up_to: int) -> int:
    """Delete the feed's rows below id ``up_to`` (the newest id at the previous daily trim:
    every running scheduler has read them long since; one that was down rebuilds its whole
    plan when it starts). Returns the newest id now, for the next trim."""
    with db.transaction() as session:
        # "<", not "<=": the newest row stays, so SQLite never hands out an id again
        session.execute(delete(PlanChange).where(PlanChange.id < up_to))
        return session.scalar(select(func.max(PlanChange.id))) or 0


def waiting_before_deadline(db: Database, game_name: str, number: int) -> list[int]:
    """Stored messages received by round ``number``'s deadline and not yet processed."""
    with db.transaction() as session:
        deadline = session.scalar(
            select(Round.deadline)
            .join(Game, Game.id == Round.game_id)
            .where(Game.name == game_name, Round.number == number)
        )
        return [] if deadline is None else list(waiting_by(session, deadline))


def waiting_by(session: Session, deadline: datetime) -> tuple[int, ...]:
    """Stored messages received by ``deadline`` and not yet processed, oldest first."""
    return tuple(session.scalars(_WAITING, {"deadline": deadline}).all())


_WAITING = (  # built once: a deadline storm asks it of every game
    select(InboundMessage.id)
    .where(
        InboundMessage.status == InboundStatus.NEW,
        InboundMessage.received_at <= bindparam("deadline"),
    )
    .order_by(InboundMessage.id)
)


def held_rounds(db: Database) -> list[tuple[str, int]]:
    """(game, round) of every open round the circuit breaker holds."""
    with db.transaction() as session:
        rows = session.execute(
            select(Game.name, Round.number)
            .join(Round, Round.game_id == Game.id)
            .where(
                Round.state == RoundPhase.OPEN,
                Round.held_at.is_not(None),
                Game.state == GamePhase.RUNNING,
            )
        ).all()
        return [(game_name, number) for game_name, number in rows]


def reminders_due_at(db: Database, game_name: str, number: int) -> datetime | None:
    """When round ``number``'s reminders are due under its deadline as it stands now (the
    referee may have moved it); None if there is no such game or round."""
    with db.transaction() as session:
        game = session.scalar(select(Game).where(Game.name == game_name))
        if game is None:
            return None
        deadline = session.scalar(
            select(Round.deadline).where(Round.game_id == game.id, Round.number == number)
        )
        if deadline is None:
            return None
        return deadline - timedelta(seconds=game.remind_before_s or 0)


def send_reminders(db: Database, config: Config, game_name: str, number: int, now: datetime) -> int:
    """Remind each active player without valid orders for the open round ``number``, once
    (the round records it); returns how many were reminded."""
    sent = 0
    with db.transaction() as session:
        game, round_ = _open_round(session, game_name, number, lock=True)
        if game is None or round_ is None or round_.reminded_at is not None:
            return 0
        round_.reminded_at = now
        latest = latest_orders(session, round_.id)
        ruleset, settings = ruleset_of(game), settings_of(game)
        active = list(
            session.scalars(select(Player).where(Player.game_id == game.id, Player.active))
        )
        expected = awaiting(session, game, active)
        waiting = [
            player
            for player in active
            if player.name in expected
            and not _valid(latest.get(player.id))
            and not is_absent(player, round_.deadline)  # ABSENT UNTIL: no reminders
        ]
        if not waiting:
            return 0
        state = load_state(session, game, waiting)  # one query for all of them
        hello = greetings(session, game, waiting)
        for player in waiting:
            mine = latest.get(player.id)
            enqueue_mail(
                session,
                config,
                game=game,
                kind=MailKind.REMINDER,
                to=player.email,
                now=now,
                template=f"{ruleset.name}/reminder.txt.j2",
                player=player,
                hello=hello[player.id],
                round=round_,
                deadline=game_time(game, round_.deadline),
                # kept as English: in the reader's words again (snl_pbem.rules.words)
                problems=[reread(str(p)) for p in mine.problems] if mine is not None else [],
                rules=ruleset.player_view(settings, state, player.name),
            )
            sent += 1
    return sent


def all_in_close_at(db: Database, game_name: str, now: datetime) -> tuple[int, datetime] | None:
    """close_when_all_in: (round, when to close) once every player of the game's open round
    has valid orders (the settle time after ``now``, never after the deadline); else None."""
    with db.transaction() as session:
        game = session.scalar(select(Game).where(Game.name == game_name))
        if game is None or not game.close_when_all_in or game.state != GamePhase.RUNNING:
            return None
        round_ = session.scalar(
            select(Round).where(Round.game_id == game.id, Round.state == RoundPhase.OPEN)
        )
        if round_ is None or not all_in_locked(session, game, round_):
            return None
        return round_.number, min(now + timedelta(seconds=game.settle_s), round_.deadline)


def hold_round(
    db: Database,
    config: Config,
    game_name: str,
    number: int,
    problem: str,
    now: datetime,
    healthy_within: timedelta,
) -> bool:
    """The circuit breaker: hold the open round ``number`` and tell the referee, once.
    False if it is not open or already held."""
    with db.transaction() as session:
        game, round_ = _open_round(session, game_name, number, lock=True)
        if game is None or round_ is None or round_.held_at is not None:
            return False
        round_.held_at = now
        state = session.scalars(select(MailboxState)).first()
        enqueue_mail(
            session,
            config,
            game=game,
            kind=MailKind.ROUND_HELD,
            to=config.settings.mail.referee,
            now=now,
            template="referee/round_held.txt.j2",
            round=round_,
            deadline=game_time(game, round_.deadline),
            last_ok=game_time(game, state.last_ok_at) if state and state.last_ok_at else "never",
            limit=format_duration(healthy_within),
            error=(state.last_error if state and state.last_error else problem),
        )
    return True


def all_in_locked(session: Session, game: Game, round_: Round) -> bool:
    """Every player the round waits for has valid orders (in the caller's transaction)."""
    latest = latest_orders(session, round_.id)
    players = list(  # a resigned seat sends nothing: it is not waited for
        session.scalars(
            select(Player).where(Player.game_id == game.id, Player.resigned_at.is_(None))
        )
    )
    expected = awaiting(session, game, players)  # classic: only those still racing (C12)
    return all(_valid(latest.get(p.id)) for p in players if p.name in expected)


def _valid(record: OrderRecord | None) -> bool:
    """Orders that count as sent: valid, and not withdrawn."""
    return record is not None and record.valid and not record.withdrawn


def _open_round(
    session: Session, game_name: str, number: int, *, lock: bool = False
) -> tuple[Game | None, Round | None]:
    """The game and its round ``number`` if that round is open (locked for update if asked)."""
    game = session.scalar(select(Game).where(Game.name == game_name))
    if game is None:
        return None, None
    query = select(Round).where(
        Round.game_id == game.id, Round.number == number, Round.state == RoundPhase.OPEN
    )
    return game, session.scalar(query.with_for_update() if lock else query)
