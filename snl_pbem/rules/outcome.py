"""What a round did, in terms every ruleset shares: each player's move per turn, and the
end of the game. Stored by the application as turn records (one per player and turn)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

from snl_pbem.rules.board import Event
from snl_pbem.rules.geometry import Position

PlayerId: TypeAlias = str
"""A player's name, unique within a game."""


class Move(NamedTuple):
    """One player's move in one turn."""

    die: int
    """The die (postal: chosen) or the throw's total (classic) this move used."""
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
    def dice(self) -> dict[PlayerId, int]:
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
    summary: Mapping[str, Any] | None = None
    """The ruleset's own account of the result, when it says more than the winner (the
    classic game's finishing order: ``{"order": [...]}``)."""

    @property
    def is_draw(self) -> bool:
        return len(self.winners) > 1

    def as_json(self) -> dict[str, Any]:
        """As a game's result is stored and shown: ``{"winner": name}``, ``{"draw": [...]}``
        or the ruleset's own summary."""
        if self.summary is not None:
            return dict(self.summary)
        if self.is_draw:
            return {"draw": list(self.winners)}
        return {"winner": self.winners[0]}


def ranked(positions: Mapping[PlayerId, Position]) -> list[tuple[PlayerId, Position]]:
    """Players from the furthest on, ties by name: the one order standings are shown in."""
    return sorted(positions.items(), key=lambda item: (-item[1], item[0]))
