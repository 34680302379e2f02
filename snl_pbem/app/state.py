"""A game's state as the database holds it, read without changing it.

The orders that count in a round, who has yet to send them, each player's stored state,
the name each seat's holder goes by, and who observes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import (
    ruleset_of,
    settings_of,
)
from snl_pbem.app.txcache import peek, remember
from snl_pbem.rules.ruleset import GameState, Orders
from snl_pbem.store import (
    AuditEntry,
    Game,
    Observer,
    OrderRecord,
    Player,
    Round,
    RoundTally,
    Signup,
    TurnRecord,
)
from snl_pbem.store.models import dice_values
from snl_pbem.store.states import SignupState


@dataclass(frozen=True)
class PlayerRef:
    """The two things the round close needs of a player."""

    id: int
    name: str


def game_players(session: Session, game: Game) -> list[PlayerRef]:
    """Every player of the game (in the config or not: all still play, R17), by id."""
    rows = session.execute(
        select(Player.id, Player.name).where(Player.game_id == game.id).order_by(Player.id)
    )
    return [PlayerRef(pid, name) for pid, name in rows]


def load_state(
    session: Session,
    game: Game,
    players: Sequence[PlayerRef | Player],
) -> GameState:
    """The game's state from its stored results: every position, and each player's dice
    since the turn the game's ruleset needs them from (postal: the current set of six).
    With ``players`` one player only (``player_state``), a state of that player alone."""
    names = tuple(p.name for p in players)
    turns = game.turns_played
    set_start = ruleset_of(game).history_start(turns)
    positions = dict.fromkeys(names, 0)
    played: dict[str, list[int]] = {name: [] for name in names}
    by_id = {p.id: p.name for p in players}
    rows: Iterable[tuple[int, int, int, int]]
    ahead = peek(session, turns_key(game))  # a batch read it (app.ahead)
    if len(players) == 1 and ahead is not None and players[0].id in ahead[0]:
        rows = [(players[0].id, *row) for row in ahead[1][players[0].id]]
    else:
        # one player's own state: their rows only
        ids = [players[0].id] if len(players) == 1 else None
        rows = session.execute(turn_rows(game, ids)).all()
    for player_id, turn, die, final in rows:
        name = by_id.get(player_id)
        if name is None:
            continue
        if turn > set_start:
            played[name].append(die)
        if turn == turns:
            positions[name] = final
    return GameState(
        players=names,
        positions=positions,
        played={name: tuple(dice) for name, dice in played.items()},
        rounds_played=game.rounds_played,
        turns_played=turns,
        played_from=set_start,
        extra=last_record(session, game),
    )


def last_record(session: Session, game: Game) -> dict[str, Any]:
    """What the game's ruleset kept of its last round (classic: its state); {} if none."""
    if not game.rounds_played:
        return {}
    record = remember(  # once a batch of orders (txcache)
        session,
        ("last record", game.id, game.rounds_played),
        lambda: session.scalar(
            select(RoundTally.record)
            .join(Round, Round.id == RoundTally.round_id)
            .where(Round.game_id == game.id, Round.number == game.rounds_played)
        ),
    )
    return record or {}


def awaiting(session: Session, game: Game, players: Sequence[PlayerRef | Player]) -> set[str]:
    """The names among ``players`` whose orders the open round waits for (the ruleset
    says: the classic game waits only for those still racing)."""
    names = tuple(p.name for p in players)
    kept = GameState(
        names, {}, {}, rounds_played=game.rounds_played, extra=last_record(session, game)
    )
    return set(ruleset_of(game).awaiting(settings_of(game), kept))


def player_state(session: Session, game: Game, player: Player) -> GameState:
    """One player's own stored state (positions and dice of that player alone): enough
    to check their orders or tell them their own play, never to adjudicate."""
    return load_state(session, game, [player])


RECEIPT_ORDER = (
    OrderRecord.received_at,
    func.coalesce(OrderRecord.inbound_id, 0),
    OrderRecord.id,
)
"""The order in which order sets replace one another: by receipt time, then, within one
second (IMAP dates are whole seconds), by the order their messages were stored, never by
the order they happened to be read in (stored messages are read in parallel:
snl_pbem.runners.mailboxes.Readers). Orders the referee entered (no message) come first
within their second."""


def latest_orders(session: Session, round_id: int) -> dict[int, OrderRecord]:
    """Each player's latest order set for a round (by player id), whatever its receipt time."""
    latest: dict[int, OrderRecord] = {}
    for record in session.scalars(
        select(OrderRecord).where(OrderRecord.round_id == round_id).order_by(*RECEIPT_ORDER)
    ):
        latest[record.player_id] = record
    return latest


def counting_orders(
    session: Session, round_: Round, players: Sequence[PlayerRef | Player]
) -> dict[str, Orders]:
    """Each player's latest order set received by the deadline (or entered by the referee);
    a player whose latest withdrew their orders is left out (they sent none)."""
    by_id = {p.id: p.name for p in players}
    latest: dict[str, Orders] = {}
    rows = session.execute(
        select(
            OrderRecord.player_id, OrderRecord.dice, OrderRecord.nomination, OrderRecord.withdrawn
        )
        .where(
            OrderRecord.round_id == round_.id,
            or_(OrderRecord.received_at <= round_.deadline, OrderRecord.source == "referee"),
        )
        .order_by(*RECEIPT_ORDER)
    )
    for player_id, dice, nomination, withdrawn in rows:
        name = by_id.get(player_id)
        if name is not None:  # later ones replace earlier ones, as a whole
            latest[name] = Orders(dice_values(dice), nomination, withdraw=withdrawn)
    return {name: order for name, order in latest.items() if not order.withdraw}


