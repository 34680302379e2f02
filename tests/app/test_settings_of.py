"""A game's settings for its ruleset (``lookup.settings_of``), kept with its row while the
row holds what they were made from (issue 23: made anew at every order, with the board's
JSON, 5.3 us against 2.0 kept), and made anew the moment any of it changes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sqlalchemy import select

from snl_pbem.app.lookup import settings_of
from snl_pbem.config import Config
from snl_pbem.store import Database, Game

BOARDS = Path(__file__).parents[2] / "snl_pbem" / "boards"


def test_a_games_settings_are_kept_and_follow_its_row(
    sqlite_intake: tuple[Database, Config],
) -> None:
    db, _ = sqlite_intake
    with db.transaction() as session:
        game = session.scalars(select(Game).where(Game.name == "g1")).one()
        first = settings_of(game)
        assert settings_of(game) is first
        assert first.seed == game.seed and first.double_from_round == game.double_from_round
        game.seed = game.seed + 1
        assert settings_of(game).seed == game.seed
        game.double_from_round = 9
        assert settings_of(game).double_from_round == 9
        game.trapdoor_rule = "none" if first.trapdoor_rule != "none" else "all"
        assert settings_of(game).trapdoor_rule == game.trapdoor_rule
        family = tomllib.loads((BOARDS / "family.toml").read_text())["board"]
        assert settings_of(game).board.last != 36
        game.board = family
        assert settings_of(game).board.last == 36
        game.options = {"x": 1}
        assert settings_of(game).options == {"x": 1}
        kept = settings_of(game)
        session.flush()
        session.expire(game)  # read again: other objects, the same values
        again = settings_of(game)
        assert again == kept and again is not kept
