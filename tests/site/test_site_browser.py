"""The game pages in a real browser (issue 24): headless Chromium, driven by Selenium through
Debian's chromedriver, loads the site a real game through ``serve`` wrote (``snl-pbem
demo``: players join by mail, the server closes every round and keeps the pages), at a
phone's width and a desktop's."""

from __future__ import annotations

import io
import os
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from sqlalchemy import select

from snl_pbem.cli.demo import run_demo
from snl_pbem.config import load_config
from snl_pbem.store import Database, Player, Round, TurnRecord

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
WIDTHS = (375, 1280)
ATOM = "{http://www.w3.org/2005/Atom}"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium; under CI=true it must start, elsewhere it may skip."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        if not (CHROMIUM and DRIVER):
            raise RuntimeError("chromium or chromedriver is not installed")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
            options.add_argument(arg)
        driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Chromium is required under CI: {exc}")
        pytest.skip(f"Chromium not available: {exc}")
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module", params=["postal", "classic"])
def played(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp(f"demo-{request.param}")
    assert run_demo(folder, players=4, seed=3, out=io.StringIO(), ruleset=request.param) == 0
    return folder


def positions(folder: Path) -> dict[str, list[int]]:
    """Each player's square after rounds 0, 1, 2...: what the database says."""
    config = load_config(folder / "config.toml")
    db = Database(config.database_url)
    try:
        with db.transaction() as s:
            rows = s.execute(
                select(Player.name, Round.number, TurnRecord.final)
                .join(Player, Player.id == TurnRecord.player_id)
                .join(Round, Round.id == TurnRecord.round_id)
                .order_by(Round.number, TurnRecord.turn)
            ).all()
            names = s.scalars(select(Player.name).order_by(Player.id)).all()
    finally:
        db.dispose()
    after: dict[int, dict[str, int]] = {}
    for name, number, final in rows:
        after.setdefault(number, {})[name] = final
    return {n: [0, *(after[r].get(n, 0) for r in sorted(after))] for n in names}


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_no_page_scrolls_sideways_on_a_phone_or_a_desktop(browser, played: Path, tmp_path) -> None:
    site = played / "site"
    assert len(pages(site)) == 5  # the index, the game's page and the guide in 3 languages
    for width in WIDTHS:
        browser.set_window_size(width, 900)
        for page in pages(site):
            browser.get(page.as_uri())
            scroll, client = browser.execute_script(
                "const e = document.documentElement; return [e.scrollWidth, e.clientWidth]"
            )
            assert scroll <= client, f"{page.relative_to(site)} at {width}px: {scroll} > {client}"
            shot = tmp_path / f"{page.parent.name}-{width}.png"
            assert browser.save_screenshot(str(shot))
            assert shot.stat().st_size > 5000  # a picture of something, not a blank


def test_the_chart_has_a_line_per_player_with_the_database_positions(browser, played: Path) -> None:
    browser.set_window_size(1280, 900)
    browser.get((played / "site/games/demo/index.html").as_uri())
    drawn = browser.execute_script(
        """
        const chart = document.querySelector('figure.chart svg');
        const names = [...chart.querySelectorAll('.legends .legend text')].map(t => t.textContent);
        const lines = chart.querySelectorAll('.plot .series path.line').length;
        const values = names.map((_, i) => [...chart.querySelectorAll(
            `.plot .series.serie-${i} .dots desc.value`)].map(d => Number(d.textContent)));
        return {names, lines, values, label: chart.getAttribute('aria-describedby')};
        """
    )
    expected = positions(played)
    assert sorted(drawn["names"]) == sorted(expected)
    assert drawn["lines"] == len(expected)
    assert dict(zip(drawn["names"], drawn["values"], strict=True)) == expected
    table = browser.execute_script(  # the text alternative the chart names
        "return document.getElementById(arguments[0]).rows.length", drawn["label"]
    )
    assert table == len(next(iter(expected.values())))  # a header row and a row per round


def test_every_link_on_the_site_resolves(browser, played: Path) -> None:
    site = played / "site"
    checked = 0
    for page in pages(site):
        browser.get(page.as_uri())
        targets = browser.execute_script(
            "return [...document.querySelectorAll('a[href], link[href], img[src]')]"
            ".map(e => e.href || e.src)"
        )
        for target in targets:
            parts = urlsplit(target)
            if parts.scheme == "mailto":
                assert parts.path and "@" in parts.path
                continue
            assert parts.scheme == "file", target
            assert Path(unquote(parts.path)).is_file(), f"{page}: {target}"
            checked += 1
    assert checked >= 8


def test_the_feed_parses_with_an_entry_per_round(played: Path) -> None:
    feed = ET.fromstring((played / "site/games/demo/feed.xml").read_bytes())
    assert feed.tag == f"{ATOM}feed"
    rounds = len(next(iter(positions(played).values()))) - 1
    entries = feed.findall(f"{ATOM}entry")
    assert len(entries) == rounds
    assert all(e.find(f"{ATOM}content").text.startswith("Positions after round") for e in entries)


def test_the_pages_print_without_the_navigation(browser, played: Path) -> None:
    browser.set_window_size(1280, 900)
    browser.get((played / "site/games/demo/index.html").as_uri())
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    hidden = browser.execute_script(
        "return getComputedStyle(document.querySelector('header')).display"
    )
    pdf = browser.execute_cdp_cmd("Page.printToPDF", {})
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    assert hidden == "none"
    assert len(pdf["data"]) > 1000
