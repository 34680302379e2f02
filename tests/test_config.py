"""The referee's config: every problem at once, with the key and the fix; exit status 2."""

from __future__ import annotations

import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from snl_pbem.boards import bundled_names, bundled_table
from snl_pbem.cli.main import boards_in_file, main
from snl_pbem.config import config_path, load_config
from snl_pbem.errors import ConfigError
from snl_pbem.rules import Board

GOOD = """
timezone = "Europe/London"
[database]
url = "sqlite:///data/snl.db"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[mail.smtp]
host = "smtp.example.org"
username = "snl"
password_file = "smtp.secret"
[[games]]
id = "spring26"
title = "Spring 2026"
board = "boards/standard.toml"
first_deadline = "2026-03-28T18:00"
round_length = "3d"
players = [
  { name = "ann", email = "ann@example.org" },
  { name = "bob", email = "bob@example.org", key = "k3y-b0b" },
]
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "boards").mkdir(exist_ok=True)
    (tmp_path / "boards" / "standard.toml").write_text('[board]\nsnakes = { "16" = 6 }\n')
    (tmp_path / "smtp.secret").write_text("s3cret\n")
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_good_config_loads_boards_secrets_and_schedule(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    game = config.game("spring26")
    assert game.board.snakes == {16: 6}
    assert config.database_url == f"sqlite:///{tmp_path / 'data' / 'snl.db'}"
    assert config.password(config.settings.mail.smtp) == "s3cret"
    # 18:00 London on 28 March (GMT) and 31 March (BST): the wall clock holds across DST
    assert game.schedule.deadline(1) == datetime(2026, 3, 28, 18, 0, tzinfo=UTC)
    assert game.schedule.deadline(2) == datetime(2026, 3, 31, 17, 0, tzinfo=UTC)
    assert game.settings.double_from_round == 7  # what the server stores (app.games)


def test_every_problem_is_named_with_its_key(tmp_path: Path) -> None:
    bad = (
        GOOD.replace('"bob@example.org"', '"bob@"')
        .replace('round_length = "3d"', 'round_length = "3 days"')
        .replace('title = "Spring 2026"', 'title = "S"\ncolour = 1')
    )
    bad = bad.replace('password_file = "smtp.secret"', 'password_file = "missing.secret"')
    bad += (
        '\n[[games]]\nid = "two"\nboard = { ladders = { "10" = 5 } }\n'
        'first_deadline = "soon"\nround_length = "1d"\nplayers = []\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, bad))
    problems = caught.value.problems
    expected = [
        "config.toml: games[0].players[1].email: 'bob@' is not an email address",
        "config.toml: games[0].round_length: '3 days' is not a duration",
        "config.toml: games[0].colour: unknown key",
        'config.toml: games[1].players: a game with signup = "closed" needs at least one',
        "config.toml: mail.smtp.password_file: cannot read",
        "config.toml: games[1].board.ladders.10: a ladder must lead up",
        "config.toml: games[1].first_deadline: 'soon' is not a time",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in problems), (line, problems)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('id = "spring26"', 'id = "Spring 26"'), "games[0].id: 'Spring 26': a game id is"),
        (
            ('timezone = "Europe/London"', 'timezone = "Mars/Olympus"'),
            "timezone: 'Mars/Olympus' is not a time zone",
        ),
        (('url = "sqlite:///data/snl.db"', 'url = "mysql://x"'), "database.url: 'mysql://x'"),
        (
            (
                '{ name = "ann", email = "ann@example.org" }',
                '{ name = "ann", email = "bob@example.org" }',
            ),
            "email 'bob@example.org' is used twice",
        ),
        (('round_length = "3d"', ""), "games[0].round_length: missing"),
        (("[mail]\n", "[mail]\nport = 1\n"), "mail.port: unknown key"),
    ],
)
def test_single_problems(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, GOOD.replace(*change)))
    assert any(message in p for p in caught.value.problems), caught.value.problems


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[mail\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_config_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SNL_PBEM_CONFIG", raising=False)
    assert config_path(None) == Path("/etc/snl-pbem/config.toml")
    monkeypatch.setenv("SNL_PBEM_CONFIG", str(tmp_path / "env.toml"))
    assert config_path(None) == tmp_path / "env.toml"
    assert config_path("given.toml") == Path("given.toml")


def test_check_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    assert main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "game spring26: Spring 2026" in out and "players (2): ann, bob" in out
    assert "round 1 Sat 28 Mar 2026 18:00 GMT, round 2 Tue 31 Mar 2026 18:00 BST" in out
    assert "warning: bob's key is shorter than 10 characters" in out
    path.write_text(GOOD.replace('"ann@example.org"', '"ann"'))
    assert main(["check-config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "games[0].players[0].email: 'ann' is not an email address" in err
    assert "Traceback" not in err


def test_check_config_shows_the_lmtp_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[mail.lmtp] as check-config shows it: where it listens, whose receipt times count,
    and what happens to mail the MTA queued while serve was down (ETRN, the grace)."""
    lmtp = '[mail.lmtp]\nport = 8025\nmta_hostname = "mx.example.org"\n'
    path = write(tmp_path, GOOD.replace("[mail.smtp]", lmtp + "[mail.smtp]"))
    assert main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "  lmtp: LMTP on 127.0.0.1:8025; the MTA's receipt times: by mx.example.org (at most "
        "1d old); after a restart: ETRN to 127.0.0.1:25, rounds wait up to 11m\n"
    ) in out
    off = 'etrn_server = ""\nredelivery_grace = "0s"\n'
    path.write_text(GOOD.replace("[mail.smtp]", "[mail.lmtp]\n" + off + "[mail.smtp]"))
    assert main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "the MTA's receipt times: not used; after a restart: no ETRN, no grace\n" in out
    path.write_text(
        GOOD.replace("[mail.smtp]", '[mail.lmtp]\netrn_server = "[::1]:2525"\n[mail.smtp]')
    )
    assert main(["check-config", "--config", str(path)]) == 0
    assert "after a restart: ETRN to [::1]:2525, rounds wait up to 11m" in capsys.readouterr().out
    path.write_text(GOOD)  # no [mail.lmtp]: no line about it
    assert main(["check-config", "--config", str(path)]) == 0
    assert "lmtp:" not in capsys.readouterr().out


