"""Shared helpers for the test suite."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from snl_pbem.app.lookup import settings_of
from snl_pbem.rules import Board, GameRules, PostalState
from snl_pbem.rules.geometry import Position
from snl_pbem.rules.postal.ruleset import POSTAL
from snl_pbem.store import Game


def plain_board(**kwargs: object) -> Board:
    """A 10x10 boustrophedon board with only the features given."""
    return Board.build(**kwargs)  # type: ignore[arg-type]


def state_at(
    positions: Mapping[str, Position],
    played: Mapping[str, Sequence[int]] | None = None,
    rounds_played: int = 0,
) -> PostalState:
    """A game part-way through: players at ``positions`` having played ``played``."""
    names = tuple(positions)
    played = played or {}
    history = {n: tuple(played.get(n, ())) for n in names}
    turns = max((len(v) for v in history.values()), default=0)
    return PostalState(names, dict(positions), history, rounds_played, turns)


def rules_for(board: Board, **kwargs: object) -> GameRules:
    return GameRules(board, **kwargs)  # type: ignore[arg-type]


def game_rules(game: Game) -> GameRules:
    """The postal rules object of a stored postal game, to replay it offline."""
    return POSTAL.rules(settings_of(game))
