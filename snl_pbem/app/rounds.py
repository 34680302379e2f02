"""Orders in, rounds closed: the game's state changes, each in one transaction.

``close_round`` reads every player's counting orders, adjudicates with the
rules engine, writes the results, and opens the next round (or ends the game)
in ONE transaction. It is guarded: the round's state changes from ``open``
with ``UPDATE ... WHERE state = 'open'`` (under a row lock on PostgreSQL,
BEGIN IMMEDIATE on SQLite), so two processes, or a retry after a crash, can
never close a round twice. Several servers on one PostgreSQL share a deadline storm
with ``skip_locked`` (``snl_pbem.app.close_claim``).

Over 500 lines: a round's close and its undoing (``rollback_round``) write and remove the
same rows, and are kept side by side so that one is read against the other.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Table, delete, or_, select, update
from sqlalchemy.orm import Session

from snl_pbem.app.close_claim import claim_closing
from snl_pbem.app.lookup import (
    audit,
    game_by_name,
    open_round,
    open_round_for_orders,
    ruleset_of,
    scheduled_deadline,
    settings_of,
    turns_in_round,
)
from snl_pbem.app.reopened import rolled_back_before, tell_closed_again, tell_rolled_back
from snl_pbem.app.reports import enqueue_deadline_notice, enqueue_round_mail
from snl_pbem.app.schedule import OpenRound, game_open_rounds
from snl_pbem.app.seats import fill_resigned_seats
from snl_pbem.app.state import counting_orders, game_players, load_state, player_state
from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.errors import LifecycleError
from snl_pbem.rules.ruleset import Adjudication, OrderReading, Orders
from snl_pbem.rules.words import agree, counted
from snl_pbem.store import (
    Database,
    Game,
    OrderRecord,
    Player,
    Round,
    RoundTally,
    TurnRecord,
    deferred,
)
from snl_pbem.store.bulk import insert_rows
from snl_pbem.store.models import dice_text
from snl_pbem.store.states import GamePhase, RoundPhase

log = logging.getLogger("snl_pbem.rounds")

TURN_COLUMNS = (
    "game_id",
    "round_id",
    "player_id",
    "turn",
    "die",
    "start",
    "target",
    "final",
    "events",
)


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a round close.

    A close makes a few objects per player, none of them cyclic garbage, yet with
    many players the collector would walk the whole heap several times over
    (a third of the close's time at 10,000 players). It runs again right after.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class OrderReceipt:
    """What became of a submitted order set, for the acknowledgement."""

    round: int
    valid: bool
    problems: tuple[str, ...]
    reading: OrderReading
    """The ruleset's reading of the orders (its part of the acknowledgement)."""


def submit_orders(
    session: Session,
    game: Game,
    player: Player,
    *,
    dice: Sequence[int] | None,
    nomination: int | None,
    received_at: datetime,
    source: str = "email",
    inbound_id: int | None = None,
    withdraw: bool = False,
    clear: bool = False,
    roll: bool = False,
) -> OrderReceipt:
    """Store one order set for the open round (every one is kept; the latest counts),
    as the game's ruleset reads it. ``dice`` None: the message had no DICE line."""
    round_ = open_round_for_orders(session, game)
    if round_ is None or game.state not in (GamePhase.RUNNING, GamePhase.PAUSED):
        raise LifecycleError(f"{game.name}: no round is open for orders")
    orders = Orders(
        tuple(dice) if dice is not None else None,
        nomination,
        clear=clear,
        withdraw=withdraw,
        roll=roll,
    )
    with session.no_autoflush:  # what is pending (the message's row) is not read here
        state = player_state(session, game, player)
    reading = ruleset_of(game).read_orders(
        settings_of(game), state, player.name, orders, round_.turns
    )
    # a plain row on the session's connection, not an object for the session to flush:
    # one order of a batch of many, written with the batch's others (``deferred``)
    deferred.insert_row(
        session,
        cast(Table, OrderRecord.__table__),
        {
            "round_id": round_.id,
            "player_id": player.id,
            "inbound_id": inbound_id,
            "received_at": received_at,
            "source": source,
            "dice": dice_text(reading.dice),
            "trapdoor": reading.nomination,
            "valid": reading.valid and not withdraw,
            "problems": list(reading.problems),
            "withdrawn": withdraw,
        },
    )
    return OrderReceipt(round_.number, reading.valid, reading.problems, reading)


