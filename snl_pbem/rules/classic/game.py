"""The classic, dice-rolled game (RULES-CLASSIC.md C1-C12), pure and deterministic.

One call plays one round (C1: a turn for every player still racing, in the player
list's order) from a state and a source of throws: the server's seeded dice (C11,
:func:`seeded_throws`) or a replay file's lists. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from snl_pbem.rules.board import Board
from snl_pbem.rules.classic.options import (
    ClassicOptions,
    Dice,
    Ending,
    EnterOn,
    Finish,
    ForfeitTo,
    MaxRoll,
    StartRule,
)
from snl_pbem.rules.errors import GameSetupError
from snl_pbem.rules.geometry import Position
from snl_pbem.rules.outcome import PlayerId

Throws = Callable[[PlayerId], "tuple[int, ...] | None"]
"""The next throw of a player's dice, or None when there is none (a replay's list ran
out: the round in progress is then left out)."""

# what happened in a throw, in the order it happened (RULES-CLASSIC.md, "Offline replay")
LADDER = "ladder"
SNAKE = "snake"
BOUNCE = "bounce"
NO_MOVE = "no_move"
WAITING = "waiting"
ENTERED = "entered"
FORFEIT = "forfeit"
FINISHED = "finished"
BUMPED = "bumped:"
"""``bumped:<player>``: this throw's piece sent that player's back to space 0 (C7)."""

IN_A_ROW_TO_FORFEIT = 3


@dataclass(frozen=True)
class Record:
    """A player's counts (C10)."""

    rolls: int = 0
    ladders: int = 0
    snakes: int = 0
    bumps_given: int = 0
    bumps_taken: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "rolls": self.rolls,
            "ladders": self.ladders,
            "snakes": self.snakes,
            "bumps_given": self.bumps_given,
            "bumps_taken": self.bumps_taken,
        }


@dataclass(frozen=True)
class ClassicState:
    """The game between rounds: enough to play the next one."""

    players: tuple[PlayerId, ...]
    positions: Mapping[PlayerId, Position]
    """0 is the waiting area (C5); L is finished."""
    finished: Mapping[PlayerId, int] = field(default_factory=dict)
    """Who finished, in finishing order, and in which round (C9, C10)."""
    reenter: frozenset[PlayerId] = frozenset()
    """Pieces a forfeit sent to 0 under reenter_needs_max: they must throw a maximum (C8)."""
    records: Mapping[PlayerId, Record] = field(default_factory=dict)
    rounds_played: int = 0
    over: bool = False

    @classmethod
    def start(cls, players: Sequence[PlayerId]) -> ClassicState:
        if len(players) < 1 or len(set(players)) != len(players):
            raise GameSetupError(f"players: {list(players)!r} must be distinct names")
        return cls(
            players=tuple(players),
            positions=dict.fromkeys(players, 0),
            records={p: Record() for p in players},
        )

    def record(self, player: PlayerId) -> Record:
        return self.records.get(player, Record())

    def result(self, options: ClassicOptions) -> dict[str, Any] | None:
        """``{"winner": name}`` (finish = "first"), ``{"order": [...]}`` (finish = "all"),
        or None while the game goes on (C9)."""
        if not self.over:
            return None
        if options.finish is Finish.FIRST:
            return {"winner": next(iter(self.finished))}
        return {
            "order": [
                {"player": p, "round": r, "rolls": self.record(p).rolls}
                for p, r in self.finished.items()
            ]
        }

    def as_json(self) -> dict[str, Any]:
        """For the store: :meth:`from_json` gives the same state back."""
        return {
            "players": list(self.players),
            "positions": dict(self.positions),
            "finished": [[p, r] for p, r in self.finished.items()],
            "reenter": sorted(self.reenter),
            "records": {p: rec.as_json() for p, rec in self.records.items()},
            "rounds_played": self.rounds_played,
            "over": self.over,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClassicState:
        return cls(
            players=tuple(data["players"]),
            positions={str(p): int(v) for p, v in data["positions"].items()},
            finished={str(p): int(r) for p, r in data["finished"]},
            reenter=frozenset(data["reenter"]),
            records={str(p): Record(**rec) for p, rec in data["records"].items()},
            rounds_played=int(data["rounds_played"]),
            over=bool(data["over"]),
        )


@dataclass(frozen=True)
class Throw:
    """One throw of one player's dice and what it did."""

    player: PlayerId
    dice: tuple[int, ...]
    start: Position
    end: Position
    events: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "player": self.player,
            "dice": list(self.dice),
            "from": self.start,
            "to": self.end,
            "events": list(self.events),
        }


