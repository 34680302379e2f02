"""A whole game: its settings, its state between rounds, and adjudicating one round.

``adjudicate_round`` is the referee's whole job for one round, in RULES.md's
order: check each player's dice (R6, R18) or play the lowest legal dice for
them (R17); take each nomination or default it (R16, R18); tally the
trapdoors (R8, R9, R10); resolve every player's move, turn by turn,
simultaneously (R11-R15); stop after any turn in which someone reached the
last space (R5). It is pure: the same inputs give the same result.
"""

from __future__ import annotations

import gc
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from functools import lru_cache
from itertools import compress, repeat
from operator import add, getitem, itemgetter
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Iterable

from snl_pbem.rules.board import Board, Outcome
from snl_pbem.rules.errors import GameSetupError
from snl_pbem.rules.geometry import Position, Space
from snl_pbem.rules.outcome import GameResult, Move, PlayerId, TurnResult
from snl_pbem.rules.postal.dice import (
    DIE_VALUES,
    SET_SIZE,
    DiceProblem,
    Die,
    check_dice,
    lowest_legal_dice,
    open_values,
    used_in_set,
)
from snl_pbem.rules.postal.trapdoors import (
    Tally,
    TrapdoorRule,
    decide_trapdoors,
    default_nomination,
)
from snl_pbem.rules.words import counted

_V = TypeVar("_V")

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
    nomination: int | None = None


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
class PostalState:
    """Where a game stands between rounds."""

    players: tuple[PlayerId, ...]
    positions: Mapping[PlayerId, Position]
    played: Mapping[PlayerId, tuple[Die, ...]]
    """The dice each player has played after turn ``played_from``, in turn order."""
    rounds_played: int = 0
    turns_played: int = 0
    result: GameResult | None = None
    history: tuple[RoundResult, ...] = field(default=(), repr=False)
    played_from: int = 0
    """Turns before ``played`` begins: a multiple of six, so that a state loaded from
    storage need only hold the dice of the current set (R6 looks no further back)."""

    def __post_init__(self) -> None:
        # Every player takes every turn (an NMR still moves), so all share turn numbers.
        lengths = set(map(len, self.played.values()))
        expected = self.turns_played - self.played_from
        if (
            lengths - {expected}
            or len(self.played) != len(self.players)
            or self.played_from % SET_SIZE
            or expected < 0
        ):
            raise GameSetupError(
                f"every player must have played {counted(expected, 'die', 'dice')} since turn "
                f"{self.played_from} (found {sorted(lengths)})"
            )

    @classmethod
    def start(cls, players: Sequence[PlayerId]) -> PostalState:
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
    state: PostalState,
    orders: Mapping[PlayerId, OrderSet | None],
    *,
    keep_history: bool = True,
) -> tuple[RoundResult, PostalState]:
    """Play the next round with these orders; a missing or None order is an NMR (R17).

    A round may have 100,000 players, so nothing here runs Python code once per player
    (but for a nomination R16 defaults): the players are ``map``-ped and ``zip``-ped over,
    each distinct order is checked once (:class:`_Verdicts`) and each (start, die) moved
    once (:class:`Steps`). The garbage collector waits meanwhile: a round makes several
    objects per player and keeps them, so its passes would find nothing to free (and
    took a fifth of a large round's time). What is left of a large round's time is
    mostly the results themselves: six dicts of every player and their dice played
    (about half of it at 100,000 players, much of that new memory's page faults).
    """
    if not gc.isenabled():
        return _adjudicate(rules, state, orders, keep_history)
    gc.disable()
    try:
        return _adjudicate(rules, state, orders, keep_history)
    finally:
        gc.enable()