@dataclass(frozen=True)
class CloseOutcome:
    game: str
    round: int
    adjudication: Adjudication
    next_round: int | None
    next_deadline: datetime | None
    open_rounds: list[OpenRound] | None = field(default=None, compare=False, repr=False)
    """With ``close_round(plan=True)``: the game's open rounds as the close left them, read
    in its transaction, for the scheduler's re-plan of this game (None: not read)."""

    @property
    def result(self) -> Any:
        """The ruleset's own record of the round (the postal game's RoundResult)."""
        return self.adjudication.details


class RoundBusy(Exception):
    """Another server is closing this game's round now (``close_round(skip_locked=True)``):
    it was skipped, not waited for. Look again later: if that server died mid-close, its
    transaction was rolled back and the round is still open."""

    def __init__(self, game_name: str, number: int | None) -> None:
        self.game_name = game_name
        self.number = number
        which = "its round" if number is None else f"round {number}"
        super().__init__(f"{game_name}: {which} is being closed by another server")


def close_round(
    db: Database,
    game_name: str,
    now: datetime,
    *,
    actor: str = "scheduler",
    expect_round: int | None = None,
    config: Config | None = None,
    via: str | None = None,
    skip_locked: bool = False,
    plan: bool = False,
) -> CloseOutcome | None:
    """Close the game's open round exactly once; None if there is none (already closed).

    With ``config``, the round's mail (reports, referee summary) is enqueued in the
    same transaction; a close by the referee before the round's deadline is first
    announced to every active player (the deadline notice, "closed early").

    ``expect_round`` guards a scheduled close: if the open round is another one
    (closed and reopened meanwhile), nothing happens.

    ``skip_locked`` (the scheduler's closes): a game another server is closing now raises
    ``RoundBusy`` at once, not waited for. No effect on SQLite (one write lock in all).
    ``plan``: the outcome holds the game's open rounds after the close (``open_rounds``)."""
    with db.transaction() as session:
        if not db.is_sqlite and not claim_closing(session, game_name, wait=not skip_locked):
            raise RoundBusy(game_name, expect_round)
        game = game_by_name(session, game_name, lock=True)
        outcome = close_round_locked(
            session, game, now, actor=actor, expect_round=expect_round, config=config, via=via
        )
        if outcome is None:
            return None
        if plan:  # the re-plan's read, here rather than in a transaction of its own
            outcome = replace(outcome, open_rounds=game_open_rounds(session, game.id))
        crash_point("close.before-commit", prepare=session.flush)
    crash_point("close.after-commit")
    log.info("%s: round %d closed by %s", game_name, outcome.round, actor)
    return outcome


def close_round_locked(
    session: Session,
    game: Game,
    now: datetime,
    *,
    actor: str,
    expect_round: int | None = None,
    config: Config | None = None,
    via: str | None = None,
) -> CloseOutcome | None:
    """:func:`close_round` in the caller's transaction (``game`` locked by the caller):
    the open round is claimed with ``UPDATE ... WHERE state = 'open'``, so it is closed
    once whoever else tries; None when there is none to close."""
    round_ = open_round(session, game, lock=True)
    if round_ is None or (expect_round is not None and round_.number != expect_round):
        return None
    claimed: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(Round)
        .where(Round.id == round_.id, Round.state == RoundPhase.OPEN)
        .values(state=RoundPhase.CLOSED, closed_at=now, closed_by=actor[:64])
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:  # someone else closed it first
        return None
    by_referee = via is not None or actor == "referee"
    with gc_paused():
        return _adjudicate_and_store(session, game, round_, now, actor, config, via, by_referee)