def turn_rows(game: Game, player_ids: Sequence[int] | None = None) -> Select[int, int, int, int]:
    """(player id, turn, die, final position) of the turns the game's ruleset needs (postal:
    the current set of six, and the last turn), by turn; of these players only, if given."""
    return turn_rows_in([game.id], history_since(game), player_ids)


def history_since(game: Game) -> int:
    """The first turn of those the game's ruleset needs (``turn_rows``)."""
    turns = game.turns_played
    return min(ruleset_of(game).history_start(turns) + 1, turns)


def turn_rows_in(
    game_ids: Sequence[int], since: int, player_ids: Sequence[int] | None = None
) -> Select[int, int, int, int]:
    """``turn_rows`` of several games that need their turns from ``since`` on."""
    query = select(TurnRecord.player_id, TurnRecord.turn, TurnRecord.die, TurnRecord.final)
    query = query.where(_of_games(TurnRecord.game_id, game_ids), TurnRecord.turn >= since)
    if player_ids is not None:
        query = query.where(TurnRecord.player_id.in_(player_ids))
    return query.order_by(TurnRecord.turn)


def _of_games(column: Any, game_ids: Sequence[int]) -> Any:
    return column == game_ids[0] if len(game_ids) == 1 else column.in_(game_ids)


def seated_names(
    game: Game, player_ids: Sequence[int] | None = None
) -> Select[int | None, str, str]:
    """(player id, address, name) of the game's seated sign-ups, oldest first (a later one
    replaces an earlier one); of these players only, if given."""
    return seated_names_in([game.id], player_ids)


def seated_names_in(
    game_ids: Sequence[int], player_ids: Sequence[int] | None = None
) -> Select[int | None, str, str]:
    """``seated_names`` of several games."""
    query = select(Signup.player_id, Signup.email, Signup.name).where(
        _of_games(Signup.game_id, game_ids),
        Signup.state == SignupState.SEATED,
        Signup.player_id.is_not(None),
    )
    if player_ids is not None:
        query = query.where(Signup.player_id.in_(player_ids))
    return query.order_by(Signup.id)


def seated_key(game: Game) -> tuple[str, int]:
    """txcache key: (player ids covered, {(player id, address): name they joined with}),
    read ahead for a batch (``app.ahead``)."""
    return ("seated ahead", game.id)


def turns_key(game: Game) -> tuple[str, int, int]:
    """txcache key: (player ids covered, {player id: [(turn, die, final)]}), read ahead
    for a batch (``app.ahead``)."""
    return ("turns ahead", game.id, game.turns_played)


FEW_PLAYERS = 100
"""Up to this many players, their sign-ups are looked up by id, not the game's all read."""


def _replaced(session: Session, game: Game) -> set[tuple[object, str]]:
    """(player name, new address) of each seat the referee gave (REPLACE) in the game."""
    return replaced_in(session, [game.id])[game.id]


def replaced_key(game_id: int) -> tuple[str, int]:
    """txcache key: ``_replaced`` of the game."""
    return ("replaced", game_id)


def replaced_in(session: Session, game_ids: Sequence[int]) -> dict[int, set[tuple[object, str]]]:
    """``_replaced`` of several games, by id."""
    given: dict[int, set[tuple[object, str]]] = {game_id: set() for game_id in game_ids}
    for game_id, detail in session.execute(
        select(AuditEntry.game_id, AuditEntry.detail).where(
            _of_games(AuditEntry.game_id, game_ids), AuditEntry.action == "replace"
        )
    ):
        given[game_id].add((detail.get("player"), str(detail.get("new", "")).lower()))
    return given


def holder_name(session: Session, game: Game, player: Player) -> str | None:
    """The name the seat's holder goes by: the name they joined with (their own seat, or
    one they took from the standby list), the seat's own name for its first holder, or
    None for an address the referee gave the seat to (REPLACE knows no name)."""
    return holder_names(session, game, [player])[player.id]


def holder_names(session: Session, game: Game, players: Sequence[Player]) -> dict[int, str | None]:
    """:func:`holder_name` of each of ``players`` (by id), in two queries (one, for a few
    players, in a batch of orders that read the game's REPLACEs already: ``txcache``)."""
    ahead = peek(session, seated_key(game))  # a batch read it (app.ahead)
    joined: dict[tuple[int | None, str], str]
    if ahead is not None and all(p.id in ahead[0] for p in players):
        joined = ahead[1]
    else:
        # a reply's greeting: not the whole game's sign-ups
        ids = [p.id for p in players] if len(players) <= FEW_PLAYERS else None
        joined = {}
        for player_id, address, name in session.execute(seated_names(game, ids)):
            joined[(player_id, address.lower())] = name
    given = remember(session, replaced_key(game.id), lambda: _replaced(session, game))
    names: dict[int, str | None] = {}
    for player in players:
        address = player.email.lower()
        if (player.id, address) in joined:
            names[player.id] = joined[(player.id, address)]
        else:
            names[player.id] = None if (player.name, address) in given else player.name
    return names


def observers(session: Session, game: Game) -> list[str]:
    return [address for address, _ in observers_languages(session, game)]


def observers_languages(session: Session, game: Game) -> list[tuple[str, str | None]]:
    """The game's observers' addresses, each with the language of their reports (None:
    the game's)."""
    rows = session.execute(
        select(Observer.email, Observer.language)
        .where(Observer.game_id == game.id, Observer.active)
        .order_by(Observer.id)
    )
    return [(address, language) for address, language in rows]
