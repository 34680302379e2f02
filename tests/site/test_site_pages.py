"""The game pages (issue 24): what they show, what they keep secret (R19), that only what
changed is rewritten, that a crash mid-rewrite leaves the old pages whole, and the link
at the end of every report."""

from __future__ import annotations

import email
import email.policy
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from sitehelpers import NAMES, started, web_config
from sqlalchemy import select

from snl_pbem.app.games import sync_games
from snl_pbem.config import load_config
from snl_pbem.errors import ConfigError
from snl_pbem.store import Game, OutboxMessage, Player, Round, RoundTally, TurnRecord

ATOM = "{http://www.w3.org/2005/Atom}"


def site_text(root: Path) -> dict[str, str]:
    """Every file a web server would serve (no hidden ones), by path: its text."""
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def secrets_shown(root: Path) -> list[str]:
    """What of the board, the dice and the nominations the site shows (R19 forbids all of
    it during a postal game): each finding names the file."""
    found = []
    for path, text in site_text(root).items():
        if path.startswith("guide/"):
            continue  # the players' guide: the rules in general, the same for every game
        if "board" in path:
            found.append(f"{path}: the board's picture")
        lowered = text.lower().replace("snakes and ladders", "the game")  # its name
        for word in ("snake", "ladder", "nominated", "(default)", "boustrophedon"):
            if word in lowered:
                found.append(f"{path}: {word!r}")
        if "Family: " in text:
            found.append(f"{path}: a family of snakes or ladders")
        for pattern in (r"trapdoors?: \d", r"\d+->\d+", r"\bdice\b", r"active in round"):
            if re.search(pattern, lowered):
                found.append(f"{path}: /{pattern}/")
    return found


def test_a_postal_game_shows_positions_only_until_it_ends_then_reveals_all(
    tmp_path: Path, db_url: str
) -> None:
    """R19: during the game, nothing on the site (pages, feed, file names) tells the board,
    the dice, the nominations or the trapdoors; after the game (reveal_after_game) all of
    it is there: the board's SVG with its snakes, ladders and active trapdoors, and every
    round's dice and nominations."""
    game = started(tmp_path, db_url)
    root = game.config.settings.web.dir
    game.site().update()
    while not game.over():
        game.play_round()
        report = game.site().update()
        assert report.games == 1
        if not game.over():
            assert secrets_shown(root) == [], "during the game"
    found = secrets_shown(root)
    assert any("board.svg" in f for f in found), found
    page = (root / "games/g1/index.html").read_text()
    svg = (root / "games/g1/board.svg").read_text()
    with game.db.transaction() as s:
        traps = {t for row in s.scalars(select(RoundTally.trapdoors)) for t in row}
        dice = s.execute(
            select(Player.name, Round.number, TurnRecord.die)
            .join(Player, Player.id == TurnRecord.player_id)
            .join(Round, Round.id == TurnRecord.round_id)
            .order_by(Round.number, TurnRecord.turn)
        ).all()
    assert traps, "the game made trapdoors (else the test shows nothing)"
    for space in traps:
        assert f"trapdoor {space}, active in round" in svg
    for feature in ("snake 27 to 5", "snake 34 to 15", "ladder 3 to 22", "ladder 8 to 29"):
        assert feature in svg
    assert "Ladders (2): 3-&gt;22, 8-&gt;29" in page
    last = max(n for _, n, _ in dice)
    for name in NAMES:
        shown = " ".join(str(d) for who, n, d in dice if who == name and n == last)
        assert re.search(rf"<td>{name}</td><td>{shown}</td>", page), (name, shown)
    assert "(default)" in page  # cy's skipped rounds: the R16 default nomination


def test_a_game_that_does_not_reveal_keeps_its_secrets_after_it_ends(
    tmp_path: Path, db_url: str
) -> None:
    """reveal_after_game = false (the default): the finished game's page says who won and
    shows the positions, and still nothing of the board, dice or nominations."""
    game = started(tmp_path, db_url, reveal=False)
    while not game.over():
        game.play_round()
    game.site().update()
    root = game.config.settings.web.dir
    assert secrets_shown(root) == []
    page = (root / "games/g1/index.html").read_text()
    assert "<strong>finished</strong>" in page
    assert re.search(r'class="result"><strong>(\w+ wins|A draw between [\w, ]+)</strong>', page)


