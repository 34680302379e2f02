"""A whole game: its settings, its state between rounds, and adjudicating one round.

``adjudicate_round`` is the referee's whole job for one round, in RULES.md's
order: check each player's dice (R6, R18) or play the lowest legal dice for
them (R17); take each nomination or default it (R16, R18); tally the
trapdoors (R8, R9, R10); resolve every player's move, turn by turn,
simultaneously (R11-R15); stop after any turn in which someone reached the
last space (R5). It is pure: the same inputs give the same result.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, TypeAlias

from snl_pbem.rules.board import Board, Event, Position, Space
from snl_pbem.rules.dice import (
    DiceProblem,
    Die,
    check_dice,
    lowest_legal_dice,
    open_values,
    used_in_set,
)
from snl_pbem.rules.errors import GameSetupError
from snl_pbem.rules.trapdoors import (
    Tally,
    TrapdoorRule,
    default_nomination,
    is_space,
    tally_trapdoors,
)

PlayerId: TypeAlias = str
"""A player's name, unique within a game."""

DEFAULT_DOUBLE_FROM_ROUND = 7
"""R7: rounds 1-6 are single-turn (the first set of six), two-turn from round 7."""


@dataclass(frozen=True)
class GameRules:
    """Everything fixed for a game: the board and the options of RULES.md."""

    board: Board
    double_from_round: int = DEFAULT_DOUBLE_FROM_ROUND
    """The first two-turn round (R7); 1 makes every round two-turn."""
    trapdoor_rule: TrapdoorRule = TrapdoorRule.ALL
    seed: int = 0
    """Seeds the lot that breaks a most-voted tie, so results are repeatable."""

    def __post_init__(self) -> None:
        if self.double_from_round < 1:
            raise GameSetupError(f"double_from_round: {self.double_from_round} must be 1 or more")

    def turns_in_round(self, round_number: int) -> int:
        """One turn before ``double_from_round``, two from it on (R7)."""
        return 1 if round_number < self.double_from_round else 2


@dataclass(frozen=True, slots=True)
class OrderSet:
    """What one player ordered for one round: a die per turn and a nomination (R6, R8)."""

    dice: tuple[int, ...]
    trapdoor: int | None = None


class NmrCause(Enum):
    """Why the referee moved for a player."""

    NO_ORDERS = "no-orders"
    """No orders received (R17)."""
    INVALID_DICE = "invalid-dice"
    """Orders whose dice break R6: treated as no orders (R18)."""


@dataclass(frozen=True, slots=True)
class Nmr:
    """A player treated as sending no orders, and why."""

    cause: NmrCause
    problems: tuple[DiceProblem, ...] = ()

    def __str__(self) -> str:
        if self.cause is NmrCause.NO_ORDERS:
            return "no orders received (R17)"
        return "invalid dice (R18): " + "; ".join(map(str, self.problems))


class Move(NamedTuple):
    """One player's move in one turn."""

    die: Die
    start: Position
    target: Position
    """start + die, before any trapdoor, snake or ladder."""
    final: Position
    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class TurnResult:
    """Every player's move in one turn; ``turn`` counts the game's turns from 1."""

    turn: int
    moves: Mapping[PlayerId, Move]

    @property
    def dice(self) -> dict[PlayerId, Die]:
        return {name: move.die for name, move in self.moves.items()}

    @property
    def positions(self) -> dict[PlayerId, Position]:
        return {name: move.final for name, move in self.moves.items()}


@dataclass(frozen=True, slots=True)
class GameResult:
    """The end of the game (R5): the winner, or the players who drew."""

    winners: tuple[PlayerId, ...]
    """One name for a win; several, sorted, for a draw."""
    turn: int
    """The turn after which the game ended."""

    @property
    def is_draw(self) -> bool:
        return len(self.winners) > 1


@dataclass(frozen=True)
class RoundResult:
    """Everything the referee decided in one round: the private record (R19 keeps it secret)."""

    round: int
    turns_ordered: int
    """Turns the round's orders covered (1 or 2, R7)."""
    orders: Mapping[PlayerId, OrderSet | None]
    nmr: Mapping[PlayerId, Nmr]
    nominations: Mapping[PlayerId, Space | None]
    """After R16 defaults; None where the target was past the last space."""
    defaulted: frozenset[PlayerId]
    """Players whose nomination came from R16 rather than their orders."""
    tally: Tally
    turns: tuple[TurnResult, ...]
    """The turns actually played: the second is skipped when the game ends on the first."""
    positions: Mapping[PlayerId, Position]
    result: GameResult | None

    @property
    def trapdoors(self) -> tuple[Space, ...]:
        return self.tally.active


@dataclass(frozen=True)
class GameState:
    """Where a game stands between rounds."""

    players: tuple[PlayerId, ...]
    positions: Mapping[PlayerId, Position]
    played: Mapping[PlayerId, tuple[Die, ...]]
    """Every die each player has played, in turn order."""
    rounds_played: int = 0
    turns_played: int = 0
    result: GameResult | None = None
    history: tuple[RoundResult, ...] = field(default=(), repr=False)

    @classmethod
    def start(cls, players: Sequence[PlayerId]) -> GameState:
        """Every player off the board at 0 (R4). Any number of players may play (R1)."""
        names = tuple(players)
        if not names:
            raise GameSetupError("players: a game needs at least one player")
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise GameSetupError(f"players: {name!r} is not a player name")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise GameSetupError("players: named more than once: " + ", ".join(twice))
        return cls(names, dict.fromkeys(names, 0), dict.fromkeys(names, ()))

    def used_in_set(self, player: PlayerId) -> tuple[Die, ...]:
        """The player's dice used so far in the current set (R6)."""
        return used_in_set(self.played[player])

    def open_values(self, player: PlayerId) -> tuple[Die, ...]:
        """The values the player may still choose in the current set (R6)."""
        return open_values(self.played[player])


