"""A game g1 (ann, bob, cy) with game pages, played round by round with real order mail."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from mailhelpers import CONFIG, T0
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.config import Config, load_config
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.site.writer import Site
from snl_pbem.store import Database, Game, Round
from snl_pbem.store.migrate import upgrade

NAMES = ("ann", "bob", "cy")
BOARD = (
    '{ rows = 4, columns = 10, ladders = { "3" = 22, "8" = 29 }, snakes = { "27" = 5, "34" = 15 } }'
)
"""Secrets to look for: its features, as the reveal writes them ("3->22", "snake 27 to 5")."""


def web_config(
    folder: Path,
    url: str,
    *,
    reveal: bool = True,
    base_url: str | None = None,
    extra: str = "",
    edit: Callable[[str], str] = lambda text: text,
) -> Config:
    web = '\n[web]\ndir = "site"\n' + (f'base_url = "{base_url}"\n' if base_url else "")
    text = edit(CONFIG.format(url=url, replies=100, board=BOARD, reveal=str(reveal).lower()))
    (folder / "c.toml").write_text(text + extra + web)
    return load_config(folder / "c.toml")


@dataclass
class Played:
    """A game being played: the clock, the site, each round's close."""

    db: Database
    config: Config
    now: list[datetime] = field(default_factory=lambda: [T0])
    rng: random.Random = field(default_factory=lambda: random.Random(5))
    dice: dict[str, list[int]] = field(default_factory=lambda: {n: [] for n in NAMES})

    @property
    def clock(self) -> Callable[[], datetime]:
        return lambda: self.now[0]

    def site(self) -> Site:
        return Site(self.db, self.config, self.clock)

    def over(self) -> bool:
        with self.db.transaction() as s:
            return s.scalar(select(Game.state).where(Game.name == "g1")) == "over"

    def play_round(self, game: str = "g1") -> int:
        """Everyone sends dice and a nomination (cy skips every third round: R17); the
        deadline passes; returns the round closed."""
        with self.db.transaction() as s:
            game_id = s.scalar(select(Game.id).where(Game.name == game))
            round_ = s.scalar(select(Round).where(Round.game_id == game_id, Round.state == "open"))
            number, turns, deadline = round_.number, round_.turns, round_.deadline
        for name in NAMES:
            if name == "cy" and number % 3 == 0:
                continue
            used = self.dice[name][len(self.dice[name]) - len(self.dice[name]) % 6 :]
            free = [v for v in range(1, 7) if v not in used]
            choice = self.rng.sample(free, min(turns, len(free)))
            if len(choice) < turns:  # a set ends inside the round: any value starts the next
                choice.append(self.rng.randint(1, 6))
            raw = (
                f"From: {name}@example.org\r\nSubject: orders\r\n"
                f"Message-ID: <{name}.{game}.{number}@example.org>\r\n\r\n"
                f"GAME {game}\r\nKEY {name}-key-123\r\nDICE {' '.join(map(str, choice))}\r\n"
                f"TRAPDOOR {self.rng.choice([12, 17, 23, 31])}\r\n"
            ).encode()
            assert ingest(self.db, self.config, raw, self.clock(), "t").status == "processed"
            self.dice[name] += choice
        self.now[0] = deadline
        outcome = RoundScheduler(self.db, self.config, clock=self.clock).on_deadline(game, number)
        assert outcome is not None
        return number


def started(folder: Path, url: str, **kwargs: object) -> Played:
    db = Database(url)
    upgrade(db)
    config = web_config(folder, url, **kwargs)  # type: ignore[arg-type]
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    return Played(db, config)