def _adjudicate_and_store(
    session: Session,
    game: Game,
    round_: Round,
    now: datetime,
    actor: str,
    config: Config | None = None,
    via: str | None = None,
    by_referee: bool = False,
) -> CloseOutcome:
    players = game_players(session, game)
    state = load_state(session, game, players)
    if state.rounds_played != round_.number - 1:
        raise LifecycleError(
            f"{game.name}: round {round_.number} is open but "
            f"{counted(state.rounds_played, 'round')} {agree(state.rounds_played, 'was', 'were')} "
            "played"
        )
    orders = counting_orders(session, round_, players)
    decided = ruleset_of(game).adjudicate(settings_of(game), state, orders)
    excused = _excused(session, game, round_)
    if excused and decided.nmr:  # absent or resigned: the default does not count against them
        decided = replace(
            decided,
            nmr={
                name: f"{why} ({excused[name]})" if name in excused else why
                for name, why in decided.nmr.items()
            },
        )
    after = decided.after

    ids = {p.name: p.id for p in players}
    game_id, round_id = game.id, round_.id
    described: dict[int, str] = {}  # moves share their events tuples: describe each once
    rows = []
    for turn in decided.turns:
        number = turn.turn
        for name, move in turn.moves.items():
            events = described.get(id(move.events))
            if events is None:
                events = described[id(move.events)] = "; ".join(map(str, move.events))
            rows.append(
                (
                    game_id,
                    round_id,
                    ids[name],
                    number,
                    move.die,
                    move.start,
                    move.target,
                    move.final,
                    events,
                )
            )
    insert_rows(session, TurnRecord, TURN_COLUMNS, rows)
    result_json = decided.result.as_json() if decided.result is not None else None
    tally = decided.tally
    session.add(
        RoundTally(
            round_id=round_.id,
            nominations=dict(tally.get("nominations", {})),
            defaulted=list(tally.get("defaulted", [])),
            votes=dict(tally.get("votes", {})),
            threshold=tally.get("threshold", 0),
            trapdoors=list(tally.get("trapdoors", [])),
            by_lot=bool(tally.get("by_lot", False)),
            nmr=dict(decided.nmr),
            result=result_json,
            record=dict(decided.record) if decided.record is not None else None,
            adjudicated_at=now,
        )
    )
    game.rounds_played = after.rounds_played
    game.turns_played = after.turns_played
    next_round = next_deadline = next_turns = None
    if decided.result is not None:
        game.state, game.result, game.ended_at = GamePhase.OVER, result_json, now
    else:
        next_round = round_.number + 1
        next_deadline = scheduled_deadline(game, next_round, now)
        next_turns = turns_in_round(game, next_round)
        session.add(
            Round(
                game_id=game.id,
                number=next_round,
                turns=next_turns,
                deadline=next_deadline,
                opened_at=now,
            )
        )
    if config is not None and next_round is not None:
        fill_resigned_seats(session, config, game, now)  # auto_replace: standby takes a seat
    again = config is not None and rolled_back_before(session, game, round_.number)
    if config is not None and again:
        # its players hold a report of it that no longer counts: the new one replaces it
        tell_closed_again(session, config, game, round_, now, over=decided.result is not None)
    elif config is not None and by_referee and now < round_.deadline:
        enqueue_deadline_notice(
            session, config, game, round_, old=round_.deadline, new=now, reason="closed", now=now
        )
    if config is not None:
        enqueue_round_mail(
            session,
            config,
            game,
            round_,
            decided,
            next_round=next_round,
            next_turns=next_turns,
            next_deadline=next_deadline,
            actor=actor,
            now=now,
            replaces=again,
        )
    audit(
        session,
        now,
        actor,
        "close-round",
        game,
        via=via,
        round=round_.number,
        nmr=len(decided.nmr),
        trapdoors=len(tally.get("trapdoors", [])),
        result=result_json,
    )
    return CloseOutcome(game.name, round_.number, decided, next_round, next_deadline)


def _excused(session: Session, game: Game, round_: Round) -> dict[str, str]:
    """Players the no-orders default does not count against this round: absent over its
    deadline (ABSENT UNTIL), or resigned (the seat plays on until it is filled)."""
    rows = session.execute(
        select(Player.name, Player.absent_until, Player.resigned_at).where(
            Player.game_id == game.id,
            or_(Player.absent_until > round_.deadline, Player.resigned_at.is_not(None)),
        )
    ).all()
    return {
        name: "resigned" if resigned is not None else "absent, excused"
        for name, absent_until, resigned in rows
    }


def close_with_backup(
    db: Database,
    game_name: str,
    now: datetime,
    *,
    backups: int,
    backup_dir: Path | None = None,
    actor: str = "scheduler",
    expect_round: int | None = None,
    config: Config | None = None,
    via: str | None = None,
    skip_locked: bool = False,
    plan: bool = False,
) -> CloseOutcome | None:
    """SQLite: write an online backup first (the last ``backups`` are kept), then close."""
    db.backup(backup_dir, f"{game_name}-before-close", backups)
    return close_round(
        db,
        game_name,
        now,
        actor=actor,
        expect_round=expect_round,
        config=config,
        via=via,
        skip_locked=skip_locked,
        plan=plan,
    )