def test_the_page_shows_standings_the_round_table_and_the_chart_from_the_database(
    tmp_path: Path,
) -> None:
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}")
    for _ in range(3):
        game.play_round()
    game.site().update()
    root = game.config.settings.web.dir
    page = (root / "games/g1/index.html").read_text()
    with game.db.transaction() as s:
        finals = s.execute(
            select(Round.number, Player.name, TurnRecord.final, TurnRecord.turn)
            .join(Player, Player.id == TurnRecord.player_id)
            .join(Round, Round.id == TurnRecord.round_id)
            .order_by(Round.number, TurnRecord.turn)
        ).all()
        deadline = s.scalar(select(Round.deadline).where(Round.state == "open"))
    after: dict[int, dict[str, int]] = {}
    for number, name, final, _turn in finals:
        after.setdefault(number, {})[name] = final  # the last turn's wins
    for number, positions in after.items():
        row = re.search(rf'<tr id="round-{number}">(.*?)</tr>', page)
        assert row is not None
        cells = re.findall(r'<td class="num">(\d+)</td>', row.group(1))
        assert [int(c) for c in cells] == [positions[n] for n in NAMES]
    # the chart: one line per player, its dots the positions after rounds 0..3
    values: dict[int, list[int]] = {}
    for block in page.split('<g class="series serie-')[1:]:
        index = int(block.split(" ", 1)[0])
        dots = re.findall(r'<desc class="value">([\d.]+)</desc>', block)
        values.setdefault(index, []).extend(int(float(v)) for v in dots)
    assert sorted(values) == [0, 1, 2]  # a line each
    for index, name in enumerate(NAMES):
        assert values[index] == [0, *(after[n][name] for n in sorted(after))], name
    assert "finish 40" in page
    assert deadline.strftime("%-d %b %Y") in page
    assert "Deadline for round 4" in page
    feed = ET.fromstring((root / "games/g1/feed.xml").read_bytes())
    entries = feed.findall(f"{ATOM}entry")
    assert [e.find(f"{ATOM}title").text for e in entries] == [
        f"Test game: round {n} report" for n in (3, 2, 1)
    ]


def test_a_close_rewrites_only_its_game_and_the_index(tmp_path: Path) -> None:
    """At five hosted games, a round close of one rewrites that game's pages and the
    index; the other games' files are not touched; a pass with no change writes nothing."""
    games = "".join(
        f"""
[[games]]
id = "h{i}"
board = "standard"
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-123" }},
]
"""
        for i in range(4)
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    game = started(tmp_path, url, extra=games)
    from snl_pbem.app.games import start_game

    for i in range(4):
        start_game(game.db, game.config, f"h{i}", game.now[0])
    first = game.site().update()
    assert (first.games, first.index) == (5, True)
    root = game.config.settings.web.dir
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    nothing = game.site().update()
    assert (nothing.games, nothing.index) == (0, False)
    game.play_round("h2")
    report = game.site().update()
    assert (report.games, report.index) == (1, True)
    changed = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.stat().st_mtime_ns != before.get(p)
    )
    assert changed == [".stamps.json", "games/h2/feed.xml", "games/h2/index.html", "index.html"]


def test_a_crash_between_writing_and_renaming_leaves_the_old_pages_whole(tmp_path: Path) -> None:
    """The crash point site.written-not-renamed kills ``snl-pbem site build`` with a page's
    new text in its temporary file: every served file is the old one, byte for byte; the
    next pass sweeps the leftover and writes the new pages."""
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}")
    game.play_round()
    game.site().update()
    root = game.config.settings.web.dir
    old = site_text(root)
    game.play_round()
    env = {
        **os.environ,
        "SNL_PBEM_CRASH_POINTS": "site.written-not-renamed=1",
        "SNL_PBEM_CRASH_LOG": str(tmp_path / "crashes"),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "snl_pbem.cli.main",
            "site",
            "build",
            "--config",
            str(tmp_path / "c.toml"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    assert (tmp_path / "crashes").read_text() == "site.written-not-renamed\n"
    assert site_text(root) == old  # every page whole, and the old one
    assert list((root / ".tmp").glob("*")), "the new page was in its temporary file"
    report = game.site().update()
    assert report.games == 1
    assert not list((root / ".tmp").glob("*"))
    assert '<tr id="round-2">' in (root / "games/g1/index.html").read_text()


def test_reports_end_with_the_game_page_link_when_base_url_is_set(tmp_path: Path) -> None:
    game = started(
        tmp_path, f"sqlite:///{tmp_path / 's.db'}", base_url="https://games.example.org/snl"
    )
    game.play_round()
    with game.db.transaction() as s:
        raws = s.scalars(
            select(OutboxMessage.message).where(OutboxMessage.kind.in_(("report", "game_over")))
        ).all()
    assert len(raws) == 3
    for raw in raws:
        body = email.message_from_bytes(raw, policy=email.policy.default).get_body().get_content()
        text, _, signature = body.replace("\r\n", "\n").rpartition("\n-- \n")  # link, then sig
        assert text.rstrip().endswith("Game page: https://games.example.org/snl/games/g1/"), body
        assert signature.strip() == "The g1 referee"


def test_reports_have_no_link_without_base_url(tmp_path: Path) -> None:
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}")
    game.play_round()
    with game.db.transaction() as s:
        raws = s.scalars(select(OutboxMessage.message).where(OutboxMessage.kind == "report")).all()
    assert raws and not any(b"Game page" in raw for raw in raws)


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('[web]\nbase_url = "https://x.org/"\n', "web.dir"),
        ('[web]\ndir = "site"\nbase_url = "ftp://x.org/"\n', "web.base_url"),
        ('[web]\ndir = ""\n', "web.dir"),
        ('[web]\ndir = "site"\nurl = "https://x.org/"\n', "web.url"),
        ('[web]\ndir = "."\n', "web.dir: {tmp} would publish the database's folder"),
        ('[web]\ndir = "/"\n', "web.dir: / would publish the database's folder"),
    ],
)
def test_a_bad_web_table_names_its_key(tmp_path: Path, table: str, named: str) -> None:
    from mailhelpers import CONFIG

    from snl_pbem.config import load_config

    text = CONFIG.format(url="sqlite:///x.db", replies=1, board='"standard"', reveal="false")
    (tmp_path / "c.toml").write_text(text + "\n" + table)
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "c.toml")
    assert named.format(tmp=tmp_path.resolve()) in str(caught.value)