def _adjudicate(
    rules: GameRules,
    state: PostalState,
    orders: Mapping[PlayerId, OrderSet | None],
    keep_history: bool,
) -> tuple[RoundResult, PostalState]:
    names = state.players
    if state.result is not None:
        raise GameSetupError(f"the game is over (after round {state.rounds_played})")
    # Every state made here holds its players in order: then a table's values are the
    # players' in order, with no look-up by name.
    ordered = len(state.positions) == len(names) and tuple(state.positions) == names
    listed = ordered and len(orders) == len(names) and tuple(orders) == names
    if not listed and not state.positions.keys() >= orders.keys():
        unknown = [name for name in orders if name not in state.positions]
        raise GameSetupError("orders from players not in the game: " + ", ".join(sorted(unknown)))
    number = state.rounds_played + 1
    turns = rules.turns_in_round(number)
    last = rules.board.last
    # What is read once per player is read through an iterator, not copied to a list:
    # much of a large round's time is new memory (a page fault every 4 KiB).
    given = orders.values() if listed else list(map(orders.get, names))
    set_start = state.turns_played - state.turns_played % SET_SIZE - state.played_from
    in_set: Iterable[tuple[Die, ...]] | None
    if set_start == state.turns_played - state.played_from:
        in_set = None  # a set has just ended (every player has played as many dice)
    elif set_start == 0:
        in_set = _in_order(state.played, names)
    else:
        in_set = map(itemgetter(slice(set_start, None)), _in_order(state.played, names))
    dice_played, nmr = _referee_dice(names, in_set, given, turns)
    nominations, defaulted, votes = _nominations(names, state.positions, given, dice_played, last)
    tally = decide_trapdoors(
        votes, len(names), rules.trapdoor_rule, random.Random(f"snl-pbem/{rules.seed}/{number}")
    )

    # All players move simultaneously and independently (R11-R15), turn by turn.
    steps = Steps(rules.board, tally.active)
    if len(names) >= last:  # (most starts will be used)
        steps.fill()
    positions: Iterable[Position] = (
        state.positions.values() if ordered else map(state.positions.__getitem__, names)
    )
    turn_results: list[TurnResult] = []
    ended = False
    for index in range(turns):
        dice = map(itemgetter(index), dice_played)
        made = map(getitem, map(steps.__getitem__, positions), dice)
        moves = dict(zip(names, made, strict=True))
        positions = map(_FINAL, moves.values())
        turn_results.append(TurnResult(state.turns_played + index + 1, moves))
        if steps.near and max(map(_FINAL, moves.values())) >= last:
            ended = True  # R5: the game ends after this turn
            break
    final_positions = dict(zip(names, positions, strict=True))
    turn = turn_results[-1].turn
    result = game_result(final_positions, last, turn) if ended else None
    if len(turn_results) < turns:  # the game ended before the round's last turn
        dice_played = [dice[: len(turn_results)] for dice in dice_played]
    played = dict(zip(names, map(add, _in_order(state.played, names), dice_played), strict=True))

    round_result = RoundResult(
        round=number,
        turns_ordered=turns,
        orders=dict(orders),
        nmr=nmr,
        nominations=dict(zip(names, nominations, strict=True)),
        defaulted=frozenset(defaulted),
        tally=tally,
        turns=tuple(turn_results),
        positions=final_positions,
        result=result,
    )
    next_state = _made_state(
        players=names,
        positions=final_positions,
        played=played,
        rounds_played=number,
        turns_played=turn,
        result=result,
        history=(*state.history, round_result) if keep_history else (),
        played_from=state.played_from,
    )
    return round_result, next_state


def _made_state(**values: Any) -> PostalState:
    """A PostalState made without ``__post_init__``'s check that every player has played
    as many dice: a round makes its next state so (every player plays every turn), and
    the check is a pass over every player."""
    state = object.__new__(PostalState)
    for item in fields(PostalState):
        object.__setattr__(state, item.name, values[item.name])
    return state


def _in_order(table: Mapping[PlayerId, _V], names: tuple[PlayerId, ...]) -> Iterable[_V]:
    """``table``'s value for each of ``names``, in that order: its values as they stand
    when it holds exactly those names in that order (as every state made here does),
    which saves a look-up by name per player."""
    if len(table) == len(names) and tuple(table) == names:
        return table.values()
    return map(table.__getitem__, names)


_FINAL = itemgetter(3)
"""``Move.final`` by index (``map`` over a whole turn)."""


