"""Writing the site: the index, and a folder per game (its page, its feed, and after a
revealing postal game its board), under ``[web] dir``.

What changed is found by a signature per game, read for every game in a few queries:
its state, rounds played, open round and deadline, seats, title and sign-up settings.
Only the games whose signature moved are rewritten (and the index, when any did), so a
round close at a thousand games rewrites one game's pages and the index. The signatures
written are kept in the folder (``.stamps.json``): a restart rewrites only what changed
while it was down, and an upgrade (new templates) rewrites everything.

Every file is written under a hidden temporary folder (``.tmp``) and renamed over the old one,
so a reader (or a crash) never sees half a file; the stamps are saved after the pages,
so a crash in the middle leaves the old pages whole and the next pass writes them again.
Passes of several processes on one folder take turns by a lock file (``.lock``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from sqlalchemy import func, select

from snl_pbem import __version__
from snl_pbem.app.links import page_path
from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.rules.words import counted
from snl_pbem.site.chart import drawn_players, race_chart
from snl_pbem.site.feed import atom_feed
from snl_pbem.site.pages import GamePage, IndexEntry, game_page, index_entries
from snl_pbem.store import Database, Game, Player, Round
from snl_pbem.store.states import RoundPhase
from snl_pbem.timeutil import show, zone

log = logging.getLogger("snl_pbem.site")

STAMPS = ".stamps.json"
LOCK = ".lock"
TEMPORARY = ".tmp"
CSS = "site.css"


@dataclass(frozen=True)
class SiteReport:
    games: int
    """Game folders written."""
    index: bool
    seconds: float


def _environment() -> Environment:
    folder = str(resources.files("snl_pbem.templates"))
    env = Environment(
        loader=FileSystemLoader(folder),
        autoescape=select_autoescape(("html", "html.j2", "xml")),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals["counted"] = counted
    return env


_ENV: Environment | None = None


def environment() -> Environment:
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


def build_stamp() -> str:
    """What the pages were made with: the version and the web templates. A change makes a
    pass rewrite every page (an upgrade needs no ``site build``)."""
    digest = hashlib.sha256(__version__.encode())
    folder = resources.files("snl_pbem.templates") / "web"
    for name in sorted(p.name for p in folder.iterdir()):
        digest.update(name.encode() + (folder / name).read_bytes())
    return digest.hexdigest()[:16]


def signatures(session: Any, config: Config) -> dict[str, str]:
    """Every game's signature: what its page and its index line show, in four queries."""
    seats = dict(
        session.execute(
            select(Player.game_id, func.count()).where(Player.active).group_by(Player.game_id)
        ).all()
    )
    opened = {
        game_id: (number, deadline.isoformat())
        for game_id, number, deadline in session.execute(
            select(Round.game_id, Round.number, Round.deadline).where(
                Round.state == RoundPhase.OPEN
            )
        )
    }
    closed = {  # how many, and when the last closed: a rollback and a new close move it
        game_id: (count, str(last))
        for game_id, count, last in session.execute(
            select(Round.game_id, func.count(), func.max(Round.closed_at))
            .where(Round.state == RoundPhase.CLOSED)
            .group_by(Round.game_id)
        )
    }
    found: dict[str, str] = {}
    for row in session.execute(
        select(
            Game.id,
            Game.name,
            Game.state,
            Game.title,
            Game.rounds_played,
            Game.turns_played,
            Game.result,
            Game.reveal_after_game,
        )
    ):
        settings = config.find(row.name)
        setup = (
            None
            if settings is None
            else (
                settings.settings.signup,
                settings.settings.max_players,
                str(settings.starts_at or settings.settings.starts),
            )
        )
        said = json.dumps(
            [
                row.state,
                row.title,
                row.rounds_played,
                row.turns_played,
                row.result,
                row.reveal_after_game,
                seats.get(row.id, 0),
                opened.get(row.id),
                closed.get(row.id, 0),
                setup,
            ],
            sort_keys=True,
            default=str,
        )
        found[row.name] = hashlib.sha256(said.encode()).hexdigest()[:20]
    return found