def test_the_example_config_is_valid(tmp_path: Path) -> None:
    deploy = Path(__file__).parents[1] / "deploy"
    text = (deploy / "config.example.toml").read_text()
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "standard.toml").write_text(
        (deploy / "boards" / "standard.toml").read_text()
    )
    for secret in ("imap.password", "smtp.password"):  # beside it (not a credential here)
        (tmp_path / secret).write_text("pw\n")
    path = tmp_path / "config.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.game("spring26").board.ladders[80] == 100
    assert config.settings.mail.imap is not None and config.settings.mail.imap.port == 993


def test_every_board_in_deploy_loads() -> None:
    boards = sorted((Path(__file__).parents[1] / "deploy" / "boards").glob("*.toml"))
    assert len(boards) >= 3
    for path in boards:
        [(_, board)] = boards_in_file(path)
        assert board.features, path.name


def same_board(a: Board, b: Board) -> bool:
    return (a.grid, a.features, a.layout, a.families) == (b.grid, b.features, b.layout, b.families)


def test_a_game_may_name_a_bundled_board(tmp_path: Path) -> None:
    """board = "standard" is the bundled conventional board: the same as
    deploy/boards/standard.toml, and stored with the game as a [board] table."""
    config = load_config(write(tmp_path, GOOD.replace('"boards/standard.toml"', '"standard"')))
    game = config.game("spring26")
    deploy = Path(__file__).parents[1] / "deploy" / "boards" / "standard.toml"
    [(_, expected)] = boards_in_file(deploy)
    assert same_board(game.board, expected)
    assert game.board_table == tomllib.loads(deploy.read_text())["board"]
    for name in bundled_names():
        loaded = load_config(write(tmp_path, GOOD.replace('"boards/standard.toml"', f'"{name}"')))
        assert same_board(loaded.game("spring26").board, Board.from_mapping(bundled_table(name)))


def test_an_unknown_board_names_the_key_the_file_and_the_bundled_boards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace('"boards/standard.toml"', '"standrad"'))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [problem] = caught.value.problems
    assert problem.startswith(
        f"config.toml: games[0].board: board file {tmp_path / 'standrad'} does not exist, "
        "and 'standrad' is not a bundled board (bundled boards: "
    )
    assert all(name in problem for name in bundled_names())
    assert main(["check-config", "--config", str(path)]) == 2
    assert "games[0].board: board file" in capsys.readouterr().err


def test_a_board_file_wins_over_a_bundled_name_of_the_same_spelling(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('"boards/standard.toml"', '"standard"'))
    (tmp_path / "standard").write_text('[board]\nrows = 4\ncolumns = 4\nladders = { "2" = 9 }\n')
    board = load_config(path).game("spring26").board
    assert board.last == 16 and board.ladders == {2: 9}


def test_the_example_sign_up_game_is_valid(tmp_path: Path) -> None:
    """The example's commented game that players join by mail loads once uncommented."""
    deploy = Path(__file__).parents[1] / "deploy"
    text = (deploy / "config.example.toml").read_text()
    head, _, tail = text.partition("# A game players join by mail")
    block = "\n".join(line.removeprefix("# ") for line in tail.splitlines()[1:])
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "standard.toml").write_text(
        (deploy / "boards" / "standard.toml").read_text()
    )
    for secret in ("imap.password", "smtp.password"):
        (tmp_path / secret).write_text("pw\n")
    path = tmp_path / "config.toml"
    path.write_text(head + block + "\n")
    game = load_config(path).game("winter27")
    assert (game.settings.signup, game.settings.max_players, game.settings.players) == (
        "open",
        10,
        [],
    )
    assert game.starts_at is not None and game.starts_at.isoformat() == "2027-01-05T18:00:00+00:00"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("players = []", 'games[0].players: a game with signup = "closed" needs at least one'),
        ('signup = "open"\nmax_players = 1', "games[0].max_players: 1 is fewer than the 2"),
        ('signup = "open"\nstarts = "when_full"', 'games[0].starts: "when_full" needs max_players'),
        ('starts = "2026-12-01T18:00"', "games[0].starts: only a game that takes sign-ups"),
        ('signup = "open"\nstarts = "soon"', "games[0].starts: 'soon' is not a time"),
        ('signup = "maybe"', "games[0].signup: Input should be 'closed', 'open' or 'approval'"),
        ('signup = "open"\nmin_players = 5\nmax_players = 3', "fewer than min_players (5)"),
    ],
)
def test_sign_up_settings_are_checked_by_name(tmp_path: Path, change: str, named: str) -> None:
    if change == "players = []":
        text = re.sub(r"players = \[.*?\n\]", "players = []", GOOD, flags=re.S)
    else:
        text = GOOD.replace('title = "Spring 2026"', 'title = "Spring 2026"\n' + change)
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert any(named in p for p in caught.value.problems), caught.value.problems