def test_dir_is_relative_to_the_config_file_and_base_url_gets_its_slash(tmp_path: Path) -> None:
    config = web_config(tmp_path, "sqlite:///x.db", base_url="https://games.example.org/snl")
    assert config.settings.web.dir == (tmp_path / "site").resolve()
    assert config.settings.web.base_url == "https://games.example.org/snl/"


def test_the_index_lists_forming_running_and_finished_games_with_a_join_link(
    tmp_path: Path,
) -> None:
    forming = """
[[games]]
id = "open1"
title = "Open game"
board = "standard"
signup = "open"
first_deadline = "2030-02-04T18:00"
round_length = "3d"
"""
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", extra=forming)
    game.site().update()
    index = (game.config.settings.web.dir / "index.html").read_text()
    assert (
        'href="mailto:snl@example.org?subject=JOIN%20open1&amp;body=JOIN%20open1%20%3Cyour%20name%3E"'
        in index
    )
    running = index.index('id="h-running"')
    assert index.index("Open game") < running < index.index("Test game")
    with game.db.transaction() as s:
        assert s.scalar(select(Game.state).where(Game.name == "open1")) == "new"


class Tags(HTMLParser):
    """Every tag of a page, its attributes' names, and its images' sources."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.attributes: set[str] = set()
        self.sources: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self.sources.update(value or "" for name, value in attrs if name == "src")


def test_a_forming_game_shows_who_has_joined_and_how_to_join(tmp_path: Path) -> None:
    forming = """
[[games]]
id = "open1"
title = "Open game"
board = "standard"
signup = "open"
max_players = 6
first_deadline = "2030-02-04T18:00"
round_length = "3d"
players = [{ name = "dee", email = "dee@example.org" }]
"""
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", extra=forming)
    game.site().update()
    page = (game.config.settings.web.dir / "games/open1/index.html").read_text()
    assert "Players (1 of 6)" in page and "<li>dee</li>" in page
    assert "mailto:snl@example.org?subject=JOIN%20open1" in page
    assert "Standings" not in page and "The race" not in page


def test_no_page_has_a_script_and_hostile_names_are_text(tmp_path: Path) -> None:
    """The pages work without JavaScript (none is there), and a player's name is shown as
    text everywhere (page, chart, feed), never read as markup."""
    hostile = '<img src=x onerror=alert(1)>&"'
    game = started(
        tmp_path,
        f"sqlite:///{tmp_path / 's.db'}",
        edit=lambda text: text.replace('name = "ann"', f"name = {json.dumps(hostile)}"),
    )
    game.play_round()
    game.site().update()
    root = game.config.settings.web.dir
    for path, body in site_text(root).items():
        if path.endswith(".html"):
            tags = Tags()
            tags.feed(body)
            assert "script" not in tags.names, path
            assert not [a for a in tags.attributes if a.startswith("on")], path
            assert "x" not in tags.sources, path  # the hostile <img src=x> is no image
        elif path.endswith(".xml"):
            assert {e.tag.split("}")[0] for e in ET.fromstring(body.encode()).iter()} == {
                ATOM[:-1]
            }, path  # Atom's elements only: the name is text in them
    page = (root / "games/g1/index.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;" in page
    names = [
        e.text
        for e in ET.fromstring((root / "games/g1/feed.xml").read_bytes()).iter(f"{ATOM}content")
    ]
    assert hostile in names[0]


def test_a_paused_game_says_so_on_the_index_and_its_page(tmp_path: Path) -> None:
    from snl_pbem.app.referee import pause

    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}")
    game.play_round()
    game.site().update()
    pause(game.db, "g1", game.now[0], config=game.config)
    assert game.site().update().games == 1
    root = game.config.settings.web.dir
    index = (root / "index.html").read_text()
    assert "Paused by the referee" in index and "deadline" not in index
    page = (root / "games/g1/index.html").read_text()
    assert "paused the game" in page and "Deadline for round" not in page


def test_a_game_whose_page_fails_leaves_the_others_written_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snl_pbem.site import writer

    other = """
