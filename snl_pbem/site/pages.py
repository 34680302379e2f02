"""What the game pages show, read from the store (reads only; no files, no HTML).

Everything here is what R19 lets anyone see while a game runs: the positions after each
round, the deadline and the rules in play. A postal game's secrets (the board, the dice,
the nominations, the trapdoors) are read only for a game that is over and configured to
reveal them (``reveal_after_game``, R19's last sentence); the classic game has none
(C10: every throw is in every report).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import game_time, open_round, ruleset_of, settings_of
from snl_pbem.app.reports import Standing, history_lines, standings
from snl_pbem.app.state import game_players, load_state
from snl_pbem.app.views import standings_by_round, starts_text
from snl_pbem.config import Config
from snl_pbem.rules import Board
from snl_pbem.store import Game, Player, Round, RoundTally, TurnRecord
from snl_pbem.store.states import GamePhase, RoundPhase
from snl_pbem.timeutil import show, zone
from snl_pbem.views.board import render_svg, summary

STATES = {
    GamePhase.NEW: "forming",
    GamePhase.RUNNING: "running",
    GamePhase.PAUSED: "paused",
    GamePhase.OVER: "finished",
}


@dataclass(frozen=True)
class RoundRow:
    """One closed round: when it closed and everyone's position after it (R19)."""

    number: int
    deadline: str
    """Its deadline, as the game's players read times (not when it closed: a round that
    closed early, all orders in, would tell that nobody missed orders, R19)."""
    closed_at: datetime | None
    """When it closed (the feed's entry time: when its report went out to everyone)."""
    positions: dict[str, int]


@dataclass(frozen=True)
class RevealRound:
    """A closed postal round told after the game: the secrets R19 kept until then."""

    number: int
    dice: dict[str, tuple[int, ...]]
    nominations: dict[str, str]
    trapdoors: tuple[int, ...]


@dataclass(frozen=True)
class Reveal:
    board_svg: str
    board_text: str
    rounds: tuple[RevealRound, ...]


@dataclass(frozen=True)
class GamePage:
    name: str
    title: str
    ruleset: str
    state: str
    last: int
    """The finishing square (the board's last space): what a race is run to."""
    players: tuple[str, ...]
    """Every player, in seat order (the chart's series, the table's columns)."""
    rounds: tuple[RoundRow, ...]
    standings: tuple[Standing, ...]
    round: int | None
    """The open round's number (None when none is open)."""
    turns: int | None
    deadline: str
    deadline_at: datetime | None
    rules: tuple[tuple[str, str], ...]
    result: str
    log_title: str
    log: tuple[str, ...]
    """A log anyone may read: the classic game's every throw; a postal game's only after
    it ends, in the reveal."""
    counts: tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None
    """The ruleset's public table (header, rows): the classic game's counts (C10)."""
    reveal: Reveal | None
    join: str
    """While sign-up is open: a ``mailto:`` link with the JOIN line filled in."""
    signup: str
    """open, approval (the referee approves each player) or closed."""
    max_players: int | None
    updated: datetime
    updated_text: str
    """``updated`` as the game's players read times."""


def result_line(result: dict[str, Any] | None) -> str:
    """The stored result in words: "ann wins", "a draw between ...", a finishing order."""
    if not result:
        return ""
    order = result.get("order")
    if order:
        return "Finishing order: " + ", ".join(f"{o['player']} (round {o['round']})" for o in order)
    if result.get("draw"):
        return "A draw between " + ", ".join(result["draw"])
    if result.get("winner"):
        return f"{result['winner']} wins"
    return ""


def rules_in_play(game: Game, last: int) -> tuple[tuple[str, str], ...]:
    """The rules a player may know before playing: the ruleset and its options, the length
    of the race; never the board's snakes, ladders or layout (R2, R19)."""
    rows = [("Ruleset", game.ruleset), ("Finishing square", str(last))]
    if game.ruleset == "postal":
        rows.append(("Two turns a round", f"from round {game.double_from_round}"))
        rule = (
            "every nomination past the threshold"
            if game.trapdoor_rule == "all"
            else ("the most-voted nominations")
        )
        rows.append(("Trapdoors", rule))
    for key, value in sorted((game.options or {}).items()):
        shown = "yes" if value is True else "no" if value is False else str(value)
        rows.append((key.replace("_", " ").capitalize(), shown))
    return tuple(rows)


def game_page(session: Session, config: Config, game: Game, now: datetime) -> GamePage:
    """Everything a game's page shows, read in the caller's transaction."""
    board = Board.from_mapping(game.board)
    seats = game_players(session, game)
    players = tuple(p.name for p in seats)
    closed = {
        number: (deadline, closed_at)
        for number, deadline, closed_at in session.execute(
            select(Round.number, Round.deadline, Round.closed_at).where(
                Round.game_id == game.id, Round.state == RoundPhase.CLOSED
            )
        )
    }
    rounds = tuple(
        RoundRow(number, game_time(game, closed[number][0]), closed[number][1], dict(row))
        for number, row in standings_by_round(session, game)
        if number in closed
    )
    positions = dict(rounds[-1].positions) if rounds else dict.fromkeys(players, 0)
    round_ = open_round(session, game) if game.state != GamePhase.OVER else None
    ruleset = ruleset_of(game)
    over = game.state == GamePhase.OVER
    log_title = ""
    log: tuple[str, ...] = ()
    counts = None
    if game.rounds_played:
        state = load_state(session, game, seats)
        counts = ruleset.public_table(settings_of(game), state)
        if ruleset.history_public:
            lines = history_lines(session, game)
            log_title, log = lines[0], tuple(lines[1:])
    found = config.find(game.name)
    join = ""
    if game.state == GamePhase.NEW and found is not None and found.settings.signup != "closed":
        join = join_link(config.settings.mail.address, game.name)
    reveal = None
    if over and game.reveal_after_game and not ruleset.history_public:
        reveal = _reveal(session, game, board)
        lines = history_lines(session, game)
        log_title, log = lines[0], tuple(lines[1:])
    return GamePage(
        name=game.name,
        title=game.title or game.name,
        ruleset=game.ruleset,
        state=STATES.get(GamePhase(game.state), game.state),
        last=board.last,
        players=players,
        rounds=rounds,
        standings=tuple(standings(positions)) if players else (),
        round=round_.number if round_ else None,
        turns=round_.turns if round_ else None,
        deadline=game_time(game, round_.deadline) if round_ else "",
        deadline_at=round_.deadline if round_ else None,
        rules=rules_in_play(game, board.last),
        result=result_line(game.result) if over else "",
        log_title=log_title,
        log=log,
        counts=counts,
        reveal=reveal,
        join=join,
        signup=found.settings.signup if found is not None else "closed",
        max_players=found.settings.max_players if found is not None else None,
        updated=now,
        updated_text=game_time(game, now),
    )


