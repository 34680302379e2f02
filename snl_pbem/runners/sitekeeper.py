"""The server's thread that keeps the game pages ([web]) up to date.

A pass (``Site.update``) rewrites only the games that changed; what matters here is when
passes run. A round close, a start or a reload asks for one now (``now``); a message read
asks for one soon (``soon``, within SOON_SECONDS): most mail is orders, which change no
page, and a storm of them should cost a pass every few seconds, not one each. The round
scheduler's rescan asks for one when it finds a game started at its time or changed by
another process (the referee's commands, another server: within its 15 s). Every
POLL_SECONDS a pass runs anyway, for what no feed tells (a sign-up approved from the
command line). Passes are at least GAP_SECONDS apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from snl_pbem.config import Config
from snl_pbem.rules.words import counted
from snl_pbem.site.writer import Site
from snl_pbem.store import Database

log = logging.getLogger("snl_pbem.site")

POLL_SECONDS = 60.0
SOON_SECONDS = 5.0
GAP_SECONDS = 1.0
REPEAT_ERROR_SECONDS = 600.0
"""The same failure (a folder the service may not write) is logged again this often."""


class SiteKeeper:
    def __init__(
        self,
        db: Callable[[], Database],
        config: Callable[[], Config],
        clock: Callable[[], datetime],
    ) -> None:
        """``db`` and ``config`` are asked at each pass (a reload changes the config)."""
        self.db, self.config, self.clock = db, config, clock
        self._wake = threading.Event()
        self._now = False
        self._due: float | None = None
        self._lock = threading.Lock()
        self._failed: tuple[str, float] | None = None
        self._games_failed: dict[str, str] = {}
        self._stop: threading.Event | None = None

    def now(self) -> None:
        """A game changed (a close, a start): a pass as soon as the gap allows."""
        with self._lock:
            self._now = True
        self._wake.set()

    def soon(self) -> None:
        """A game may have changed (a sign-up by mail): a pass within SOON_SECONDS."""
        with self._lock:
            if self._due is None:
                self._due = time.monotonic() + SOON_SECONDS
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        self._stop = stop  # a pass stops between games when the server does
        while not stop.is_set():
            with self._lock:
                self._now, self._due = False, None
            self.once()
            stop.wait(GAP_SECONDS)
            self._sleep(stop, time.monotonic() + POLL_SECONDS)

    def stop(self) -> None:
        """Wake the loop so it sees its stop event."""
        self._wake.set()

    def _sleep(self, stop: threading.Event, poll_at: float) -> None:
        while not stop.is_set():
            with self._lock:
                if self._now:
                    return
                until = poll_at if self._due is None else min(poll_at, self._due)
            left = until - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(left)
            self._wake.clear()

    def once(self) -> None:
        """One pass, its failure logged (not raised: the pages wait, the game goes on)."""
        config = self.config()
        if config.settings.web is None:
            return
        try:
            report = Site(self.db(), config, self.clock).update(stop=self._stop)
        except Exception as exc:  # a full disk, a folder we may not write: try again later
            said, at = f"{type(exc).__name__}: {exc}", time.monotonic()
            if self._failed is None or self._failed[0] != said:
                log.error("site: %s (the pages wait until it can be written)", said)
                self._failed = (said, at)
            elif at - self._failed[1] >= REPEAT_ERROR_SECONDS:
                log.error("site: still failing: %s", said)
                self._failed = (said, at)
            return
        if self._failed is not None:
            log.info("site: written again after: %s", self._failed[0])
            self._failed = None
        for game, why in report.failed.items():
            if self._games_failed.get(game) != why:
                log.error("site: %s: its pages could not be made (the old stay): %s", game, why)
        self._games_failed = dict(report.failed)
        if report.games:
            log.info(
                "site: %s rewritten in %.0f ms",
                counted(report.games, "game's pages", "games' pages"),
                report.seconds * 1000,
            )
