"""When the server's site thread runs a pass (snl_pbem.runners.sitekeeper): at once after
a close, soon after a message read, every minute anyway; and a failing folder is logged
once, not at every pass. Bounded by events; the only waits are for what must not happen,
which a slow machine cannot make happen early."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from sitehelpers import web_config

from snl_pbem.runners import sitekeeper
from snl_pbem.runners.sitekeeper import SiteKeeper
from snl_pbem.store import Database
from snl_pbem.store.migrate import upgrade
from snl_pbem.timeutil import utcnow


class Counting(SiteKeeper):
    """The keeper with its pass counted (the pass itself is tested in tests/site)."""

    def __init__(self) -> None:
        super().__init__(lambda: None, lambda: None, utcnow)  # type: ignore[arg-type,return-value]
        self.passes = 0
        self.passed = threading.Event()

    def once(self) -> None:
        self.passes += 1
        self.passed.set()


@pytest.fixture
def running(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sitekeeper, "GAP_SECONDS", 0.0)
    monkeypatch.setattr(sitekeeper, "POLL_SECONDS", 3600.0)
    keeper, stop = Counting(), threading.Event()
    thread = threading.Thread(target=keeper.run, args=(stop,), daemon=True)
    thread.start()
    assert keeper.passed.wait(30)  # the first pass, at start: what changed while down
    keeper.passed.clear()
    yield keeper
    stop.set()
    keeper.stop()
    thread.join(30)
    assert not thread.is_alive()


def test_a_close_asks_for_a_pass_at_once(running: Counting) -> None:
    running.now()
    assert running.passed.wait(30)
    assert running.passes == 2


def test_a_message_read_asks_for_a_pass_within_a_few_seconds_not_at_once(
    running: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sitekeeper, "SOON_SECONDS", 3600.0)
    for _ in range(50):  # a storm of orders
        running.soon()
    assert not running.passed.wait(0.5)  # not one pass each, and not at once
    running.now()  # a close is not kept waiting by them
    assert running.passed.wait(30)
    assert running.passes == 2


def test_a_message_read_gets_its_pass(running: Counting, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sitekeeper, "SOON_SECONDS", 0.05)
    running.soon()
    assert running.passed.wait(30)


def test_a_folder_it_may_not_write_is_logged_once_then_its_recovery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    db = Database(url)
    upgrade(db)
    config = web_config(tmp_path, url)
    (tmp_path / "site").write_text("a file where the folder should be")
    keeper = SiteKeeper(lambda: db, lambda: config, utcnow)
    with caplog.at_level(logging.INFO, logger="snl_pbem.site"):
        for _ in range(3):
            keeper.once()
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "the pages wait" in errors[0].getMessage()
        (tmp_path / "site").unlink()
        keeper.once()
    assert "written again" in caplog.records[-1].getMessage()
    assert (tmp_path / "site" / "index.html").is_file()
    db.dispose()
