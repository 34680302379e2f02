"""``games_dir``: one TOML file per game beside the config file (the conf.d habit, issue 23).

Every ``*.toml`` in the folder is one game, written as a ``[[games]]`` table's keys (or as
one ``[[games]]`` table); its games join the config file's in name order. A bad file is
named by file and key. ``check-config`` shows every problem and exits 2; ``serve`` leaves
out only the bad file's game at start and keeps the running version of it on a reload
(SIGHUP), and a game left out is never taken for one removed: sync_games leaves it as it
is, and its rounds still close (R3: a round closes at its deadline).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.rounds import close_with_backup
from snl_pbem.cli.main import boards_in_file, main
from snl_pbem.cli.service import Unit, needs, try_all
from snl_pbem.config import load_config, load_for_serve
from snl_pbem.errors import ConfigError
from snl_pbem.runners.server import Server
from snl_pbem.store import Database, Game, Player, Round
from snl_pbem.store.migrate import upgrade
from snl_pbem.store.states import GamePhase
from snl_pbem.timeutil import utcnow

MAIN = """
timezone = "Europe/London"
games_dir = "games.d"
[database]
url = "sqlite:///{db}"
backups = 0
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "g1"
board = "standard"
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org" }},
  {{ name = "bob", email = "bob@example.org" }},
]
"""

GAME_FILE = """
id = "{id}"
title = "{title}"
board = {{ snakes = {{ "47" = 26 }}, ladders = {{ "4" = 14 }} }}
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org" }},
  {{ name = "bob", email = "{bob}" }},
  {{ name = "cy", email = "cy@example.org" }},
]
"""


def setup(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "config.toml"
    path.write_text(MAIN.format(db=tmp_path / "snl.db"))
    folder = tmp_path / "games.d"
    folder.mkdir()
    return path, folder


def game_file(folder: Path, name: str, game_id: str, **keys: str) -> Path:
    values = {"title": "A game", "bob": "bob@example.org", **keys}
    file = folder / name
    file.write_text(GAME_FILE.format(id=game_id, **values))
    return file


def test_the_game_files_join_the_config_files_games_in_name_order(tmp_path: Path) -> None:
    path, folder = setup(tmp_path)
    game_file(folder, "b.toml", "beta")
    # one [[games]] table is read as well
    (folder / "a.toml").write_text(
        "[[games]]\n" + GAME_FILE.format(id="alpha", title="A", bob="b@x.org")
    )
    # an editor's files, hidden files, other files and folders are not games
    for other in (".#a.toml", "a.toml~", ".a.toml.swp", ".hidden.toml", "notes.txt"):
        (folder / other).write_text("not = [a game")
    (folder / "old.toml").mkdir()

    config = load_config(path)
    assert [g.id for g in config.games] == ["g1", "alpha", "beta"]
    alpha = config.game("alpha")
    assert alpha.file == "games.d/a.toml" and alpha.where == "games.d/a.toml: "
    assert config.game("g1").file is None and config.game("g1").where == "config.toml: games[0]."
    assert alpha.tz.key == "Europe/London"  # the config file's timezone is the default
    assert config.game_files == (folder / "a.toml", folder / "b.toml")
    assert config.left_out == ()


def test_an_id_used_twice_names_both_files(tmp_path: Path) -> None:
    path, folder = setup(tmp_path)
    game_file(folder, "club-7.toml", "club-7")
    game_file(folder, "club-7-copy.toml", "club-7")
    game_file(folder, "first.toml", "g1")  # the config file's own game
    game_file(folder, "fine.toml", "fine")

    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    assert (
        "games.d/club-7-copy.toml: id: 'club-7' is also the id of the game in "
        "games.d/club-7.toml: a game id names one game; change one of them"
    ) in problems
    assert any(
        p.startswith("games.d/club-7.toml: id: 'club-7' is also the id of the game in ")
        and "games.d/club-7-copy.toml" in p
        for p in problems
    )
    assert any(
        p.startswith("games.d/first.toml: id: 'g1' is also the id of the game in ")
        and "config.toml (games[0])" in p
        for p in problems
    )
    assert len(problems) == 3

    # serve's way: none of the files giving the id twice is used; the others are
    config = load_config(path, leave_out_bad_games=True)
    assert [g.id for g in config.games] == ["g1", "fine"]
    assert {(bad.file, bad.game_id) for bad in config.left_out} == {
        ("games.d/club-7-copy.toml", "club-7"),
        ("games.d/club-7.toml", "club-7"),
        ("games.d/first.toml", "g1"),
    }


def test_a_bad_game_file_is_named_by_file_and_key_and_the_others_load(tmp_path: Path) -> None:
    path, folder = setup(tmp_path)
    game_file(folder, "club-6.toml", "club-6")
    game_file(folder, "club-7.toml", "club-7", bob="bob@")
    game_file(folder, "club-8.toml", "club-8")
    (folder / "club-9.toml").write_text('id = "club-9"\nboard = [')
    bad_board = GAME_FILE.format(id="club-10", title="x", bob="b@x.org").replace(
        '"47" = 26', '"47" = 60'
    )
    (folder / "club-10.toml").write_text(bad_board)
    no_deadline = GAME_FILE.format(id="club-11", title="x", bob="b@x.org").replace(
        'first_deadline = "2030-01-04T18:00"', 'first_deadline = "soon"'
    )
    (folder / "club-11.toml").write_text(no_deadline)

    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "games.d/club-7.toml: players[1].email: 'bob@' is not an email address" in text
    assert "games.d/club-9.toml: not valid TOML" in text
    assert "games.d/club-10.toml: board.snakes.47: a snake must lead down" in text
    assert "games.d/club-11.toml: first_deadline: " in text
    assert "club-6" not in text and "club-8" not in text

    config = load_config(path, leave_out_bad_games=True)
    assert [g.id for g in config.games] == ["g1", "club-6", "club-8"]
    assert [(bad.file, bad.game_id) for bad in config.left_out] == [
        ("games.d/club-10.toml", "club-10"),
        ("games.d/club-11.toml", "club-11"),
        ("games.d/club-7.toml", "club-7"),
        ("games.d/club-9.toml", None),  # no id could be read
    ]
    with pytest.raises(LookupError, match=r"its file games\.d/club-7\.toml has problems"):
        config.game("club-7")


def test_the_config_files_own_problems_still_stop_everything(tmp_path: Path) -> None:
    path, folder = setup(tmp_path)
    game_file(folder, "club-6.toml", "club-6")
    path.write_text(path.read_text().replace("ann@example.org", "ann@"))
    with pytest.raises(ConfigError, match=r"config.toml: games\[0\].players\[0\].email"):
        load_for_serve(path)
    path.write_text(MAIN.format(db=tmp_path / "snl.db").replace('"games.d"', '"no-such.d"'))
    with pytest.raises(ConfigError, match=r"config\.toml: games_dir: cannot read the folder"):
        load_for_serve(path)


def test_check_config_shows_the_good_games_and_the_bad_files_problems_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, folder = setup(tmp_path)
    game_file(folder, "club-6.toml", "club-6", title="Club six")
    game_file(folder, "club-7.toml", "club-7", bob="bob@")
    game_file(folder, "club-8.toml", "club-8", title="Club eight")

    code = main(["check-config", "--config", str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith(
        "snl-pbem check-config: games.d/club-7.toml: players[1].email: 'bob@' is not an "
        "email address"
    )
    assert "serve leaves out the game of a file with problems and runs the other 3 games" in err
    assert "1 game file with problems" in out and "OK" not in out.splitlines()[0]
    assert "games_dir: games.d, 3 game files, 1 with problems" in out
    assert "game club-6: Club six (games.d/club-6.toml)" in out
    assert "game club-8: Club eight (games.d/club-8.toml)" in out

    # fixed: OK, exit 0
    game_file(folder, "club-7.toml", "club-7")
    assert main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("config.toml: OK")

    # another command warns of a bad file and goes on with the other games
    game_file(folder, "club-7.toml", "club-7", bob="bob@")
    assert main(["db", "upgrade", "--config", str(path)]) == 0
    assert main(["start", "club-6", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: games.d/club-7.toml has problems, its game is left out" in err
    assert main(["start", "club-7", "--config", str(path)]) == 2
    assert "its file games.d/club-7.toml has problems" in capsys.readouterr().err


def test_the_board_command_and_the_services_check_see_the_game_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``snl-pbem board config.toml`` shows the game files' boards too, and the check of
    what the service can read covers the folder (listed) and each file (read)."""
    path, folder = setup(tmp_path)
    game_file(folder, "club-6.toml", "club-6")
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "mine.toml").write_text('[board]\nladders = { "3" = 30 }\n')
    mine = GAME_FILE.format(id="club-7", title="x", bob="b@x.org")
    board_line = 'board = { snakes = { "47" = 26 }, ladders = { "4" = 14 } }'
    (folder / "club-7.toml").write_text(mine.replace(board_line, 'board = "boards/mine.toml"'))

    boards = dict(boards_in_file(path))
    assert list(boards) == ["g1", "club-6", "club-7"]
    assert boards["club-7"].ladders == load_config(path).game("club-7").board.ladders
    assert main(["board", str(path), "--game", "club-7"]) == 0
    assert "30" in capsys.readouterr().out

    found, problems = needs(load_config(path), Unit(None))
    assert problems == []
    listed = {(n.key, n.file, n.path, n.access) for n in found}
    assert ("games_dir", None, folder, "list") in listed
    assert ("", "games.d/club-6.toml", folder / "club-6.toml", "read") in listed
    assert ("board", "games.d/club-7.toml", tmp_path / "boards" / "mine.toml", "read") in listed
    assert try_all([n for n in found if n.access == "list"]) == [None]
    folder.rename(tmp_path / "gone.d")
    refused = try_all([n for n in found if n.key == "games_dir"])
    assert refused[0] is not None and "No such file" in refused[0].reason