def _reveal(session: Session, game: Game, board: Board) -> Reveal:
    """The postal game's secrets, for after the game (reveal_after_game, R19)."""
    names = {p.id: p.name for p in game_players(session, game)}
    dice: dict[int, dict[str, list[int]]] = {}  # round -> player -> dice: one query
    for number, player_id, die in session.execute(
        select(Round.number, TurnRecord.player_id, TurnRecord.die)
        .join(Round, Round.id == TurnRecord.round_id)
        .where(TurnRecord.game_id == game.id, Round.state == RoundPhase.CLOSED)
        .order_by(Round.number, TurnRecord.turn, TurnRecord.player_id)
    ):
        dice.setdefault(number, {}).setdefault(names.get(player_id, "?"), []).append(die)
    tallies = dict(  # and one for the tallies
        session.execute(
            select(Round.number, RoundTally)
            .join(Round, Round.id == RoundTally.round_id)
            .where(Round.game_id == game.id, Round.state == RoundPhase.CLOSED)
        ).all()
    )
    rounds = []
    active: dict[int, list[int]] = {}
    for number in sorted(set(dice) | set(tallies)):
        tally = tallies.get(number)
        nominations: dict[str, str] = {}
        traps: tuple[int, ...] = ()
        if tally is not None:
            defaulted = set(tally.defaulted or ())
            for name, space in (tally.nominations or {}).items():
                said = "-" if space is None else str(space)
                nominations[name] = said + (" (default)" if name in defaulted else "")
            traps = tuple(sorted(int(t) for t in tally.trapdoors or ()))
        for space in traps:
            active.setdefault(space, []).append(number)
        played = dice.get(number, {})
        rounds.append(
            RevealRound(number, {n: tuple(played[n]) for n in sorted(played)}, nominations, traps)
        )
    svg = render_svg(board, title=f"{game.title or game.name}: the board", trapdoors=active)
    return Reveal(svg, summary(board), tuple(rounds))


@dataclass(frozen=True)
class IndexEntry:
    """A game as the index lists it (what LIST tells, and the finished ones)."""

    name: str
    title: str
    ruleset: str
    state: str
    players: int
    max_players: int | None
    round: int | None
    deadline: str
    starts: str
    join: str
    """A ``mailto:`` link with the JOIN line filled in, while sign-up is open; "" else."""
    signup: str
    result: str


def join_link(address: str, game: str) -> str:
    """The sign-up mail, ready to send once the player puts their name in (the placeholder
    is no name the server takes: sent as it is, the reply asks for one)."""
    line = f"JOIN {game} <your name>"
    return f"mailto:{address}?subject={quote(f'JOIN {game}')}&body={quote(line)}"


def index_entries(session: Session, config: Config) -> list[IndexEntry]:
    """Every game on the server: forming, running and finished, by id."""
    entries = []
    seats = dict(  # three queries in all: the index is rewritten at every close
        session.execute(
            select(Player.game_id, func.count()).where(Player.active).group_by(Player.game_id)
        ).all()
    )
    opened = {
        game_id: (number, deadline)
        for game_id, number, deadline in session.execute(
            select(Round.game_id, Round.number, Round.deadline).where(
                Round.state == RoundPhase.OPEN
            )
        )
    }
    for game in session.execute(  # the columns shown (a whole row carries its board)
        select(
            Game.id, Game.name, Game.title, Game.ruleset, Game.state, Game.timezone, Game.result
        ).order_by(Game.name)
    ):
        found = config.find(game.name)
        if found is None and game.state != GamePhase.OVER:
            continue  # no longer in the config: not played here
        round_ = opened.get(game.id) if game.state != GamePhase.OVER else None
        starts, join = "", ""
        if game.state == GamePhase.NEW and found is not None:
            starts = starts_text(found, game.timezone)
            if found.settings.signup != "closed":
                join = join_link(config.settings.mail.address, game.name)
        entries.append(
            IndexEntry(
                name=game.name,
                title=game.title or game.name,
                ruleset=game.ruleset,
                state=STATES.get(GamePhase(game.state), game.state),
                players=seats.get(game.id, 0),
                max_players=found.settings.max_players if found is not None else None,
                round=round_[0] if round_ else None,
                deadline=show(round_[1], zone(game.timezone)) if round_ else "",
                starts=starts,
                join=join,
                signup=found.settings.signup if found is not None else "closed",
                result=result_line(game.result) if game.state == GamePhase.OVER else "",
            )
        )
    return entries