def due_rounds(db: Database, now: datetime) -> list[tuple[str, int, datetime]]:
    """Open rounds of running games whose deadline has passed, oldest deadline first."""
    with db.transaction() as session:
        rows = session.execute(
            select(Game.name, Round.number, Round.deadline)
            .join(Round, Round.game_id == Game.id)
            .where(
                Game.state == GamePhase.RUNNING,
                Round.state == RoundPhase.OPEN,
                Round.deadline <= now,
            )
            .order_by(Round.deadline, Game.name)
        )
        return [(game_name, number, deadline) for game_name, number, deadline in rows]


def rollback_round(
    db: Database,
    game_name: str,
    now: datetime,
    *,
    actor: str = "referee",
    force: bool = False,
    via: str | None = None,
    config: Config | None = None,
) -> int:
    """:func:`rollback_round_locked` in a transaction of its own."""
    with db.transaction() as session:
        game = game_by_name(session, game_name, lock=True)
        return rollback_round_locked(
            session, game, now, actor=actor, force=force, via=via, config=config
        )


def rollback_round_locked(
    session: Session,
    game: Game,
    now: datetime,
    *,
    actor: str,
    force: bool = False,
    via: str | None = None,
    force_hint: str = "rollback --force discards them (their emails stay stored)",
    reveal_hint: str = "rollback --force reopens it all the same",
    config: Config | None = None,
) -> int:
    """Reopen the last closed round (``game`` locked): its results are discarded, its
    orders kept.

    The game is left paused so that the scheduler does not close it again at
    once; correct what needs correcting, then ``close-round`` or ``resume``.
    The next round is removed; if it already has orders, only with ``force``
    (the messages they came in stay stored and can be ingested again); without it the
    refusal ends with ``force_hint``. A finished game whose reveal went out (R19: every
    player has seen the board, all dice and the trapdoors) is reopened only with ``force``
    too (``reveal_hint``): its players would play on knowing what they must not. With
    ``config``, every player and observer is told what now counts (snl_pbem.app.reopened).
    """
    game_name = game.name
    if game.state == GamePhase.OVER and game.reveal_after_game and not force:
        raise LifecycleError(
            f"{game_name}: the game is over and its reveal has gone to every player (the "
            "board, all dice and the trapdoors): a replayed round would be played knowing "
            "them; " + reveal_hint
        )
    last = session.scalar(
        select(Round)
        .where(Round.game_id == game.id, Round.state == RoundPhase.CLOSED)
        .order_by(Round.number.desc())
        .limit(1)
        .with_for_update()
    )
    if last is None:
        raise LifecycleError(f"{game_name}: no round has been closed yet")
    following = session.scalar(
        select(Round).where(Round.game_id == game.id, Round.number == last.number + 1)
    )
    dropped: dict[int, int] = {}
    if following is not None:
        for player_id in session.scalars(
            select(OrderRecord.player_id).where(OrderRecord.round_id == following.id)
        ):
            dropped[player_id] = dropped.get(player_id, 0) + 1
        count = sum(dropped.values())
        if count and not force:
            raise LifecycleError(
                f"{game_name}: round {following.number} already has "
                f"{counted(count, 'order set')}; " + force_hint
            )
        session.delete(following)
        session.flush()
    first_turn = session.scalar(
        select(TurnRecord.turn)
        .where(TurnRecord.round_id == last.id)
        .order_by(TurnRecord.turn)
        .limit(1)
    )
    was_over = game.state == GamePhase.OVER
    session.execute(delete(TurnRecord).where(TurnRecord.round_id == last.id))
    session.execute(delete(RoundTally).where(RoundTally.round_id == last.id))
    last.state, last.closed_at, last.closed_by = RoundPhase.OPEN, None, None
    game.rounds_played = last.number - 1
    game.turns_played = (first_turn or 1) - 1
    game.result, game.ended_at = None, None
    game.state, game.paused_at = GamePhase.PAUSED, now
    audit(session, now, actor, "rollback", game, via=via, round=last.number, force=force)
    if config is not None:
        tell_rolled_back(session, config, game, last, now, was_over=was_over, dropped=dropped)
    return last.number