@dataclass(frozen=True)
class ClassicRound:
    """A round as played: every throw in play order, and the positions at its end (or
    when the game ended in it, C9)."""

    round: int
    throws: tuple[Throw, ...]
    positions: Mapping[PlayerId, Position]

    def as_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "throws": [t.as_json() for t in self.throws],
            "positions": dict(self.positions),
        }


def seeded_throws(seed: int, round_number: int, dice: Dice) -> Throws:
    """C11: the server's dice for one round, from the game's seed and the round's number
    alone, so a rolled-back round thrown again gives the same throws."""
    rng = random.Random(f"snl-pbem classic {seed} round {round_number}")

    def throw(_player: PlayerId) -> tuple[int, ...]:
        return tuple(rng.randint(1, dice.sides) for _ in range(dice.count))

    return throw


class _OutOfThrows(Exception):
    pass


def play_round(
    board: Board, options: ClassicOptions, state: ClassicState, throws: Throws
) -> tuple[ClassicRound, ClassicState] | None:
    """Play the next round (C1-C10), or None if ``throws`` ran out before its end."""
    if state.over:
        raise GameSetupError("the game is over: no more rounds are played")
    play = _Round(board, options, state)
    try:
        for player in state.players:  # C1: the player list's order, finished ones skipped
            if player in play.finished:
                continue
            play.turn(player, throws)
            if play.over:
                break
    except _OutOfThrows:
        return None
    number = state.rounds_played + 1
    after = ClassicState(
        players=state.players,
        positions=dict(play.positions),
        finished=dict(play.finished),
        reenter=frozenset(play.reenter),
        records=dict(play.records),
        rounds_played=number,
        over=play.over,
    )
    return ClassicRound(number, tuple(play.log), dict(play.positions)), after


