"""Looking a game up: by its name, its open round, its ruleset and settings, its clock and
its deadlines, its players' careers; and the audit trail every change writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from snl_pbem.app.txcache import remember
from snl_pbem.config import Schedule
from snl_pbem.errors import no_such_game
from snl_pbem.i18n import When
from snl_pbem.rules import Board
from snl_pbem.rules.ruleset import FinishedGame, Ruleset, RulesetSettings, get_ruleset
from snl_pbem.store import (
    AuditEntry,
    Game,
    Player,
    Round,
    RoundTally,
)
from snl_pbem.store.states import GamePhase, RoundPhase
from snl_pbem.timeutil import wall_clock_add, zone


def audit(
    session: Session,
    now: datetime,
    actor: str,
    action: str,
    game: Game | None,
    *,
    via: str | None = None,
    **detail: Any,
) -> None:
    """Record an action: who (``actor``), how (``via``: "cli" or "mail" for a person's
    action; None for the server's own), what, on which game, and its details."""
    session.add(
        AuditEntry(
            at=now,
            actor=actor,
            action=action,
            game_id=game.id if game else None,
            detail=detail,
            via=via,
        )
    )


def game_by_name(session: Session, game_name: str, *, lock: bool = False) -> Game:
    """The game named ``game_name`` (locked for update when ``lock``); NotFound, in the one
    wording of an unknown game, when the database has none."""
    query = select(Game).where(Game.name == game_name)
    game = session.scalar(query.with_for_update() if lock else query)
    if game is None:
        known = list(session.scalars(select(Game.name).order_by(Game.name)))
        raise no_such_game(game_name, known, "the database")
    return game


def open_round(session: Session, game: Game, *, lock: bool = False) -> Round | None:
    """The game's open round, if it has one (locked for update when ``lock``)."""
    query = select(Round).where(Round.game_id == game.id, Round.state == RoundPhase.OPEN)
    return session.scalar(query.with_for_update() if lock else query)


def open_round_for_orders(session: Session, game: Game) -> Round | None:
    """``open_round`` as the intake reads it for an order set, once a batch (``txcache``:
    the batch holds the game's lock, so no close can change it meanwhile, and a message
    that does more than send orders makes the batch read it anew)."""
    return remember(session, open_round_key(game.id), lambda: open_round(session, game))


def open_round_key(game_id: int) -> tuple[str, int]:
    """txcache key: the game's open round (``open_round_for_orders``; read ahead for a
    batch's games at once: ``app.ahead``)."""
    return ("open round", game_id)


def game_time(game: Game, when: datetime) -> When:
    """A time as the game's players read it: in the game's zone, in the one format (its
    ``str`` value, English); in a mail, in the mail's language (snl_pbem.i18n.When)."""
    return When(when, zone(game.timezone))


def ruleset_of(game: Game) -> Ruleset:
    """The game's ruleset (``ruleset`` in its config; ``postal`` by default)."""
    return get_ruleset(game.ruleset)


def settings_of(game: Game) -> RulesetSettings:
    """What the game's ruleset needs of it: its board and its fixed options. Kept with the
    game's row for as long as each of its columns holds the very object it was made from:
    a row read again, or given new values, holds others, and is made anew. A board or
    options changed in place would not be seen: nothing does that (they are given anew,
    as config sync does), and nothing must. Made anew at every order, with its board's
    JSON: 5.3 us, against 2.0 kept (issue 23)."""
    made_of = (game.board, game.double_from_round, game.trapdoor_rule, game.seed, game.options)
    kept: tuple[tuple[object, ...], RulesetSettings] | None = vars(game).get(_SETTINGS)
    if kept is not None and all(a is b for a, b in zip(kept[0], made_of, strict=True)):
        return kept[1]
    settings = RulesetSettings(
        board=_board(json.dumps(game.board, sort_keys=True)),
        double_from_round=game.double_from_round,
        trapdoor_rule=game.trapdoor_rule,
        seed=game.seed,
        options=game.options or {},
    )
    vars(game)[_SETTINGS] = (made_of, settings)
    return settings


_SETTINGS = "_snl_pbem_settings"
"""A Game row's attribute: its settings and what they were made from (``settings_of``)."""


@lru_cache(maxsize=64)
def _board(table: str) -> Board:
    return Board.from_mapping(json.loads(table))


def career(session: Session, game: Game, player: Player) -> Mapping[str, Any]:
    """The player's record (by address) across every finished game of this game's ruleset
    on the server, in the ruleset's terms (the classic game's statistics; {} for postal)."""
    return careers(session, game, [player])[player.email.lower()]


def careers(
    session: Session, game: Game, players: Sequence[Player]
) -> dict[str, Mapping[str, Any]]:
    """:func:`career` for several players at once (one query), by lower-cased address."""
    addresses = {p.email.lower() for p in players}
    rows = session.execute(
        select(func.lower(Player.email), Player.name, Game.result, RoundTally.record)
        .join(Game, Game.id == Player.game_id)
        .join(Round, and_(Round.game_id == Game.id, Round.number == Game.rounds_played))
        .join(RoundTally, RoundTally.round_id == Round.id)
        .where(
            Game.ruleset == game.ruleset,
            Game.state == GamePhase.OVER,
            func.lower(Player.email).in_(addresses),
        )
        .order_by(Game.id)
    ).all()
    finished: dict[str, list[FinishedGame]] = {address: [] for address in addresses}
    for address, name, result, record in rows:
        finished[address].append(FinishedGame(name, result or {}, record or {}))
    ruleset = ruleset_of(game)
    return {address: ruleset.career(games) for address, games in finished.items()}


def turns_in_round(game: Game, round_number: int) -> int:
    """How many turns the game's round ``round_number`` has (the ruleset says)."""
    return ruleset_of(game).turns_in_round(settings_of(game), round_number)


def schedule_from_game(game: Game) -> Schedule:
    data = game.schedule
    length = data.get("round_length_s")
    return Schedule(
        zone(game.timezone),
        datetime.fromisoformat(data["first"]),
        timedelta(seconds=length) if length else None,
        tuple(datetime.fromisoformat(d) for d in data.get("explicit", [])),
    )


def scheduled_deadline(game: Game, round_number: int, now: datetime) -> datetime:
    """The deadline a newly opened round gets: the schedule, moved by any pauses.

    A round always gets time to play: if its scheduled deadline has passed or is
    too close (the server was down, or the previous round was extended), it gets
    one round length from now instead.
    """
    schedule = schedule_from_game(game)
    deadline = schedule.deadline(round_number) + timedelta(seconds=game.schedule_shift_s)
    if round_number == 1:
        return deadline
    step = schedule.deadline(round_number) - schedule.deadline(round_number - 1)
    if deadline < now + step / 2:
        return wall_clock_add(now, step, schedule.tz)
    return deadline
