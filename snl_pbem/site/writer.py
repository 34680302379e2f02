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
import shutil
import threading
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
from sqlalchemy.orm import Session

from snl_pbem import __version__
from snl_pbem.app.links import page_path
from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.ownership import make_dirs
from snl_pbem.rules.words import counted
from snl_pbem.site.chart import drawn_players, race_chart
from snl_pbem.site.feed import atom_feed
from snl_pbem.site.guides import guide_pages
from snl_pbem.site.pages import GamePage, IndexEntry, game_page, index_entries
from snl_pbem.store import Database, Game, Player, Round
from snl_pbem.store.states import GamePhase, RoundPhase
from snl_pbem.timeutil import show, zone

log = logging.getLogger("snl_pbem.site")

STAMPS = ".stamps.json"
LOCK = ".lock"
TEMPORARY = ".tmp"
CSS = "site.css"
CHUNK = 100
"""Games whose pages one read-only transaction reads, before they are written."""


@dataclass(frozen=True)
class SiteReport:
    games: int
    """Game folders written."""
    index: bool
    seconds: float
    failed: dict[str, str] = field(default_factory=dict)
    """Games whose pages could not be made, and why: their old pages stay, and the next
    pass tries again (one bad game never stops the others' pages)."""
    stopped: bool = False
    """The pass was asked to stop before it was done (the rest waits for the next)."""


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


def build_stamp(config: Config) -> str:
    """What every page is made with: the version, the web templates, and what the config
    says for all games (the game address in every footer and join link, ``base_url`` in
    every feed, the server's zone). A change makes a pass rewrite every page (an upgrade
    needs no ``site build``)."""
    web = config.settings.web
    said = [__version__, config.settings.mail.address, web.base_url if web else None]
    digest = hashlib.sha256(json.dumps([*said, config.settings.timezone]).encode())
    folder = resources.files("snl_pbem.templates") / "web"
    for name in sorted(p.name for p in folder.iterdir()):
        digest.update(name.encode() + (folder / name).read_bytes())
    return digest.hexdigest()[:16]