def _referee_dice(
    names: tuple[PlayerId, ...],
    used_in_set: Iterable[tuple[Die, ...]] | None,
    orders: Iterable[OrderSet | None],
    turns: int,
) -> tuple[list[tuple[Die, ...]], dict[PlayerId, Nmr]]:
    """Each player's dice actually played (in ``names`` order), after R6, R17 and R18,
    and who counts as sending no orders.

    ``used_in_set`` holds each player's dice already used in the current set (None when
    none has used any), ``orders`` each player's orders or None. Many players share a
    history and an order's dice, so each distinct pair is decided once (:class:`_Verdicts`).
    """
    # getattr's default stands for a missing order's (None's) dice: R17
    ordered = map(getattr, orders, repeat("dice"), repeat(None))
    by_used = _VerdictsByUsed(turns)
    decided = list(
        map(by_used[()].__getitem__, ordered)
        if used_in_set is None
        else map(getitem, map(by_used.__getitem__, used_in_set), ordered)
    )
    dice_played: list[tuple[Die, ...]] = list(map(itemgetter(0), decided))
    nmr: dict[PlayerId, Nmr] = {}
    if any(verdicts.nmr for verdicts in by_used.values()):
        why = map(itemgetter(1), decided)
        nmr = dict(compress(zip(names, why, strict=True), map(itemgetter(1), decided)))
    return dice_played, nmr


def _nominations(
    names: tuple[PlayerId, ...],
    starts: Mapping[PlayerId, Position],
    orders: Iterable[OrderSet | None],
    dice_played: Sequence[tuple[Die, ...]],
    last: Space,
) -> tuple[list[Space | None], list[PlayerId], Counter[Space]]:
    """Each player's nomination after R16 (in ``names`` order), the players given one by
    R16, and the votes per space (R8).

    The votes are counted once, before R16 (when every nomination is an int or None:
    otherwise after it), and only the players without a valid nomination are visited one
    by one.
    """
    nominations: list[Space | None] = list(map(getattr, orders, repeat("nomination"), repeat(None)))
    votes: Counter[Space] | None = None
    if set(map(type, nominations)) <= {int, type(None)}:  # (not bool: R16 wants a space)
        counted = Counter(nominations)
        wrong_values = [n for n in counted if n is None or not 1 <= n <= last]
        for value in wrong_values:
            del counted[value]  # every player who gave it is given a space below
        votes = cast("Counter[Space]", counted)
        if not wrong_values:
            return nominations, [], votes
        spaces: dict[Space | None, bool] = dict.fromkeys(range(1, last + 1), False)
        wrong: Iterable[bool] = map(spaces.get, nominations, repeat(True))
    else:
        wrong = (type(n) is not int or not 1 <= n <= last for n in nominations)
    defaulted: list[PlayerId] = []
    given: list[Space] = []
    for index in compress(range(len(names)), wrong):
        # R16/R17: the target of the (first) move actually played
        name = names[index]
        nomination = default_nomination(starts[name] + dice_played[index][0], last)
        nominations[index] = nomination
        defaulted.append(name)
        if nomination is not None:  # (past the last space: no nomination)
            given.append(nomination)
    if votes is None:
        counted = Counter(nominations)
        del counted[None]
        return nominations, defaulted, cast("Counter[Space]", counted)
    votes.update(given)
    return nominations, defaulted, votes


class _Verdicts(dict[tuple[int, ...] | None, tuple[tuple[Die, ...], Nmr | None]]):
    """For players who have used these dice in the set: an order's dice (None for no
    orders) -> (the dice played, why the player counts as sending no orders, or None),
    each decided on first use."""

    NO_ORDERS = Nmr(NmrCause.NO_ORDERS)

    def __init__(self, turns: int, used: tuple[Die, ...]) -> None:
        super().__init__()
        self._turns = turns
        self._used = used
        self.nmr = False
        """Whether some verdict is an NMR."""

    def __missing__(self, dice: tuple[int, ...] | None) -> tuple[tuple[Die, ...], Nmr | None]:
        verdict: tuple[tuple[Die, ...], Nmr | None]
        if dice is None:  # R17
            verdict = lowest_legal_dice(self._used, self._turns), self.NO_ORDERS
        else:
            verdict = _dice_verdict(self._used, dice, self._turns)
        self.nmr = self.nmr or verdict[1] is not None
        self[dice] = verdict
        return verdict


