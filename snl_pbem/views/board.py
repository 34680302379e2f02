"""Pictures of a board for the referee: a text grid for the terminal and an SVG drawing.

These show the board's secrets (R2): they are for the referee before a game
and for a post-game reveal, never for a player during one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from snl_pbem.rules import Board, FeatureKind, Space
from snl_pbem.rules.geometry import LADDER_MARK, SNAKE_MARK, Layout, Position
from snl_pbem.rules.words import joined, ntr, tr


def cell_label(board: Board, space: Space) -> str:
    """``16v6`` for a snake head, ``4^14`` for a ladder foot, ``7`` otherwise."""
    feature = board.feature_at(space)
    if feature is None:
        return str(space)
    mark = SNAKE_MARK if feature.kind is FeatureKind.SNAKE else LADDER_MARK
    return f"{space}{mark}{feature.destination}"


def render_text(board: Board) -> str:
    """The grid, top row first, each cell its number and any snake (v) or ladder (^); its
    summary is in the reader's language when a mail shows it (snl_pbem.rules.words)."""
    labels = [[cell_label(board, s) if s is not None else "" for s in row] for row in board.grid]
    width = max(len(label) for row in labels for label in row)
    rule = "+" + "+".join("-" * (width + 2) for _ in range(board.columns)) + "+"
    lines = [rule]
    for row in labels:
        lines.append("|" + "|".join(f" {label:>{width}} " for label in row) + "|")
        lines.append(rule)
    return joined("", ("\n".join(lines) + "\n", summary(board), "\n"))


_LAYOUTS = {
    Layout.BOUSTROPHEDON: tr("boustrophedon layout"),
    Layout.ROWS: tr("rows layout"),
    Layout.GRID: tr("grid layout"),
}


def summary(board: Board) -> str:
    """A few lines saying what the board is: size, layout, every snake, ladder and family."""
    lines: list[object] = [
        tr(
            "{rows} x {columns}, {layout}, last space {last}; {snake} snake head, "
            "{ladder} ladder foot",
            rows=ntr("{n} row", "{n} rows", board.rows),
            columns=ntr("{n} column", "{n} columns", board.columns),
            layout=_LAYOUTS[board.layout],
            last=board.last,
            snake=SNAKE_MARK,
            ladder=LADDER_MARK,
        )
    ]
    for kind, pairs in ((FeatureKind.LADDER, board.ladders), (FeatureKind.SNAKE, board.snakes)):
        listed = joined(", ", (joined("->", (s, _dest(d, board.last))) for s, d in pairs.items()))
        what = (
            tr("Ladders ({n}): {listed}", n=len(pairs), listed=listed or tr("none"))
            if kind is FeatureKind.LADDER
            else tr("Snakes ({n}): {listed}", n=len(pairs), listed=listed or tr("none"))
        )
        lines.append(what)
    for family in board.families:
        lines.append(tr("Family: {family}", family=family.describe()))
    return joined("\n", lines)


def _dest(destination: Position, last: Space) -> str:
    if destination == 0:
        return tr("{space} (start)", space=destination)
    if destination > last:
        return tr("{space} (past the end)", space=destination)
    return str(destination)


CELL = 56
MARGIN = 40
LINE = 18


def render_svg(
    board: Board,
    title: str = "Snakes and Ladders board",
    trapdoors: Mapping[Space, Sequence[int]] | None = None,
) -> str:
    """An SVG drawing: the grid with numbers, ladders as green arrows, snakes as red ones,
    and under it the board's families in words.

    A snake to 0 points below the board (the start); a ladder past the last
    space points above it (the end). ``trapdoors`` (the post-game reveal): each space
    that was an active trapdoor, with the rounds it was, drawn as a black frame and a T.
    """
    width = board.columns * CELL + 2 * MARGIN
    legend = [f"Family: {family.describe()}" for family in board.families]
    height = board.rows * CELL + 2 * MARGIN + LINE * len(legend)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        f"<title>{escape(title)}</title>",
        "<defs>",
        *(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" '
            f'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{colour}"/></marker>'
            for name, colour in (("snake", "#c62828"), ("ladder", "#2e7d32"))
        ),
        "</defs>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
    ]
    for top, row in enumerate(board.grid):
        for col, space in enumerate(row):
            if space is None:
                continue
            x, y = MARGIN + col * CELL, MARGIN + top * CELL
            fill = "#fff8e1" if (top + col) % 2 == 0 else "#e3f2fd"
            out.append(
                f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{fill}" '
                'stroke="#90a4ae"/>'
            )
            out.append(
                f'<text x="{x + 4}" y="{y + 14}" font-size="12" fill="#37474f">{space}</text>'
            )
    for feature in board.features:
        kind = "snake" if feature.kind is FeatureKind.SNAKE else "ladder"
        colour = "#c62828" if kind == "snake" else "#2e7d32"
        x1, y1 = _centre(board, feature.space)
        x2, y2 = _centre(board, feature.destination)
        label = quoteattr(f"{kind} {feature.space} to {feature.destination}")
        dash = ' stroke-dasharray="6 3"' if kind == "snake" else ""
        out.append(
            f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{colour}" '
            f'stroke-width="3" stroke-opacity="0.8"{dash} marker-end="url(#arrow-{kind})">'
            f"<title>{escape(label[1:-1])}</title></line>"
        )
        out.append(f'<circle cx="{x1}" cy="{y1}" r="5" fill="{colour}"/>')
    for space, rounds in sorted((trapdoors or {}).items()):
        place, column = board.cell(space)
        x, y = MARGIN + (column - 1) * CELL, MARGIN + (board.rows - place) * CELL
        said = escape(f"trapdoor {space}, active in round{'s' if len(rounds) > 1 else ''} ")
        out.append(
            f'<g class="trapdoor"><title>{said}{", ".join(map(str, rounds))}</title>'
            f'<rect x="{x + 2}" y="{y + 2}" width="{CELL - 4}" height="{CELL - 4}" fill="none" '
            f'stroke="#000" stroke-width="3"/><text x="{x + CELL - 14}" y="{y + 16}" '
            'font-size="13" font-weight="bold" fill="#000">T</text></g>'
        )
    key = f"start (0) below · end past {board.last} above · green: ladder · red, dashed: snake"
    if trapdoors:
        key += " · black frame: a trapdoor"
    bottom = MARGIN + board.rows * CELL
    out.append(
        f'<text x="{MARGIN}" y="{bottom + MARGIN - 10}" font-size="12" fill="#37474f">'
        f"{escape(key)}</text>"
    )
    for index, line in enumerate(legend):
        out.append(
            f'<text x="{MARGIN}" y="{bottom + MARGIN + LINE * index + 8}" font-size="12" '
            f'fill="#37474f">{escape(line)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _centre(board: Board, position: Position) -> tuple[int, int]:
    """The centre of a space's cell; off-board positions sit below or above the grid."""
    if position == 0:
        return MARGIN + CELL // 2, MARGIN + board.rows * CELL + MARGIN // 2
    if position > board.last:
        return MARGIN + CELL // 2, MARGIN // 2
    row, column = board.cell(position)
    return (
        MARGIN + (column - 1) * CELL + CELL // 2,
        MARGIN + (board.rows - row) * CELL + CELL // 2 + 6,
    )