def signatures(session: Any, config: Config) -> dict[str, str]:
    """Every game's signature: what its page and its index line show, in five queries.
    Nothing secret goes in (orders change no page), and nothing that changes without
    changing a page."""
    seats = {  # who: how many seated, and a fingerprint of the names shown (a swap moves it)
        game_id: (active, count, last, letters)
        for game_id, active, count, last, letters in session.execute(
            select(
                Player.game_id,
                func.count().filter(Player.active),
                func.count(),
                func.max(Player.id),
                func.sum(func.length(Player.name)),
            ).group_by(Player.game_id)
        )
    }
    boards = dict(  # a forming game's board may still change (sync_games); then it is fixed
        session.execute(select(Game.id, Game.board).where(Game.state == GamePhase.NEW)).all()
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
            Game.ruleset,
            Game.options,
            Game.double_from_round,
            Game.trapdoor_rule,
            Game.timezone,
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
                row.ruleset,
                row.options,
                row.double_from_round,
                row.trapdoor_rule,
                row.timezone,
                boards.get(row.id),
                seats.get(row.id),
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

    def update(self, everything: bool = False, stop: threading.Event | None = None) -> SiteReport:
        """One pass: rewrite the games that changed (all with ``everything``) and the
        index when any did. Under the folder's lock, so passes never interleave.

        Pages are read in read-only transactions (SQLite: no write lock is held while they
        are drawn) of CHUNK games each, and written between them: a rewrite of thousands
        of games neither holds one snapshot open throughout nor keeps them all in memory.
        A game's signature is read before its page, so a change in between makes the next
        pass write it again, never skip it. ``stop`` is looked at between games."""
        started = time.perf_counter()
        if not self.root.exists():
            make_dirs(self.root)  # adopted by the service's user when root makes it
        with self._locked():
            kept = self._stamps()
            build = build_stamp(self.config)
            if kept.get("build") != build:
                everything = True
            old: dict[str, str] = {} if everything else dict(kept.get("games", {}))
            now = self.clock()
            with self._reading() as session:
                signed = signatures(session, self.config)
            changed = sorted(name for name, sig in signed.items() if old.get(name) != sig)
            written = {name: sig for name, sig in old.items() if name in signed}
            failed: dict[str, str] = {}
            stopped = False
            for first in range(0, len(changed), CHUNK):
                if stop is not None and stop.is_set():
                    stopped = True
                    break
                pages = self._pages(changed[first : first + CHUNK], now, failed)
                for name, page in pages.items():
                    if stop is not None and stop.is_set():
                        stopped = True
                        break
                    try:
                        self._write_game(page)
                    except Exception as exc:  # its old pages stay; the next pass tries again
                        failed[name] = f"{type(exc).__name__}: {exc}"
                        continue
                    written[name] = signed[name]
            index = bool(changed) or not (self.root / "index.html").exists()
            if index and not stopped:
                with self._reading() as session:
                    entries = index_entries(session, self.config)
                self._write_index(entries, now)
                self._forget_games(set(signed))
            if written != old or kept.get("build") != build:
                self._write(
                    STAMPS, json.dumps({"build": build, "games": written}, sort_keys=True).encode()
                )
            self._write_guides()
        done = sum(
            1 for name in changed if name not in failed and written.get(name) == signed[name]
        )
        return SiteReport(
            done, index and not stopped, time.perf_counter() - started, failed, stopped
        )

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        with self.db.reading() as session:
            if not self.db.is_sqlite:  # one snapshot a transaction, as SQLite's
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            yield session

    def _pages(
        self, names: list[str], now: datetime, failed: dict[str, str]
    ) -> dict[str, GamePage]:
        """The pages of ``names``, read in one transaction; a game that cannot be read goes
        into ``failed`` (why) and is left out."""
        pages: dict[str, GamePage] = {}
        with self._reading() as session:
            for name in names:
                try:
                    game = session.scalar(select(Game).where(Game.name == name))
                    if game is None:
                        continue  # gone since its signature was read
                    pages[name] = game_page(session, self.config, game, now)
                except Exception as exc:  # a board a newer release refuses, say
                    failed[name] = f"{type(exc).__name__}: {exc}"
        return pages

    def behind(self) -> list[str]:
        """The games whose pages are not up to date (a look, writing nothing)."""
        kept = self._stamps()
        if kept.get("build") != build_stamp(self.config):
            return ["(every game: the pages were made by another version or config)"]
        with self._reading() as session:
            signed = signatures(session, self.config)
        written = kept.get("games", {})
        return sorted(name for name, sig in signed.items() if written.get(name) != sig)

    # -- files ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o640)
        self._adopt(self.root / LOCK)
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
        """Write a file whole or not at all: a temporary file (in one hidden folder, the
        sweep's only look), then a rename over the old one."""
        target = self.root / relative
        for folder in (target.parent, self.root / TEMPORARY):
            missing = [f for f in (folder, *folder.parents) if f.is_relative_to(self.root)]
            for made in reversed([f for f in missing if not f.is_dir()]):
                made.mkdir(exist_ok=True)
                self._adopt(made)
        temporary = self.root / TEMPORARY / f"{os.getpid()}-{relative.replace('/', '-')}"
        temporary.write_bytes(data)
        self._adopt(temporary)
        crash_point("site.written-not-renamed")
        os.replace(temporary, target)

    def _adopt(self, path: Path) -> None:
        """Root (``sudo snl-pbem site build``) makes what it writes the folder owner's: the
        service must go on writing it (the group, www-data for nginx, comes with the
        folder's set-group-ID bit, as for the service's own files)."""
        if os.geteuid() != 0:
            return
        owner = self.root.stat()
        info = path.lstat()
        if (info.st_uid, info.st_gid) != (owner.st_uid, owner.st_gid):
            os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)

    def _forget_games(self, games: set[str]) -> None:
        """Remove the folder of a game the database no longer has (a restore from before
        it): nobody should read a page of a game that is not there."""
        folder = self.root / "games"
        if not folder.is_dir():
            return
        for place in folder.iterdir():
            if place.is_dir() and place.name not in games:
                shutil.rmtree(place, ignore_errors=True)

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

    def _write_guides(self) -> None:
        """The players' guides, one page per language (HELP links to them), written when
        they are not there or differ (an upgrade, or a GM's edit of the installed text)."""
        address = self.config.settings.mail.address
        try:
            pages = guide_pages()
        except Exception as exc:  # a guide a GM saved unreadable: the games' pages stand
            log.error("the players' guides could not be read (%s: %s)", type(exc).__name__, exc)
            return
        for relative, (code, title, body) in pages.items():
            html = (
                environment()
                .get_template("web/guide.html.j2")
                .render(title=title, body=body, lang=code, root="../", address=address, updated="")
                .encode()
            )
            target = self.root / relative
            if not target.is_file() or target.read_bytes() != html:
                self._write(relative, html)

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
        self._write(
            f"{folder}feed.xml",
            atom_feed(page, page_href, feed_href, self.config.settings.mail.address),
        )
        board = self.root / folder / "board.svg"
        if page.reveal is not None:
            self._write(f"{folder}board.svg", page.reveal.board_svg.encode())
        else:
            board.unlink(missing_ok=True)  # a rolled-back end: the reveal is withdrawn
