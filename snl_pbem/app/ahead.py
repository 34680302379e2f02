"""Read ahead for a batch: once a batch has locked a game, what each of its messages will
look up in it (the sender's seat, the name it goes by, its dice of the current set) is read
for all of the batch's senders at once, in three queries, instead of three queries a message.

Read after the game's lock, as each message's own look-ups are, so it sees what they would;
kept in ``txcache`` (forgotten with it: after any message that may change a seat, a round or
a game). A message whose key is not its sender's seat's (another address, a wrong key) finds
nothing here and looks up as before."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app import txcache
from snl_pbem.app.state import seated_key, seated_names, turn_rows, turns_key
from snl_pbem.store import Game, Player

SENDERS = "snl_pbem.intake.senders"
"""session.info: the batch's senders (lower-cased addresses), set by the batch."""


def senders(session: Session, addresses: list[str | None]) -> None:
    """The batch's senders, whose look-ups are read ahead in each game it locks."""
    session.info[SENDERS] = sorted({a.lower() for a in addresses if a})


def players_key(game: Game) -> tuple[str, int]:
    """txcache key: {order key hash: active Player} of the batch's senders in ``game``."""
    return ("seats ahead", game.id)


def after_lock(session: Session, game: Game) -> None:
    """Read ahead in ``game``, just locked, for the batch's senders (nothing outside a
    batch)."""
    addresses: list[str] | None = session.info.get(SENDERS)
    if not addresses:
        return
    players: list[Player] = []
    for start in range(0, len(addresses), 500):
        players += session.scalars(
            select(Player).where(
                Player.game_id == game.id,
                Player.active,
                func.lower(Player.email).in_(addresses[start : start + 500]),
            )
        ).all()
    ids = [p.id for p in players]
    seats: dict[str | None, Player] = {}
    for player in players:
        seats.setdefault(player.order_key_hash, player)
    joined: dict[tuple[int | None, str], str] = {}
    by_player: dict[int, list[tuple[int, int, int]]] = {pid: [] for pid in ids}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for player_id, address, name in session.execute(seated_names(game, chunk)):
            joined[(player_id, address.lower())] = name
        for player_id, turn, die, final in session.execute(turn_rows(game, chunk)):
            by_player[player_id].append((turn, die, final))
    covered = frozenset(ids)
    txcache.put(session, players_key(game), seats)
    txcache.put(session, seated_key(game), (covered, joined))
    txcache.put(session, turns_key(game), (covered, by_player))
