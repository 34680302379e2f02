"""Read ahead for a batch: the game each of its messages is for (named, or its sender's),
found and locked at once, and what each message will look up in it (the sender's seat,
the name it goes by, its dice of the current set, the round open, the seats the referee
gave) read for all of the batch's senders and games at once, in a few queries, instead of
several queries a message, and as many again for each game a batch brings: a batch of 100
orders for 100 games cost 2.8 ms of the server's CPU a message, against 0.34 for one
game's (SQLite, issue 23).

Read after the games' lock, as each message's own look-ups are, so it sees what they would;
kept in ``txcache`` (forgotten with it: after any message that may change a seat, a round or
a game; a game's is read again when a message next needs it). A message whose key is not
its sender's seat's (another address, a wrong key) finds nothing here and looks up as
before."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from snl_pbem.app import txcache
from snl_pbem.app.lookup import open_round_key
from snl_pbem.app.state import (
    history_since,
    replaced_in,
    replaced_key,
    seated_key,
    seated_names_in,
    turn_rows_in,
    turns_key,
)
from snl_pbem.store import Game, Player, Round
from snl_pbem.store.states import GamePhase, RoundPhase

SENDERS = "snl_pbem.intake.senders"
"""session.info: the batch's senders (lower-cased addresses), set by the batch."""
LOCKED = "games locked"
"""session.info: the ids of the games the transaction has locked (and read ahead in)."""
AT_ONCE = 500
"""Values in one IN list at most."""


def senders(session: Session, addresses: list[str | None]) -> None:
    """The batch's senders, whose look-ups are read ahead in each game it locks."""
    session.info[SENDERS] = sorted({a.lower() for a in addresses if a})


def game_key(name: str) -> tuple[str, str]:
    """txcache key: the game of that name, or None (``authenticate._game_named``)."""
    return ("game", name)


def players_key(game: Game) -> tuple[str, int]:
    """txcache key: {order key hash: active Player} of the batch's senders in ``game``."""
    return ("seats ahead", game.id)


Named = tuple[tuple[str, ...], bool, str | None]
"""What a message says of its game: the names it is looked for by, in order (its GAME
line's, or its subject's ``[id]``s); whether its GAME line gave it (then that name alone,
found or not); and its sender, whose one running game it is otherwise."""


def games(session: Session, named: Sequence[Named]) -> None:
    """The game each of a batch's messages is for, found as ``authenticate._find_game``
    finds it (the names in one query, the senders' games in another), all of them locked
    in one statement in the order of their ids, and read ahead in (``after_lock``).
    Nothing outside a batch. Two such batches never wait for each other in a circle, as
    locking each game at its message could: each message's game is locked here, whether
    named or its sender's, and a batch of orders locks no other (a batch with other words,
    which may lock a game as they run, is not read ahead: ``authenticate.read_ahead``)."""
    if SENDERS not in session.info:
        return
    wanted = sorted({name for names, _, _ in named for name in names})
    found: dict[str, Game] = {}
    for start in range(0, len(wanted), AT_ONCE):
        chunk = wanted[start : start + AT_ONCE]
        for game in session.scalars(select(Game).where(Game.name.in_(chunk))):
            found[game.name] = game
    for name in wanted:
        txcache.put(session, game_key(name), found.get(name))
    chosen: list[Game] = []
    unnamed: set[str] = set()
    for names, by_line, sender in named:
        choice = next((found[name] for name in names if name in found), None)
        if choice is not None:
            chosen.append(choice)
        elif not by_line and sender is not None:
            unnamed.add(sender)
    theirs = senders_games(session, sorted(unnamed))
    for sender in unnamed:
        txcache.put(session, sender_game_key(sender), theirs.get(sender))
    lock(session, [*chosen, *theirs.values()])


def sender_game_key(sender: str) -> tuple[str, str]:
    """txcache key: the one running (or paused) game ``sender`` plays in, or None."""
    return ("sender's game", sender)


def running_games_of(addresses: Sequence[str]) -> Select[Game, str]:
    """Each running or paused game the active players of these addresses (compared with
    their addresses lower-cased) play in, with the address."""
    email = func.lower(Player.email)
    return (
        select(Game, email)
        .join(Player, Player.game_id == Game.id)
        .where(
            email.in_(addresses),
            Player.active,
            Game.state.in_((GamePhase.RUNNING, GamePhase.PAUSED)),
        )
    )


