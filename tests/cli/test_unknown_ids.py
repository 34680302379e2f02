"""Every command given an unknown game or message id says so in one line and exits 2:
never a traceback (issue 13; `snl-pbem start nosuch` once ended in a KeyError)."""

from __future__ import annotations

import pytest

from snl_pbem.cli.main import main

GAME_COMMANDS = [
    ("start", "nosuch"),
    ("status", "nosuch"),
    ("close-round", "nosuch"),
    ("extend", "nosuch", "--by", "1d"),
    ("pause", "nosuch"),
    ("resume", "nosuch"),
    ("rollback", "nosuch"),
    ("outbox", "list", "--game", "nosuch"),
]
MESSAGE_COMMANDS = [
    (("inbound", "show", "999"), "inbound 999: no such message"),
    (("inbound", "retry", "999"), "inbound 999: no such message"),
    (("outbox", "show", "999"), "outbox 999: no such message"),
    (("outbox", "retry", "999"), "outbox 999: no such message"),
]


@pytest.fixture
def started(make_config, capsys):
    config = make_config()
    cfg = ("--config", str(config.path))
    assert main(["db", "upgrade", *cfg]) == 0
    assert main(["start", "g1", *cfg]) == 0
    capsys.readouterr()
    return cfg


def one_line_error(capsys, argv) -> str:
    code = main(list(argv))
    _out, err = capsys.readouterr()
    assert code == 2, (argv, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv", GAME_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_unknown_game_is_named_with_the_games_there_are(started, capsys, argv) -> None:
    err = one_line_error(capsys, [*argv, *started])
    assert "no game 'nosuch'" in err and "(games: g1)" in err, err


@pytest.mark.parametrize(("argv", "said"), MESSAGE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_unknown_message_is_named(started, capsys, argv, said) -> None:
    err = one_line_error(capsys, [*argv, *started])
    assert said in err, err


def test_board_of_an_unknown_game_in_a_config(make_config, capsys) -> None:
    config = make_config()
    err = one_line_error(capsys, ["board", str(config.path), "--game", "nosuch"])
    assert "nosuch" in err, err
