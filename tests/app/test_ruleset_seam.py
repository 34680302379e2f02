"""The ruleset seam carries a whole game (issue 13): a toy ruleset that lives in the test
tree only is played through ``ingest`` and ``close_round``, on SQLite and PostgreSQL, with
its own acknowledgement, reports and referee summary, and no postal rule applied."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailhelpers import OPENED, T0
from sqlalchemy import select
from toyruleset import install

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.rounds import close_round
from snl_pbem.config import load_config
from snl_pbem.errors import ConfigError
from snl_pbem.store import Game, OutboxMessage, RoundTally

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


def mail_to(db, who: str, kind: str) -> list[str]:
    with db.transaction() as s:
        rows = s.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.recipient == who, OutboxMessage.kind == kind)
            .order_by(OutboxMessage.id)
        ).all()
        return [row.message.decode() for row in rows]


def test_a_toy_ruleset_plays_a_whole_game_through_ingest_and_close(db, tmp_path) -> None:
    install()
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, ruleset="toy"))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "t1", OPENED)

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