def senders_games(session: Session, addresses: Sequence[str]) -> dict[str, Game]:
    """The one running (or paused) game each of these senders plays in, for those who
    play in exactly one."""
    games: dict[str, dict[int, Game]] = {}
    for start in range(0, len(addresses), AT_ONCE):
        chunk = addresses[start : start + AT_ONCE]
        for game, address in session.execute(running_games_of(chunk)):
            games.setdefault(address, {})[game.id] = game
    return {a: next(iter(g.values())) for a, g in games.items() if len(g) == 1}


def lock(session: Session, games: Sequence[Game]) -> None:
    """Lock these games (those not locked yet), in the order of their ids, reading their rows
    again as they are locked, as a close locks a game; then read ahead in them. A game
    locked before whose read-ahead was forgotten since (a message that may change seats or
    rounds: ``txcache.anew``) has it read again."""
    locked: set[int] = session.info.setdefault(LOCKED, set())
    ids = sorted({game.id for game in games if game.id not in locked})
    rows: list[Game] = []
    # as ``Session.refresh`` reads a row again (what else the session holds is written
    # later, with the message's own row)
    with session.no_autoflush:
        for start in range(0, len(ids), AT_ONCE):
            rows += session.scalars(
                select(Game)
                .where(Game.id.in_(ids[start : start + AT_ONCE]))
                .order_by(Game.id)
                .with_for_update()
                .execution_options(populate_existing=True)
            ).all()
    locked.update(ids)
    new = set(ids)
    if SENDERS in session.info and txcache.keeping(session):  # (held: not locked again)
        rows += [g for g in games if g.id not in new and not _read_ahead(session, g)]
    after_lock(session, rows)


def _read_ahead(session: Session, game: Game) -> bool:
    return txcache.peek(session, players_key(game)) is not None


def after_lock(session: Session, games: Sequence[Game]) -> None:
    """Read ahead in ``games``, just locked, for the batch's senders (nothing outside a
    batch): their seats, the names they go by, their turns of the current set; and each
    game's open round and the seats the referee gave in it."""
    addresses: list[str] | None = session.info.get(SENDERS)
    if not addresses or not games:
        return
    by_id = {game.id: game for game in games}
    game_ids = sorted(by_id)
    players: list[Player] = []
    for start in range(0, len(addresses), AT_ONCE):
        players += session.scalars(
            select(Player).where(
                Player.game_id.in_(game_ids),
                Player.active,
                func.lower(Player.email).in_(addresses[start : start + AT_ONCE]),
            )
        ).all()
    seats: dict[int, dict[str | None, Player]] = {game_id: {} for game_id in game_ids}
    in_game: dict[int, list[int]] = {game_id: [] for game_id in game_ids}
    for player in players:
        seats[player.game_id].setdefault(player.order_key_hash, player)
        in_game[player.game_id].append(player.id)
    joined: dict[int, dict[tuple[int | None, str], str]] = {game_id: {} for game_id in game_ids}
    by_player: dict[int, list[tuple[int, int, int]]] = {p.id: [] for p in players}
    game_of = {p.id: p.game_id for p in players}
    ids = sorted(game_of)
    since: dict[int, list[int]] = {}  # the first turn needed: the games that need it
    for game_id in game_ids:
        since.setdefault(history_since(by_id[game_id]), []).append(game_id)
    for start in range(0, len(ids), AT_ONCE):
        chunk = ids[start : start + AT_ONCE]
        for player_id, address, name in session.execute(seated_names_in(game_ids, chunk)):
            if player_id is not None:  # (the query holds none other)
                joined[game_of[player_id]][(player_id, address.lower())] = name
        for first, of_games in since.items():
            for player_id, turn, die, final in session.execute(
                turn_rows_in(of_games, first, chunk)
            ):
                by_player[player_id].append((turn, die, final))
    rounds = {
        round_.game_id: round_
        for round_ in session.scalars(
            select(Round).where(Round.game_id.in_(game_ids), Round.state == RoundPhase.OPEN)
        )
    }
    given = replaced_in(session, game_ids)
    for game_id, game in by_id.items():
        covered = frozenset(in_game[game_id])
        txcache.put(session, players_key(game), seats[game_id])
        txcache.put(session, seated_key(game), (covered, joined[game_id]))
        turns = {pid: by_player[pid] for pid in in_game[game_id]}
        txcache.put(session, turns_key(game), (covered, turns))
        txcache.put(session, open_round_key(game_id), rounds.get(game_id))
        txcache.put(session, replaced_key(game_id), given[game_id])
