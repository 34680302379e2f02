"""The ruleset seam carries a whole game (issue 13): a toy ruleset that lives in the test
tree only is played through ``ingest`` and ``close_round``, on SQLite and PostgreSQL, with
its own acknowledgement, reports and referee summary, and no postal rule applied."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailhelpers import OPENED, T0, mail_to
from sqlalchemy import select
from toyruleset import install

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.rounds import close_round
from snl_pbem.cli.main import main
from snl_pbem.config import load_config
from snl_pbem.errors import ConfigError
from snl_pbem.rules.errors import RulesetError
from snl_pbem.store import Game, RoundTally

CONFIG = """
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "t1"
ruleset = "{ruleset}"
board = {{ rows = 1, columns = 4 }}
first_deadline = "2030-01-04T18:00"
round_length = "1d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""


def orders(tag: str, body: str = "KEY ann-key-123\nDICE 6") -> bytes:
    return (
        "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [t1] orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()


def test_a_toy_ruleset_plays_a_whole_game_through_ingest_and_close(db, tmp_path) -> None:
    install()
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, ruleset="toy"))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "t1", OPENED)
    [welcome] = mail_to(db, "ann@example.org", "welcome")
    assert "A toy game for 2 players" in welcome and "ann-key-123" in welcome
    for postal in ("set of six", "TRAPDOOR", "trapdoor", "Postal"):  # the toy's own text
        assert postal not in welcome, postal

    # round 1: ann sends orders (the toy ruleset refuses her TRAPDOOR line), bob does not
    result = ingest(db, config, orders("r1", "KEY ann-key-123\nDICE 6\nTRAPDOOR 3"), T0, "t")
    assert (result.status, result.detail) == ("processed", "orders for round 1 (valid)")
    [ack] = mail_to(db, "ann@example.org", "ack")
    assert "With them you move 2 (without, 1)." in ack
    assert '"TRAPDOOR 3": the toy game has no trapdoors' in ack
    assert "set of six" not in ack  # no postal wording

    first = close_round(db, "t1", T0 + timedelta(days=40), config=config)
    assert first is not None and first.result == "toy"
    assert dict(first.adjudication.positions) == {"ann": 2, "bob": 1}
    assert dict(first.adjudication.nmr) == {"bob": "no orders: moved 1"}
    [report] = mail_to(db, "bob@example.org", "report")
    assert "Round 1 report (toy)" in report and "Send orders to move 2." in report
    [summary] = mail_to(db, "ref@example.org", "referee-summary")
    assert "ann: 0 -> 2" in summary and "bob (no orders: moved 1)" in summary

    # the status reply and the help are the toy's too
    ingest(db, config, orders("st", "KEY ann-key-123\nSTATUS"), T0 + timedelta(days=40), "t")
    [status] = mail_to(db, "ann@example.org", "status")
    assert "you stand on 2; orders move you 2" in status and "set of six" not in status
    ingest(db, config, orders("hp", "HELP"), T0 + timedelta(days=40), "t")
    [help_text] = mail_to(db, "ann@example.org", "guest-help")
    assert "Toy game help" in help_text and "TRAPDOOR" not in help_text

    # round 2: ann again, and reaches the last space (4) first
    ingest(db, config, orders("r2"), T0 + timedelta(days=40, hours=1), "t")
    second = close_round(db, "t1", T0 + timedelta(days=80), config=config)
    assert second is not None and second.next_round is None
    assert second.adjudication.result is not None
    assert second.adjudication.result.winners == ("ann",)
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "t1"))
        assert (game.ruleset, game.state, game.result) == ("toy", "over", {"winner": "ann"})
        assert (game.rounds_played, game.turns_played) == (2, 2)
        tallies = s.scalars(select(RoundTally).order_by(RoundTally.id)).all()
        assert [t.trapdoors for t in tallies] == [[], []]  # the toy ruleset has none
    assert "game over" in mail_to(db, "bob@example.org", "game-over")[0].lower()


def test_an_unknown_ruleset_is_a_config_error_naming_the_key(tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url="sqlite:///x.db", ruleset="chess"))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    text = str(error.value)
    assert "ruleset" in text and "'chess'" in text and '"postal"' in text, text


def test_a_ruleset_view_naming_a_server_value_is_refused_by_name(db, tmp_path, monkeypatch):
    """A ruleset whose view sets a value the server sets too (here ``round``) is a bug in
    the ruleset: the mail is refused naming the value, never rendered with either one."""
    toy = install()
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, ruleset="toy"))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "t1", OPENED)
    monkeypatch.setattr(toy, "player_view", lambda *_args: {"steps": 2, "round": "mine"})
    with pytest.raises(RulesetError) as error:
        close_round(db, "t1", T0 + timedelta(days=40), config=config)
    assert "ruleset 'toy'" in str(error.value) and "round" in str(error.value)
    with db.transaction() as s:  # the close did not happen: nothing half-done
        assert s.scalar(select(Game.rounds_played).where(Game.name == "t1")) == 0


def test_the_board_command_prints_the_rulesets_own_notes(tmp_path, capsys) -> None:
    install()
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url="sqlite:///x.db", ruleset="toy"))
    assert main(["board", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Toy game: 4 rounds at most" in out and "No orders (R17)" not in out
    path.write_text(CONFIG.format(url="sqlite:///x.db", ruleset="postal"))
    assert main(["board", str(path)]) == 0
    assert "No orders (R17): a player who never writes plays" in capsys.readouterr().out