def _emails(db: Database, game: str) -> dict[str, str]:
    with db.transaction() as s:
        rows = s.execute(
            select(Player.name, Player.email).join(Game).where(Game.name == game)
        ).all()
    return {name: email for name, email in rows}


def test_serve_keeps_a_broken_files_running_game_and_never_ends_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a reload the running version of a game whose file went bad is kept (its
    players, its settings), and the other files' changes are applied. At start, a game
    whose file is bad is left out, but a game the database holds plays on: sync_games
    leaves it as it is and its round closes (R3)."""
    path, folder = setup(tmp_path)
    game_file(folder, "club-6.toml", "club-6")
    club7 = game_file(folder, "club-7.toml", "club-7", title="Seven")
    db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
    upgrade(db)
    db.dispose()
    server = Server(path)
    server.start()
    try:
        start_game(server.db, server.config, "club-7", utcnow())
        running = server.config.game("club-7")

        game_file(folder, "club-7.toml", "club-7", title="Seven, renamed", bob="bob@")
        game_file(folder, "club-6.toml", "club-6", title="Six, renamed")
        with caplog.at_level(logging.INFO):
            server.reload()
        assert server.config.game("club-7") is running  # the running version
        assert server.rounds.config is server.config
        assert server.config.game("club-6").settings.title == "Six, renamed"  # applied
        assert _emails(server.db, "club-7")["bob"] == "bob@example.org"
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert errors[0].startswith(
            "games.d/club-7.toml: players[1].email: 'bob@' is not an email address: no domain "
            "after the @ (e.g. example.org); game club-7 runs on as loaded before until the "
            "file is fixed: fix it, check it with snl-pbem check-config, then reload"
        )
        assert "not in the config" not in caplog.text
        with server.db.transaction() as s:
            title = s.scalar(select(Game.title).where(Game.name == "club-7"))
        assert title == "Seven"
    finally:
        server.shutdown()

    # a start with the file still bad: the game is left out, logged, and plays on
    caplog.clear()
    club7.write_text(club7.read_text().replace('title = "Seven, renamed"', "title = 7"))
    server = Server(path)
    with caplog.at_level(logging.INFO):
        server.start()
    try:
        assert server.config.find("club-7") is None
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith("games.d/club-7.toml: title: ")
        assert "its game is left out (a game already in the database plays on" in errors[0]
        assert "config: club-7: in the database but not in the config; left as it is" in (
            caplog.text
        )
        with server.db.transaction() as s:
            state = s.scalar(select(Game.state).where(Game.name == "club-7"))
        assert state == GamePhase.RUNNING
        report = sync_games(server.db, server.config, utcnow())  # a reload's sync too
        assert report.lines == ["club-7: in the database but not in the config; left as it is"]
        with server.db.transaction() as s:
            deadline = s.scalar(
                select(Round.deadline).join(Game).where(Game.name == "club-7", Round.number == 1)
            )
        outcome = close_with_backup(server.db, "club-7", deadline, backups=0, config=server.config)
        assert outcome is not None and outcome.round == 1 and outcome.next_round == 2
    finally:
        server.shutdown()