[[games]]
id = "h1"
board = "standard"
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [{ name = "dee", email = "dee@example.org", key = "dee-key-123" }]
"""
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", extra=other)
    real = writer.game_page

    def broken(session, config, row, now):  # a board a newer release refuses, say
        if row.name == "g1":
            raise ValueError("board: something new")
        return real(session, config, row, now)

    monkeypatch.setattr(writer, "game_page", broken)
    report = game.site().update()
    assert report.failed == {"g1": "ValueError: board: something new"}
    assert (report.games, report.index) == (1, True)
    root = game.config.settings.web.dir
    assert (root / "games/h1/index.html").is_file() and not (root / "games/g1").exists()
    monkeypatch.setattr(writer, "game_page", real)
    assert game.site().update().games == 1  # g1 now, and h1 not again
    assert (root / "games/g1/index.html").is_file()


def test_what_every_page_shows_from_the_config_rewrites_every_page(tmp_path: Path) -> None:
    """The game address (footers, join links) and base_url (feeds) are on every page: a
    change rewrites them all; and a forming game's players, as the config changes them."""
    forming = """
[[games]]
id = "open1"
board = "standard"
signup = "open"
first_deadline = "2030-02-04T18:00"
round_length = "3d"
players = [{ name = "dee", email = "dee@example.org" }]
"""
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", extra=forming)
    assert game.site().update().games == 2
    text = (tmp_path / "c.toml").read_text()
    (tmp_path / "c.toml").write_text(
        text.replace('address = "snl@example.org"', 'address = "games@example.net"')
    )
    game.config = load_config(tmp_path / "c.toml")
    assert game.site().update().games == 2
    root = game.config.settings.web.dir
    assert "games@example.net" in (root / "games/g1/index.html").read_text()
    assert "mailto:games@example.net?subject=JOIN%20open1" in (root / "index.html").read_text()
    swapped = (tmp_path / "c.toml").read_text().replace("dee", "eve")
    (tmp_path / "c.toml").write_text(swapped)
    game.config = load_config(tmp_path / "c.toml")
    sync_games(game.db, game.config, game.now[0])
    assert game.site().update().games == 1
    assert "<li>eve</li>" in (root / "games/open1/index.html").read_text()


def test_a_pass_told_to_stop_keeps_what_it_wrote_and_the_next_writes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stopping mid-pass (a rewrite of every game after an upgrade): the pass
    stops between games, read a chunk at a time; the games written are stamped, the rest
    and the index wait for the next pass."""
    import threading

    from snl_pbem.site import writer

    more = "".join(
        f"""
[[games]]
id = "h{i}"
board = "standard"
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [{{ name = "dee", email = "dee@example.org", key = "dee-key-123" }}]
"""
        for i in range(3)
    )
    game = started(tmp_path, f"sqlite:///{tmp_path / 's.db'}", extra=more)
    monkeypatch.setattr(writer, "CHUNK", 1)
    stop = threading.Event()
    site = game.site()
    real = site._write_game

    def then_stop(page):
        real(page)
        stop.set()  # SIGTERM arrives while the first game is written

    monkeypatch.setattr(site, "_write_game", then_stop)
    report = site.update(stop=stop)
    assert (report.games, report.index, report.stopped) == (1, False, True)
    root = game.config.settings.web.dir
    assert sorted(p.name for p in (root / "games").iterdir()) == ["g1"]
    assert not (root / "index.html").exists()
    report = game.site().update()
    assert (report.games, report.index, report.stopped) == (3, True, False)
    assert sorted(p.name for p in (root / "games").iterdir()) == ["g1", "h0", "h1", "h2"]
