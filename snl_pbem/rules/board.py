"""The board: its geometry (R2, R11), its snakes and ladders (R3), and how a move ends.

A board is built once, validated completely, and then never changes. Every
question the referee asks of it during play is answered from tables made at
construction: ``below(n)`` (R11), ``feature_at(n)`` (R3) and, per round, the
outcome of landing on each target space given that round's trapdoors
(R11-R15; see :meth:`Board.outcomes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from snl_pbem.rules.boardspec import parse_board
from snl_pbem.rules.errors import BoardError
from snl_pbem.rules.geometry import (
    SELECTORS,
    Family,
    Feature,
    FeatureKind,
    Grid,
    Layout,
    Position,
    Space,
    grid_problems,
)


class EventKind(Enum):
    """Something that moved a player after the die (R11-R15)."""

    TRAPDOOR = "trapdoor"
    """Fell through an active trapdoor to the space below (R11)."""
    SNAKE = "snake"
    """Slid down a snake (R3, R13)."""
    LADDER = "ladder"
    """Climbed a ladder (R3, R13)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One step of a move after the die: ``trapdoor 45→36``, ``ladder 4→14``."""

    kind: EventKind
    start: Position
    end: Position

    def __str__(self) -> str:
        return f"{self.kind.value} {self.start}\u2192{self.end}"


class Outcome(NamedTuple):
    """Where a move to a target space ends, and what happened on the way."""

    final: Position
    events: tuple[Event, ...]


class Board:
    """A validated board: geometry, snakes and ladders.

    Build one with :meth:`from_mapping` (a ``[board]`` table as in DESIGN.md)
    or :meth:`build`. Construction raises :class:`BoardError` listing every
    problem found, each naming its key and spaces.
    """

    def __init__(
        self,
        grid: Grid,
        features: Mapping[Space, Feature],
        *,
        layout: Layout = Layout.GRID,
        families: Sequence[Family] = (),
    ) -> None:
        problems = list(grid_problems(grid))
        if problems:
            raise BoardError(problems)
        self.grid = grid
        self.layout = layout
        self.families = tuple(families)
        self.rows = len(grid)
        self.columns = len(grid[0]) if grid else 0
        cells: dict[Space, tuple[int, int]] = {}
        for top_index, cells_in_row in enumerate(grid):
            for col_index, space in enumerate(cells_in_row):
                if space is not None:
                    cells[space] = (self.rows - top_index, col_index + 1)
        self._cells = cells
        self.last: Space = len(cells)
        """L, the last space (R2: 100 on the standard board)."""
        below: dict[Space, Space] = {}
        for space, (row, column) in cells.items():
            if row > 1:
                under = grid[self.rows - row + 1][column - 1]
                if under is not None:
                    below[space] = under
        self._below = below
        self._features = dict(features)
        self._check()

    # -- construction -----------------------------------------------------------------

    @classmethod
    def build(
        cls,
        rows: int = 10,
        columns: int = 10,
        layout: Layout = Layout.BOUSTROPHEDON,
        *,
        grid: Sequence[Sequence[Space | None]] | None = None,
        snakes: Mapping[Space, Position] | None = None,
        ladders: Mapping[Space, Position] | None = None,
        families: Sequence[Family] = (),
    ) -> Board:
        """A board from Python values; the same checks as :meth:`from_mapping`."""
        table: dict[str, object] = {"rows": rows, "columns": columns}
        if grid is not None:
            table["grid"] = [list(r) for r in grid]
            del table["rows"], table["columns"]
        else:
            table["layout"] = layout.value
        table["snakes"] = {str(k): v for k, v in (snakes or {}).items()}
        table["ladders"] = {str(k): v for k, v in (ladders or {}).items()}
        family_tables: list[dict[str, object]] = []
        for fam in families:
            entry: dict[str, object] = {"kind": fam.kind.value, "shift": fam.shift}
            for key in SELECTORS:
                value = getattr(fam, key)
                if value is not None:
                    entry[key] = sorted(value) if key == "spaces" else value
            family_tables.append(entry)
        table["family"] = family_tables
        return cls.from_mapping(table)

    @classmethod
    def from_mapping(cls, data: object, where: str = "board") -> Board:
        """Parse a ``[board]`` table (DESIGN.md, "Offline adjudication").

        ``where`` prefixes every message (``board.snakes.16: ...``).
        """
        spec = parse_board(data, where)
        try:
            return cls(spec.grid, spec.features, layout=spec.layout, families=spec.families)
        except BoardError as exc:
            raise BoardError(f"{where}: {p}" for p in exc.problems) from None

    # -- geometry (R2, R11) -------------------------------------------------------------

    def below(self, space: Space) -> Space | None:
        """The space in the cell directly beneath ``space``, or None (R11)."""
        return self._below.get(space)

    def cell(self, space: Space) -> tuple[int, int]:
        """``(row, column)`` of a space: row 1 is the bottom, column 1 the leftmost."""
        return self._cells[space]

    def spaces(self) -> range:
        """Every space, 1..L."""
        return range(1, self.last + 1)

    # -- snakes and ladders (R3) ---------------------------------------------------------

    def feature_at(self, space: Position) -> Feature | None:
        """The snake head or ladder foot on ``space``, if any."""
        return self._features.get(space)

    @property
    def features(self) -> tuple[Feature, ...]:
        """Every snake and ladder, by space."""
        return tuple(self._features[s] for s in sorted(self._features))

    @property
    def snakes(self) -> dict[Space, Position]:
        """Snake heads and where they lead."""
        return {f.space: f.destination for f in self.features if f.kind is FeatureKind.SNAKE}

    @property
    def ladders(self) -> dict[Space, Position]:
        """Ladder feet and where they lead."""
        return {f.space: f.destination for f in self.features if f.kind is FeatureKind.LADDER}

    # -- moving (R11-R15) ----------------------------------------------------------------

    def resolve(self, target: Position, trapdoors: Iterable[Space] = ()) -> Outcome:
        """Where a move to ``target`` ends, exactly as RULES.md's loop.

        A trapdoor acts before a snake or ladder on the same space (R12); after
        a fall, a snake or ladder acts as normal (R13); a player may fall through
        several trapdoors (R14) but through each at most once a turn (R15); a
        trapdoor with no space beneath it does nothing. Positions past L are
        left alone: nothing stands there.
        """
        active = trapdoors if isinstance(trapdoors, (set, frozenset)) else set(trapdoors)
        position = target
        used: set[Space] = set()
        events: list[Event] = []
        while position <= self.last:
            if position in active and position not in used:
                under = self._below.get(position)
                if under is not None:
                    used.add(position)  # R15: a trapdoor works once a turn
                    events.append(Event(EventKind.TRAPDOOR, position, under))
                    position = under
                    continue
            feature = self._features.get(position)
            if feature is None:
                break
            kind = EventKind.SNAKE if feature.kind is FeatureKind.SNAKE else EventKind.LADDER
            events.append(Event(kind, position, feature.destination))
            position = feature.destination
        return Outcome(position, tuple(events))

    def outcomes(self, trapdoors: Iterable[Space] = ()) -> tuple[Outcome, ...]:
        """The outcome of every target 0..L+6 for one round's trapdoors.

        A move's outcome depends only on its target and the round's active
        trapdoors, so a round resolves every player's move by one lookup.
        """
        active = frozenset(trapdoors)
        acting = active | self._features.keys()  # a move to any other space ends there
        return tuple(
            self.resolve(t, active) if t in acting else Outcome(t, ()) for t in range(self.last + 7)
        )

    # -- validation ----------------------------------------------------------------------

    def _check(self) -> None:
        problems = []
        for space, feature in sorted(self._features.items()):
            if space != feature.space or not 1 <= space <= self.last:
                problems.append(f"{feature}: space {space} is not on the board (1..{self.last})")
            elif feature.kind is FeatureKind.SNAKE and not feature.destination < space:
                problems.append(f"{feature}: a snake must lead to a lower space")
            elif feature.kind is FeatureKind.LADDER and not feature.destination > space:
                problems.append(f"{feature}: a ladder must lead to a higher space")
            elif feature.destination < 0:
                problems.append(f"{feature}: a destination below 1 must be given as 0")
        for space, below in sorted(self._below.items()):
            if below > space:
                problems.append(
                    f"space {below} is beneath space {space} but has a higher number "
                    "(down must be lower, R3)"
                )
        if self._cells and self._cells.get(1, (0, 0))[0] != 1:
            problems.append("space 1 must be on the bottom row")
        problems.extend(self._loops())
        if problems:
            raise BoardError(problems)

    def _loops(self) -> Iterator[str]:
        """Snake/ladder chains that never end (e.g. ladder 10→20 and snake 20→10)."""
        state: dict[Space, int] = {}  # 1: on the current path, 2: known to end
        for start in sorted(self._features):
            path: list[Space] = []
            space: Position = start
            while space in self._features and state.get(space) is None:
                state[space] = 1
                path.append(space)
                space = self._features[space].destination
            if state.get(space) == 1:
                cycle = [*path[path.index(space) :], space]
                yield "snakes and ladders loop: " + " -> ".join(map(str, cycle))
            for visited in path:
                state[visited] = 2

    def __repr__(self) -> str:
        return (
            f"<Board {self.rows}x{self.columns} {self.layout.value} L={self.last} "
            f"snakes={len(self.snakes)} ladders={len(self.ladders)}>"
        )