class _Round:
    """The mutable working state of one round."""

    def __init__(self, board: Board, options: ClassicOptions, state: ClassicState) -> None:
        self.board, self.options = board, options
        self.players = state.players
        self.number = state.rounds_played + 1
        self.positions = dict(state.positions)
        self.finished = dict(state.finished)
        self.reenter = set(state.reenter)
        self.records = {p: state.record(p) for p in state.players}
        self.entered: set[PlayerId] = set()
        """Pieces on 0 whose qualifying throw let them move by their next throw (C5)."""
        self.log: list[Throw] = []
        self.over = False
        self.at: dict[Position, set[int]] | None = None
        """With C7 bumps: the players on each space, by their place in the player list,
        so that a piece coming to rest looks only at the pieces on its space, not at every
        player (a round would otherwise take time in the square of the players)."""
        if options.bump:
            self.at = {}
            for index, player in enumerate(self.players):
                self.at.setdefault(self.positions[player], set()).add(index)
            self.index = {player: index for index, player in enumerate(self.players)}

    def _place(self, player: PlayerId, to: Position) -> None:
        if self.at is not None:
            index = self.index[player]
            self.at[self.positions[player]].discard(index)
            self.at.setdefault(to, set()).add(index)
        self.positions[player] = to

    def _count(self, player: PlayerId, **more: int) -> None:
        record = self.records[player]
        self.records[player] = replace(
            record, **{k: getattr(record, k) + v for k, v in more.items()}
        )

    def _must_enter(self, player: PlayerId) -> bool:
        """C5/C8: on space 0 and obliged to throw a maximum first."""
        return (
            self.positions[player] == 0
            and player not in self.entered
            and (self.options.start_rule is StartRule.MAX_TO_ENTER or player in self.reenter)
        )

    def turn(self, player: PlayerId, throws: Throws) -> None:
        in_a_row = 0  # maximums in a row this turn (C6)
        while True:
            dice = throws(player)
            if dice is None:
                raise _OutOfThrows
            self._count(player, rolls=1)  # C10: every throw is a roll
            maximum = self.options.dice.is_maximum(dice)
            start = self.positions[player]
            if self._must_enter(player):
                if not maximum:  # C5: not a maximum: still waiting, the turn ends
                    self._log(player, dice, 0, 0, [WAITING])
                    return
                # C5: the qualifying throw does not move the piece and is no maximum for C6:
                # read as breaking a run of maximums (it is not one), as a throw that is no
                # maximum does
                in_a_row = 0
                # C8: after a forfeit, roll_again whatever enter_on says; the piece owes its
                # maximum again until it has moved off 0 (C5: entered but unmoved is waiting)
                roll_again = player in self.reenter or self.options.enter_on is EnterOn.ROLL_AGAIN
                if roll_again:
                    self.entered.add(player)
                    self._log(player, dice, 0, 0, [ENTERED])
                    continue
                entering = [ENTERED]
                self._rest(player, dice, 0, self._features(player, 1, entering), entering)
                return  # C5 square1: placed on 1, C3 there, and the turn ends
            if (
                maximum
                and self.options.max_roll is MaxRoll.FORFEIT_AFTER_THREE
                and in_a_row == IN_A_ROW_TO_FORFEIT - 1
            ):  # C6: the third maximum in a row is not moved, even one that would finish
                to = 0 if self.options.forfeit_to is ForfeitTo.START else 1
                self._place(player, to)
                self.entered.discard(player)
                if to == 0 and self.options.reenter_needs_max:
                    self.reenter.add(player)  # C8
                self._log(player, dice, start, to, [FORFEIT])  # nothing acts there (C6)
                return
            events: list[str] = []
            target = self._ending(start, sum(dice), events)  # C2, C4
            if target is None:  # C4 exact: not moved; a piece at 0 is still waiting (C5)
                self.entered.discard(player)
                self._log(player, dice, start, start, [NO_MOVE])
            else:
                self.entered.discard(player)
                self.reenter.discard(player)  # C8 is satisfied once the piece has moved
                self._rest(player, dice, start, self._features(player, target, events), events)
                if player in self.finished:
                    return  # C6: a piece that finishes throws no more
            if not maximum or self.options.max_roll is MaxRoll.NOTHING:
                return
            in_a_row += 1  # C6: roll_again, or forfeit_after_three before the third

    def _ending(self, start: Position, total: int, events: list[str]) -> Position | None:
        """C2 and C4: where a move of ``total`` from ``start`` stops, before C3; None
        when C4 ``exact`` does not move it."""
        last = self.board.last
        target = start + total
        if target <= last:
            return target
        if self.options.ending is Ending.CLOSE_ENOUGH:
            return last
        if self.options.ending is Ending.EXACT:
            return None
        events.append(BOUNCE)
        return max(1, last - (target - last))

    def _features(self, player: PlayerId, space: Position, events: list[str]) -> Position:
        """C3: the snake or ladder where the piece stops moves it; with ``chain`` the one
        at the other end acts too (each counted, C10)."""
        position = space
        while 1 <= position <= self.board.last:
            feature = self.board.feature_at(position)
            if feature is None:
                break
            climbed = feature.destination > position
            events.append(LADDER if climbed else SNAKE)
            self._count(player, **({"ladders": 1} if climbed else {"snakes": 1}))
            position = min(feature.destination, self.board.last)
            if not self.options.chain:
                break
        return position

    def _rest(
        self,
        player: PlayerId,
        dice: tuple[int, ...],
        start: Position,
        end: Position,
        events: list[str],
    ) -> None:
        """The piece comes to rest on ``end``: it finishes there (C4, C9) or bumps the
        pieces standing there (C7)."""
        self._place(player, end)
        if end >= self.board.last:
            self._place(player, self.board.last)
            self.finished[player] = self.number
            events.append(FINISHED)
            if self.options.finish is Finish.FIRST or len(self.finished) == len(self.positions):
                self.over = True  # C9
        elif self.at is not None and end != 0:
            for index in sorted(self.at[end]):  # in the player list's order (C1)
                other = self.players[index]
                if other != player and other not in self.finished:
                    self._place(other, 0)
                    self.entered.discard(other)
                    self._count(player, bumps_given=1)
                    self._count(other, bumps_taken=1)
                    events.append(BUMPED + other)
        self._log(player, dice, start, self.positions[player], events)

    def _log(
        self,
        player: PlayerId,
        dice: tuple[int, ...],
        start: Position,
        end: Position,
        events: list[str],
    ) -> None:
        self.log.append(Throw(player, dice, start, end, tuple(events)))
