"""Reading a ``[board]`` table (DESIGN.md) into the parts of a board, reporting every problem.

The table is plain data (from JSON or TOML): ``rows``, ``columns``, ``layout``
or ``grid``, ``snakes`` and ``ladders`` (space -> destination, keys are
strings), and ``family`` (snakes or ladders selected by a property, R3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from snl_pbem.rules.errors import BoardError
from snl_pbem.rules.geometry import (
    MAX_SIDE,
    SELECTORS,
    Family,
    Feature,
    FeatureKind,
    Grid,
    Layout,
    Position,
    Space,
    grid_problems,
    layout_grid,
)

BOARD_KEYS = ("rows", "columns", "layout", "grid", "snakes", "ladders", "family")


class _Problems(list[str]):
    def add(self, path: str, message: str) -> None:
        self.append(f"{path}: {message}")


def whole_number(value: object) -> int | None:
    """``value`` as an int when it is a whole number (not a bool, not 2.5), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _int(
    value: object,
    path: str,
    problems: _Problems,
    low: int | None = None,
    high: int | None = None,
) -> int | None:
    number = whole_number(value)
    if number is None:
        problems.add(path, f"{value!r} is not a whole number")
        return None
    if (low is not None and number < low) or (high is not None and number > high):
        if high is None:
            problems.add(path, f"{number} is too small (at least {low})")
        else:
            problems.add(path, f"{number} is not between {low} and {high}")
        return None
    return number


class BoardSpec(NamedTuple):
    """A checked ``[board]`` table: what :class:`~snl_pbem.rules.board.Board` is built from."""

    grid: Grid
    features: dict[Space, Feature]
    layout: Layout
    families: tuple[Family, ...]


def parse_board(data: object, where: str = "board") -> BoardSpec:
    """The parts of a board from a ``[board]`` table; :class:`BoardError` lists every problem.

    The board itself checks what needs the whole board (``Board.from_mapping``).
    """
    problems = _Problems()
    if not isinstance(data, Mapping):
        raise BoardError(f"{where}: expected a table of board settings, got {_kind(data)}")
    for key in data:
        if key not in BOARD_KEYS:
            problems.add(f"{where}.{key}", "unknown key (expected: " + ", ".join(BOARD_KEYS) + ")")

    grid, layout = _geometry(data, where, problems)
    if grid is None:
        raise BoardError(problems)
    gproblems = list(grid_problems(grid))
    if gproblems:
        problems.extend(f"{where}.grid: {p}" for p in gproblems)
        raise BoardError(problems)
    last = sum(1 for row in grid for s in row if s is not None)
    cells = {
        s: (len(grid) - top, col + 1)
        for top, row in enumerate(grid)
        for col, s in enumerate(row)
        if s is not None
    }

    placed: dict[Space, list[tuple[str, Feature]]] = {}
    for kind, key in ((FeatureKind.SNAKE, "snakes"), (FeatureKind.LADDER, "ladders")):
        pairs = data.get(key, {})
        if not isinstance(pairs, Mapping):
            problems.add(
                f"{where}.{key}", f"expected a table of space = destination, got {_kind(pairs)}"
            )
            continue
        for raw_space, raw_dest in pairs.items():
            path = f"{where}.{key}.{raw_space}"
            space = _space_key(raw_space, path, last, problems)
            dest = _int(raw_dest, path, problems)
            if space is None or dest is None:
                continue
            feature = _feature(kind, space, dest, path, problems)
            if feature is not None:
                placed.setdefault(space, []).append((path, feature))

    families: list[Family] = []
    raw_families = data.get("family", [])
    if not isinstance(raw_families, list):
        problems.add(f"{where}.family", f"expected a list of tables, got {_kind(raw_families)}")
        raw_families = []
    for index, raw in enumerate(raw_families):
        path = f"{where}.family[{index}]"
        family = _family(raw, path, last, len(grid), len(grid[0]), problems)
        if family is None:
            continue
        families.append(family)
        chosen = [s for s, (r, c) in sorted(cells.items()) if family.selects(s, r, c)]
        if not chosen:
            problems.add(path, f"{family.describe()} selects no space on this board")
        for space in chosen:
            feature = _feature(family.kind, space, space + family.shift, path, problems)
            if feature is not None:
                placed.setdefault(space, []).append((path, feature))

    features: dict[Space, Feature] = {}
    for space, entries in sorted(placed.items()):
        kinds = {f.kind for _, f in entries}
        if len(kinds) > 1:
            where_snake = next(p for p, f in entries if f.kind is FeatureKind.SNAKE)
            where_ladder = next(p for p, f in entries if f.kind is FeatureKind.LADDER)
            problems.add(
                where,
                f"space {space} is both a snake head ({where_snake}) "
                f"and a ladder foot ({where_ladder})",
            )
            continue
        dests = sorted({f.destination for _, f in entries})
        if len(dests) > 1:
            listed = ", ".join(f"{f.destination} ({p})" for p, f in entries)
            problems.add(
                where,
                f"space {space} is given different {entries[0][1].kind.value} "
                f"destinations: {listed}",
            )
            continue
        features[space] = entries[0][1]

    if problems:
        raise BoardError(problems)
    return BoardSpec(grid, features, layout, tuple(families))