@dataclass
class Site:
    """One site folder and the passes that keep it up to date."""

    db: Database
    config: Config
    clock: Callable[[], datetime]
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        web = self.config.settings.web
        if web is None:
            raise ValueError("the config has no [web] table")
        self.root = web.dir

    def update(self, everything: bool = False) -> SiteReport:
        """One pass: rewrite the games that changed (all with ``everything``) and the
        index when any did. Under the folder's lock, so passes never interleave."""
        started = time.perf_counter()
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            kept = self._stamps()
            build = build_stamp()
            if kept.get("build") != build:
                everything = True
            old: dict[str, str] = {} if everything else dict(kept.get("games", {}))
            with self.db.transaction() as session:
                now = self.clock()
                signed = signatures(session, self.config)
                changed = sorted(name for name, sig in signed.items() if old.get(name) != sig)
                for name in changed:
                    game = session.scalar(select(Game).where(Game.name == name))
                    assert game is not None
                    self._write_game(game_page(session, self.config, game, now))
                index = bool(changed) or not (self.root / "index.html").exists()
                if index:
                    self._write_index(index_entries(session, self.config), now)
            if changed or kept.get("build") != build:
                self._write(STAMPS, json.dumps({"build": build, "games": signed}).encode())
        return SiteReport(len(changed), index, time.perf_counter() - started)

    def behind(self) -> list[str]:
        """The games whose pages are not up to date (a look, writing nothing)."""
        kept = self._stamps()
        if kept.get("build") != build_stamp():
            return ["(every game: the pages were made by another version)"]
        with self.db.transaction() as session:
            signed = signatures(session, self.config)
        written = kept.get("games", {})
        return sorted(name for name, sig in signed.items() if written.get(name) != sig)

    # -- files ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._sweep()
            yield
        finally:
            os.close(fd)  # (closing drops the lock)

    def _sweep(self) -> None:
        """Temporary files a killed pass left (a pass holds the lock: none is in use)."""
        for leftover in (self.root / TEMPORARY).glob("*"):
            leftover.unlink(missing_ok=True)

    def _stamps(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / STAMPS).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, relative: str, data: bytes) -> None:
        """Write a file whole or not at all: a temporary name beside it, then a rename."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        (self.root / TEMPORARY).mkdir(exist_ok=True)  # one hidden folder: the sweep's only look
        temporary = self.root / TEMPORARY / f"{os.getpid()}-{relative.replace('/', '-')}"
        temporary.write_bytes(data)
        crash_point("site.written-not-renamed")
        os.replace(temporary, target)

    def _write_index(self, entries: list[IndexEntry], now: datetime) -> None:
        groups: list[tuple[str, str, list[IndexEntry]]] = [
            ("Forming: open for sign-up or starting soon", "forming", []),
            ("Running", "running", []),
            ("Finished", "finished", []),
        ]
        by_state: dict[str, list[IndexEntry]] = {state: games for _, state, games in groups}
        for entry in entries:
            by_state.get(entry.state, by_state["running"]).append(entry)  # paused: running
        html = (
            environment()
            .get_template("web/index.html.j2")
            .render(
                groups=groups,
                root="",
                address=self.config.settings.mail.address,
                updated=show(now, zone(self.config.settings.timezone)),
            )
        )
        css = (resources.files("snl_pbem.templates") / "web" / CSS).read_bytes()
        if not (self.root / CSS).is_file() or (self.root / CSS).read_bytes() != css:
            self._write(CSS, css)
        self._write("index.html", html.encode())

    def _write_game(self, page: GamePage) -> None:
        folder = page_path(page.name)
        web = self.config.settings.web
        base = web.base_url if web is not None else None
        page_href = f"{base}{folder}" if base else "index.html"
        feed_href = f"{base}{folder}feed.xml" if base else "feed.xml"
        chart = race_chart(page, described_by="positions") if page.rounds else ""
        html = (
            environment()
            .get_template("web/game.html.j2")
            .render(
                page=page,
                chart=chart,
                drawn=drawn_players(page),
                root="../../",
                address=self.config.settings.mail.address,
                updated=page.updated_text,
            )
        )
        self._write(f"{folder}index.html", html.encode())
        self._write(f"{folder}feed.xml", atom_feed(page, page_href, feed_href))
        board = self.root / folder / "board.svg"
        if page.reveal is not None:
            self._write(f"{folder}board.svg", page.reveal.board_svg.encode())
        else:
            board.unlink(missing_ok=True)  # a rolled-back end: the reveal is withdrawn
