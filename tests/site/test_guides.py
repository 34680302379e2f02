"""The players' guide on the site (issue 25): one page per language, linked to each
other, written only when it changed; HELP links to the guide in its mail's language when
the site has an address, and to none without one."""

from __future__ import annotations

import email
import email.policy
import html
import re
from pathlib import Path

from mailhelpers import T0, replies_since
from sitehelpers import started

from snl_pbem.app.intake import ingest
from snl_pbem.i18n import LANGUAGES
from snl_pbem.site.guides import guide_source

BASE = "https://snl.example.org/"
PAGES = {"en": "players.html", "zh-Hans": "players.zh-Hans.html", "th": "players.th.html"}


def test_the_guides_are_pages_in_every_language_linked_to_each_other(tmp_path: Path) -> None:
    game = started(tmp_path, f"sqlite:///{tmp_path / 'snl.db'}", base_url=BASE)
    root = game.config.settings.web.dir
    game.site().update()
    assert set(PAGES) == set(LANGUAGES)
    for code, name in PAGES.items():
        page = (root / "guide" / name).read_text(encoding="utf-8")
        assert f'<html lang="{code}">' in page
        heading = re.search(r"^# (.+)$", guide_source(code), re.M)
        assert heading is not None
        shown = {
            tag: html.unescape(re.findall(f"<{tag}>(.*?)</{tag}>", page)[0])
            for tag in ("title", "h1")
        }
        assert shown == {"title": heading[1], "h1": heading[1]}
        links = re.findall(r'href="([^":]+)"', page)
        assert "../site.css" in links and "../index.html" in links
        assert not [link for link in links if link.endswith(".md")], links
        others = {link for link in links if link.startswith("players")}
        assert others == set(PAGES.values()) - {name}, others  # the other two languages
        assert all((root / "guide" / link).is_file() for link in others)
        assert "Updated" not in page  # the same bytes every pass: no time in it
    guides = sorted((root / "guide").iterdir())
    before = {p: p.stat().st_mtime_ns for p in guides}
    game.site().update()
    assert {p: p.stat().st_mtime_ns for p in guides} == before  # unchanged: not written
    (root / "guide" / "players.th.html").write_text("stale")
    game.site().update()
    assert (root / "guide" / "players.th.html").read_text().startswith("<!DOCTYPE html>")


def help_reply(game, body: str, sender: str, tag: str) -> str:
    ingest(
        game.db,
        game.config,
        (
            f"From: {sender}\r\nTo: snl@example.org\r\nSubject: help\r\n"
            f"Message-ID: <{tag}@example.org>\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"\r\n{body}\r\n"
        ).encode(),
        T0,
        "t",
    )
    mine = [r for r in replies_since(game.db, T0) if r.recipient == sender]
    message = email.message_from_bytes(mine[-1].message, policy=email.policy.default)
    return message.get_body(preferencelist=("plain",)).get_content()


def test_help_links_to_the_guide_in_its_mails_language(tmp_path: Path) -> None:
    game = started(tmp_path, f"sqlite:///{tmp_path / 'snl.db'}", base_url=BASE)
    english = help_reply(game, "GAME g1\r\nKEY ann-key-123\r\nHELP", "ann@example.org", "a")
    assert f"{BASE}guide/players.html" in english
    help_reply(game, "GAME g1\r\nKEY ann-key-123\r\nLANGUAGE zh", "ann@example.org", "b")
    chinese = help_reply(game, "GAME g1\r\nKEY ann-key-123\r\nHELP", "ann@example.org", "c")
    assert f"{BASE}guide/players.zh-Hans.html" in chinese
    assert "players.html" not in chinese.replace("players.zh-Hans.html", "")
    thai = help_reply(game, "HELP\r\nส่งคำสั่งอย่างไร", "nok@else.example", "d")  # a stranger
    assert f"{BASE}guide/players.th.html" in thai


def test_help_has_no_guide_link_without_the_sites_address(tmp_path: Path) -> None:
    game = started(tmp_path, f"sqlite:///{tmp_path / 'snl.db'}")
    text = help_reply(game, "GAME g1\r\nKEY ann-key-123\r\nHELP", "ann@example.org", "a")
    assert "How to send orders" in text and "guide/" not in text


def test_a_guide_that_cannot_be_read_never_stops_the_games_pages(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """A guide a GM saved unreadable (not UTF-8, say): the pass writes the games' pages
    and its stamps as always, logs the guide's error, and the next pass tries again."""
    import snl_pbem.site.writer as writer

    game = started(tmp_path, f"sqlite:///{tmp_path / 'snl.db'}", base_url=BASE)
    root = game.config.settings.web.dir

    def unreadable() -> dict[str, tuple[str, str, str]]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr(writer, "guide_pages", unreadable)
    report = game.site().update()
    assert report.games == 1 and (root / ".stamps.json").is_file()
    assert (root / "games/g1/index.html").is_file() and not (root / "guide").exists()
    assert "the players' guides could not be read" in caplog.text
    assert game.site().update().games == 0  # stamped: nothing to write again
    monkeypatch.undo()
    game.site().update()
    assert (root / "guide" / "players.th.html").is_file()
