"""The race chart: every player's position after every round, one line each, drawn by
pygal as an SVG with no script (``js=()``, and the config script pygal writes anyway is
taken out) that scales to the page's width.

The finishing square is a major guide line labelled "finish". The chart is a picture of
the round-by-round table beside it, which is its text alternative (``aria-describedby``).
"""

from __future__ import annotations

import re

import pygal
from pygal.style import Style

from snl_pbem.site.pages import GamePage

MOST_LINES = 30
"""Players drawn at most (the leaders after the last round): more lines are a tangle.
The table under the chart has everyone."""

_STYLE = Style(
    background="white",
    plot_background="white",
    foreground="#263238",
    foreground_strong="#263238",
    foreground_subtle="#90a4ae",
    font_family="system-ui, sans-serif",
    label_font_size=15,
    major_label_font_size=15,
    legend_font_size=16,
    title_font_size=16,
    stroke_width="3",  # (pygal's .reactive rule sets a line's width, not stroke_style)
    stroke_width_hover="4",
    colors=(
        "#1565c0",
        "#c62828",
        "#2e7d32",
        "#6a1b9a",
        "#ef6c00",
        "#00838f",
        "#4e342e",
        "#ad1457",
        "#558b2f",
        "#283593",
        "#f9a825",
        "#37474f",
    ),
)


def drawn_players(page: GamePage) -> tuple[str, ...]:
    """The players with a line: all of them, or the MOST_LINES furthest on."""
    if len(page.players) <= MOST_LINES:
        return page.players
    return tuple(row.name for row in page.standings[:MOST_LINES])


def race_chart(page: GamePage, described_by: str) -> str:
    """The chart as inline SVG markup (no XML declaration), ``role="img"``."""
    rounds = [0, *(r.number for r in page.rounds)]
    drawn = drawn_players(page)
    longest = max((len(name) for name in drawn), default=1)
    columns = 3 if longest <= 14 else 2 if longest <= 24 else 1  # names side by side, whole
    rows = -(-len(drawn) // columns)
    chart = pygal.Line(
        style=_STYLE,
        js=(),
        disable_xml_declaration=True,
        no_prefix=False,
        width=640,
        height=400 + 26 * rows,
        show_dots=len(rounds) <= 60,
        dots_size=3,
        x_title="Round",
        y_title="Square",
        range=(0, max(page.last, *(p for r in page.rounds for p in r.positions.values()))),
        include_x_axis=True,
        legend_at_bottom=True,
        legend_at_bottom_columns=columns,
        truncate_legend=-1,
        show_minor_x_labels=len(rounds) <= 25,
        truncate_label=-1,
        x_labels_major_every=max(1, len(rounds) // 10),
        print_values=False,
        margin_bottom=26 * rows,  # room for every row of the legend (pygal leaves one)
    )
    chart.x_labels = [str(n) for n in rounds]
    chart.y_labels = [
        *({"label": str(v), "value": v} for v in _steps(page.last)),
        {"label": f"finish {page.last}", "value": page.last},
    ]
    chart.y_labels_major = [page.last]
    for name in drawn:
        chart.add(name, [0, *(r.positions.get(name, 0) for r in page.rounds)])
    svg: str = chart.render(is_unicode=True)
    svg = re.sub(r"<!--.*?-->", "", svg)  # pygal's credits and the date: the page says when
    svg = re.sub(r"<script\b.*?</script>", "", svg, flags=re.S)  # its config, for its js
    svg = re.sub(r"chart-[0-9a-f-]{36}", f"chart-{page.name}", svg)  # the same page, the same ids
    label = f"Race chart: every player's square after each round, finish at {page.last}"
    return svg.replace(
        "<svg ",
        f'<svg role="img" aria-label="{label}" aria-describedby="{described_by}" ',
        1,
    )


def _steps(last: int) -> range:
    """The y axis's labels below the finish: about five."""
    step = max(1, round(last / 5 / 10) * 10) if last >= 50 else max(1, last // 5)
    return range(0, last, step)