def _geometry(
    data: Mapping[str, Any], where: str, problems: _Problems
) -> tuple[Grid | None, Layout]:
    rows = _int(data.get("rows", 10), f"{where}.rows", problems, 1, MAX_SIDE)
    columns = _int(data.get("columns", 10), f"{where}.columns", problems, 1, MAX_SIDE)
    raw_layout = data.get("layout")
    if "grid" in data:
        if raw_layout not in (None, "grid"):
            problems.add(f"{where}.layout", "give either a layout or a grid, not both")
        grid = _grid(data["grid"], f"{where}.grid", problems)
        if grid is not None:
            for key, given, actual in (
                ("rows", data.get("rows"), len(grid)),
                ("columns", data.get("columns"), len(grid[0])),
            ):
                if given is not None and whole_number(given) != actual:
                    problems.add(f"{where}.{key}", f"is {given!r} but the grid has {actual}")
        return grid, Layout.GRID
    try:
        layout = Layout(raw_layout if raw_layout is not None else "boustrophedon")
    except ValueError:
        problems.add(
            f"{where}.layout",
            f"{raw_layout!r} is not a layout (use boustrophedon or rows, or give a grid)",
        )
        return None, Layout.GRID
    if layout is Layout.GRID:
        problems.add(f"{where}.layout", "layout 'grid' needs a grid = [[...], ...] of rows")
        return None, layout
    if rows is None or columns is None:
        return None, layout
    return layout_grid(rows, columns, layout), layout


def _grid(raw: object, path: str, problems: _Problems) -> Grid | None:
    if not isinstance(raw, list) or not raw:
        problems.add(path, "expected a non-empty list of rows, top row first")
        return None
    if len(raw) > MAX_SIDE:
        problems.add(path, f"has {len(raw)} rows; at most {MAX_SIDE}")
        return None
    rows: list[tuple[Space | None, ...]] = []
    ok = True
    for r, row in enumerate(raw):
        if not isinstance(row, list) or not row or len(row) > MAX_SIDE:
            problems.add(f"{path}[{r}]", f"expected a list of 1 to {MAX_SIDE} cells")
            ok = False
            continue
        cells: list[Space | None] = []
        for c, value in enumerate(row):
            if value is None or value == "":
                cells.append(None)
                continue
            number = whole_number(value)
            if number is None:
                problems.add(f"{path}[{r}][{c}]", f"{value!r} is not a space number or null")
                ok = False
            cells.append(number)
        rows.append(tuple(cells))
    return tuple(rows) if ok else None


def _space_key(raw: object, path: str, last: int, problems: _Problems) -> Space | None:
    text = str(raw).strip()
    if isinstance(raw, bool) or not (text.isdigit() or isinstance(raw, int)):
        problems.add(path, f"{raw!r} is not a space number")
        return None
    space = int(text)
    if not 1 <= space <= last:
        problems.add(path, f"space {space} is not on the board (1..{last})")
        return None
    return space


def _feature(
    kind: FeatureKind, space: Space, dest: Position, path: str, problems: _Problems
) -> Feature | None:
    if kind is FeatureKind.SNAKE and not dest < space:
        problems.add(path, f"a snake must lead down, but {space} -> {dest} does not")
        return None
    if kind is FeatureKind.LADDER and not dest > space:
        problems.add(path, f"a ladder must lead up, but {space} -> {dest} does not")
        return None
    return Feature(kind, space, max(dest, 0))  # a destination below 1 is the start


def _family(
    raw: object, path: str, last: int, rows: int, columns: int, problems: _Problems
) -> Family | None:
    if not isinstance(raw, Mapping):
        problems.add(path, f"expected a table, got {_kind(raw)}")
        return None
    before = len(problems)
    for key in raw:
        if key not in ("kind", "shift", *SELECTORS):
            problems.add(
                f"{path}.{key}", "unknown key (expected kind, shift, " + ", ".join(SELECTORS) + ")"
            )
    try:
        kind = FeatureKind(raw.get("kind"))
    except ValueError:
        problems.add(f"{path}.kind", f"{raw.get('kind')!r} is not 'snake' or 'ladder'")
        return None
    shift = _int(raw.get("shift"), f"{path}.shift", problems)
    if shift is not None:
        if kind is FeatureKind.SNAKE and shift >= 0:
            problems.add(
                f"{path}.shift", f"a snake moves down: the shift must be negative, not {shift}"
            )
        if kind is FeatureKind.LADDER and shift <= 0:
            problems.add(
                f"{path}.shift", f"a ladder moves up: the shift must be positive, not {shift}"
            )
    limits = {
        "column": (1, columns),
        "row": (1, rows),
        "digit_sum": (1, 9 * len(str(last))),
        "last_digit": (0, 9),
        "multiple_of": (1, last),
    }
    selected: dict[str, Any] = {}
    for key, (low, high) in limits.items():
        if key in raw:
            selected[key] = _int(raw[key], f"{path}.{key}", problems, low, high)
    if "spaces" in raw:
        spaces = raw["spaces"]
        if not isinstance(spaces, list) or not spaces:
            problems.add(f"{path}.spaces", "expected a non-empty list of space numbers")
        else:
            values = [
                _int(s, f"{path}.spaces[{i}]", problems, 1, last) for i, s in enumerate(spaces)
            ]
            selected["spaces"] = frozenset(v for v in values if v is not None)
    if not any(k in raw for k in SELECTORS):
        problems.add(path, "needs at least one selector: " + ", ".join(SELECTORS))
    if len(problems) > before or shift is None:
        return None
    return Family(kind, shift, **selected)


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "text"
    return type(value).__name__
