"""A config file written for the test's database (the make_config fixture, shared by the suite)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from textwrap import dedent

import pytest

from snl_pbem.config import Config, load_config

BASE = """
timezone = "Europe/London"
[database]
url = "{url}"
backups = 2
[mail]
address = "snl@example.org"
referee = "ref@example.org"
"""

GAME = """
[[games]]
id = "{id}"
title = "Test game"
board = {{ snakes = {{ "47" = 26, "98" = 12 }}, ladders = {{ "4" = 14, "33" = 70 }} }}
first_deadline = "{first}"
round_length = "{length}"
double_from_round = {double}
players = [
{players}
]
"""


@pytest.fixture
def make_config(tmp_path: Path, db_url: str) -> Callable[..., Config]:
    def build(games: list[dict[str, object]] | None = None, extra: str = "") -> Config:
        text = BASE.format(url=db_url)
        for game in games if games is not None else [{}]:
            names = game.get("players", ["ann", "bob", "cy"])
            players = "\n".join(
                f'  {{ name = "{n}", email = "{n}@example.org"'
                + (f', key = "{n}-key-123"' if game.get("keys") else "")
                + " },"
                for n in names  # type: ignore[union-attr]
            )
            text += GAME.format(
                id=game.get("id", "g1"),
                first=game.get("first", "2030-01-04T18:00"),
                length=game.get("length", "3d"),
                double=game.get("double", 7),
                players=players,
            )
        path = tmp_path / "config.toml"
        path.write_text(dedent(text) + extra)
        return load_config(path)

    return build
