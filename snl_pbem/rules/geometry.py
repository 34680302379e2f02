"""The board's vocabulary: spaces, layouts, grids, snakes, ladders and families (R2, R3).

Plain values, shared by :mod:`snl_pbem.rules.board` (the validated board) and
:mod:`snl_pbem.rules.boardspec` (reading a ``[board]`` table).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from snl_pbem.rules.words import counted, joined, tr

Space: TypeAlias = int
"""A numbered square of the board, 1..L."""

Position: TypeAlias = int
"""Where a player stands: 0 is off the board (R4); L or more has reached the end (R5)."""

SNAKE_MARK = "v"
"""A snake's head in board labels (``16v6``)."""
LADDER_MARK = "^"
"""A ladder's foot in board labels (``4^14``)."""

MAX_SIDE = 100
"""The most rows or columns a board may have (so L is at most 10,000)."""


class Layout(Enum):
    """How the spaces 1..L are placed in the grid (R2)."""

    BOUSTROPHEDON = "boustrophedon"
    """The conventional board: 1 bottom-left, rows alternate direction."""
    ROWS = "rows"
    """Every row runs left to right, so below(n) = n - columns."""
    GRID = "grid"
    """An explicit grid of rows, top row first, given by the board's designer."""


class FeatureKind(Enum):
    """What stands on a space."""

    SNAKE = "snake"
    """A snake's head: the player slides down to a lower position."""
    LADDER = "ladder"
    """A ladder's foot: the player climbs to a higher position."""


@dataclass(frozen=True, slots=True)
class Feature:
    """A snake head or ladder foot on ``space`` that moves a player to ``destination``."""

    kind: FeatureKind
    space: Space
    destination: Position

    def __str__(self) -> str:
        return f"{self.kind.value} {self.space}\u2192{self.destination}"


SELECTORS = ("column", "row", "digit_sum", "last_digit", "multiple_of", "spaces")


@dataclass(frozen=True)
class Family:
    """Snakes or ladders placed by a property of the space (R3).

    Every given selector must hold for a space to be selected; each selected
    space moves a player by ``shift`` (negative for snakes, positive for ladders).
    """

    kind: FeatureKind
    shift: int
    column: int | None = None
    row: int | None = None
    digit_sum: int | None = None
    last_digit: int | None = None
    multiple_of: int | None = None
    spaces: frozenset[Space] | None = None

    def selects(self, space: Space, row: int, column: int) -> bool:
        """Whether ``space``, standing in ``row`` and ``column`` (1-based), is selected."""
        return (
            (self.column is None or column == self.column)
            and (self.row is None or row == self.row)
            and (self.digit_sum is None or sum(map(int, str(space))) == self.digit_sum)
            and (self.last_digit is None or space % 10 == self.last_digit)
            and (self.multiple_of is None or space % self.multiple_of == 0)
            and (self.spaces is None or space in self.spaces)
        )

    def describe(self) -> str:
        """The family in words, for a referee and the reveal after a game: ``ladder +10 on
        column 3`` (in the reader's language when a mail shows it, snl_pbem.rules.words)."""
        parts: list[str] = []
        if self.column is not None:
            parts.append(tr("column {n}", n=self.column))
        if self.row is not None:
            parts.append(tr("row {n}", n=self.row))
        if self.digit_sum is not None:
            parts.append(tr("digit sum {n}", n=self.digit_sum))
        if self.last_digit is not None:
            parts.append(tr("last digit {n}", n=self.last_digit))
        if self.multiple_of is not None:
            parts.append(tr("multiples of {n}", n=self.multiple_of))
        if self.spaces is not None:
            parts.append(tr("spaces {list}", list=", ".join(map(str, sorted(self.spaces)))))
        where = joined(tr(" and "), parts)
        if self.kind is FeatureKind.LADDER:
            return tr("ladder {shift} on {where}", shift=f"{self.shift:+d}", where=where)
        return tr("snake {shift} on {where}", shift=f"{self.shift:+d}", where=where)


Grid: TypeAlias = tuple[tuple[Space | None, ...], ...]
"""Rows of cells, top row first; ``None`` is an empty cell."""


def layout_grid(rows: int, columns: int, layout: Layout) -> Grid:
    """The grid of a built-in layout (R2): space 1 bottom-left."""
    bottom_up = []
    for r in range(rows):
        row = list(range(r * columns + 1, (r + 1) * columns + 1))
        if layout is Layout.BOUSTROPHEDON and r % 2 == 1:
            row.reverse()
        bottom_up.append(tuple(row))
    return tuple(reversed(bottom_up))


def grid_problems(grid: Grid) -> Iterator[str]:
    """What stops ``grid`` from holding every space 1..L exactly once (R2)."""
    if not grid or not grid[0]:
        yield "the grid has no cells"
        return
    width = len(grid[0])
    seen: dict[Space, int] = {}
    for top_index, row in enumerate(grid):
        if len(row) != width:
            yield (
                f"grid row {top_index + 1} (from the top) has {counted(len(row), 'cell')}, "
                f"not {width}"
            )
        for space in row:
            if space is not None:
                seen[space] = seen.get(space, 0) + 1
    last = sum(seen.values())
    twice = sorted(s for s, n in seen.items() if n > 1)
    if twice:
        yield "spaces given more than once in the grid: " + ", ".join(map(str, twice))
    outside = sorted(s for s in seen if not 1 <= s <= last)
    if outside:
        yield (f"spaces outside 1..{last} in the grid: " + ", ".join(map(str, outside)))
    missing = [s for s in range(1, last + 1) if s not in seen]
    if missing:
        yield "spaces missing from the grid: " + ", ".join(map(str, missing))
