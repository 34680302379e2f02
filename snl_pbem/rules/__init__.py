"""The rules of Postal Snakes and Ladders (RULES.md R1-R19), pure and deterministic.

Nothing here does I/O, logs, or reads a clock: everything else calls into it.
"""

from snl_pbem.rules.board import Board, Event, EventKind, Outcome
from snl_pbem.rules.errors import BoardError, GameSetupError, RulesError
from snl_pbem.rules.geometry import Family, Feature, FeatureKind, Layout, Position, Space
from snl_pbem.rules.outcome import GameResult, Move, PlayerId, TurnResult
from snl_pbem.rules.postal.dice import (
    DiceCheck,
    DiceProblem,
    DiceProblemKind,
    Die,
    check_dice,
    lowest_legal_dice,
    open_values,
    used_in_set,
)
from snl_pbem.rules.postal.game import (
    GameRules,
    Nmr,
    NmrCause,
    OrderSet,
    PlayerReport,
    PostalState,
    RoundResult,
    adjudicate_round,
    game_result,
    player_report,
)
from snl_pbem.rules.postal.trapdoors import (
    Tally,
    TrapdoorRule,
    default_nomination,
    tally_trapdoors,
    vote_threshold,
)

__all__ = [
    "Board",
    "BoardError",
    "DiceCheck",
    "DiceProblem",
    "DiceProblemKind",
    "Die",
    "Event",
    "EventKind",
    "Family",
    "Feature",
    "FeatureKind",
    "GameResult",
    "GameRules",
    "GameSetupError",
    "Layout",
    "Move",
    "Nmr",
    "NmrCause",
    "OrderSet",
    "Outcome",
    "PlayerId",
    "PlayerReport",
    "Position",
    "PostalState",
    "RoundResult",
    "RulesError",
    "Space",
    "Tally",
    "TrapdoorRule",
    "TurnResult",
    "adjudicate_round",
    "check_dice",
    "default_nomination",
    "game_result",
    "lowest_legal_dice",
    "open_values",
    "player_report",
    "tally_trapdoors",
    "used_in_set",
    "vote_threshold",
]

from snl_pbem.rules.classic.ruleset import CLASSIC
from snl_pbem.rules.postal.ruleset import POSTAL
from snl_pbem.rules.ruleset import register

register(POSTAL)
register(CLASSIC)