def adjudicate_round(
    rules: GameRules,
    state: GameState,
    orders: Mapping[PlayerId, OrderSet | None],
    *,
    keep_history: bool = True,
) -> tuple[RoundResult, GameState]:
    """Play the next round with these orders; a missing or None order is an NMR (R17)."""
    if state.result is not None:
        raise GameSetupError(f"the game is over (after round {state.rounds_played})")
    unknown = sorted(set(orders) - set(state.players))
    if unknown:
        raise GameSetupError("orders from players not in the game: " + ", ".join(unknown))
    number = state.rounds_played + 1
    turns = rules.turns_in_round(number)
    last = rules.board.last

    dice_played: dict[PlayerId, tuple[Die, ...]] = {}
    nmr: dict[PlayerId, Nmr] = {}
    nominations: dict[PlayerId, Space | None] = {}
    defaulted: list[PlayerId] = []
    no_orders = Nmr(NmrCause.NO_ORDERS)
    for name in state.players:
        order = orders.get(name)
        history = state.played[name]
        nomination: int | None = None
        if order is None:
            nmr[name] = no_orders  # R17
            dice = lowest_legal_dice(history, turns)
        else:
            nomination = order.trapdoor
            check = check_dice(history, order.dice, turns)
            if check.valid:
                dice = check.dice
            else:  # R18: as if no orders, but a valid nomination stands
                nmr[name] = Nmr(NmrCause.INVALID_DICE, check.problems)
                dice = lowest_legal_dice(history, turns)
        dice_played[name] = dice
        if nomination is None or not is_space(nomination, last):
            # R16/R17: the target of the (first) move actually played
            nomination = default_nomination(state.positions[name] + dice[0], last)
            defaulted.append(name)
        nominations[name] = nomination

    tally = tally_trapdoors(
        nominations.values(),
        len(state.players),
        rules.trapdoor_rule,
        random.Random(f"snl-pbem/{rules.seed}/{number}"),
    )
    outcomes = rules.board.outcomes(tally.active)
    active = frozenset(tally.active)
    positions = dict(state.positions)
    played = dict(state.played)
    turn_results: list[TurnResult] = []
    result: GameResult | None = None
    for index in range(turns):
        turn = state.turns_played + index + 1
        moves: dict[PlayerId, Move] = {}
        for name in state.players:
            die = dice_played[name][index]
            start = positions[name]
            target = start + die
            final, events = (
                outcomes[target] if target < len(outcomes) else rules.board.resolve(target, active)
            )
            moves[name] = Move(die, start, target, final, events)
            positions[name] = final
            played[name] += (die,)
        turn_results.append(TurnResult(turn, moves))
        result = game_result(positions, last, turn)
        if result is not None:  # R5: the game ends after this turn
            break

    round_result = RoundResult(
        round=number,
        turns_ordered=turns,
        orders=dict(orders),
        nmr=nmr,
        nominations=nominations,
        defaulted=frozenset(defaulted),
        tally=tally,
        turns=tuple(turn_results),
        positions=dict(positions),
        result=result,
    )
    next_state = GameState(
        players=state.players,
        positions=positions,
        played=played,
        rounds_played=number,
        turns_played=turn_results[-1].turn,
        result=result,
        history=(*state.history, round_result) if keep_history else (),
    )
    return round_result, next_state


def game_result(
    positions: Mapping[PlayerId, Position], last: Space, turn: int
) -> GameResult | None:
    """R5: after a turn, the player furthest on or past the last space wins; a tie draws."""
    best = max(positions.values(), default=0)
    if best < last:
        return None
    return GameResult(tuple(sorted(n for n, p in positions.items() if p == best)), turn)


@dataclass(frozen=True, slots=True)
class PlayerReport:
    """What one player may be told after a round (R19), and nothing more."""

    round: int
    positions: Mapping[PlayerId, Position]
    """Every player's position at the end of the round."""
    used: tuple[Die, ...]
    """The reader's own dice used in the current set (private to the reader)."""
    open: tuple[Die, ...]
    """The reader's values still open in the current set (private to the reader)."""
    next_round: int | None
    next_round_turns: int | None
    result: GameResult | None


def player_report(rules: GameRules, state: GameState, player: PlayerId) -> PlayerReport:
    """R19: the round number, every position, the next round's kind, the reader's own dice.

    Never another player's dice, nominations, votes, trapdoors, who sent no
    orders, or anything about the board.
    """
    over = state.result is not None
    return PlayerReport(
        round=state.rounds_played,
        positions=dict(state.positions),
        used=state.used_in_set(player),
        open=state.open_values(player),
        next_round=None if over else state.rounds_played + 1,
        next_round_turns=None if over else rules.turns_in_round(state.rounds_played + 1),
        result=state.result,
    )