class _VerdictsByUsed(dict[tuple[Die, ...], _Verdicts]):
    """The dice used in the set -> the :class:`_Verdicts` for players who have used them."""

    def __init__(self, turns: int) -> None:
        super().__init__()
        self._turns = turns

    def __missing__(self, used: tuple[Die, ...]) -> _Verdicts:
        verdicts = self[used] = _Verdicts(self._turns, used)
        return verdicts


@lru_cache(maxsize=4096)  # (the same few orders come in every round)
def _dice_verdict(
    used: tuple[Die, ...], dice: tuple[int, ...], turns: int
) -> tuple[tuple[Die, ...], Nmr | None]:
    """The dice to play for an order and, if its dice break R6, why it counts as no orders."""
    check = check_dice(used, dice, turns)
    if check.valid:
        return check.dice, None
    # R18: as if no orders (so R17's lowest legal dice), but a valid nomination stands
    return lowest_legal_dice(used, turns), Nmr(NmrCause.INVALID_DICE, check.problems)


class Steps(dict[Position, dict[Die, Move]]):
    """One round's moves by start, then die (``steps[start][die]``), made on first use.

    Given the round's trapdoors a move depends only on its start and die, so every
    player starting on the same space with the same die shares one Move, and a turn's
    moves are one ``map`` over the players.
    """

    def __init__(self, board: Board, trapdoors: tuple[Space, ...]) -> None:
        super().__init__()
        self._board = board
        self._active = frozenset(trapdoors)
        self._outcomes: dict[Position, Outcome] = {}
        self.near = False
        """Whether a start was used from which a die reaches the last space: only then
        need a turn's moves be looked at for R5."""

    def __missing__(self, start: Position) -> dict[Die, Move]:
        row = self[start] = self._row(start)
        self.near = self.near or max(map(_FINAL, row.values())) >= self._board.last
        return row

    def _row(self, start: Position) -> dict[Die, Move]:
        row: dict[Die, Move] = {}
        for die in DIE_VALUES:
            target = start + die
            outcome = self._outcomes.get(target)
            if outcome is None:
                outcome = self._outcomes[target] = self._board.resolve(target, self._active)
            row[die] = Move(die, start, target, outcome.final, outcome.events)
        return row

    def fill(self) -> None:
        """Every start before the last space from which no die reaches it, at once:
        cheaper than one at a time when the players are many more than the spaces.

        Most moves pass no active trapdoor, and those are the board's own (:func:`_plain`);
        only the moves whose way passes an active trapdoor are made again.
        """
        board, last = self._board, self._board.last
        plain, through = _plain(board)
        self.update(plain)  # (its rows are shared, so never changed: only replaced)
        changed: dict[Position, dict[Die, Move]] = {}
        for target in sorted({t for space in self._active for t in through.get(space, ())}):
            outcome = board.resolve(target, self._active)
            for die in DIE_VALUES:
                start = target - die
                if start not in plain:
                    continue  # (made when used)
                if start not in changed:
                    changed[start] = dict(plain[start])
                changed[start][die] = Move(die, start, target, outcome.final, outcome.events)
        for start, row in changed.items():
            if max(map(_FINAL, row.values())) < last:
                self[start] = row
            else:
                del self[start]  # made again when used, to tell R5


@lru_cache(maxsize=64)  # (as many boards as app.lookup keeps)
def _plain(board: Board) -> tuple[dict[Position, dict[Die, Move]], dict[Space, list[Position]]]:
    """A board's moves with no active trapdoor, as :meth:`Steps.fill` uses them, and each
    space's targets: those whose move stands on it (a trapdoor there may change them)."""
    steps = Steps(board, ())
    through: dict[Space, list[Position]] = {}
    for target, (_, events) in enumerate(board.outcomes(())):
        for space in (target, *(event.end for event in events)):
            through.setdefault(space, []).append(target)
    rows = {start: steps._row(start) for start in range(board.last)}
    plain = {s: row for s, row in rows.items() if max(map(_FINAL, row.values())) < board.last}
    return plain, through


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


def player_report(rules: GameRules, state: PostalState, player: PlayerId) -> PlayerReport:
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
