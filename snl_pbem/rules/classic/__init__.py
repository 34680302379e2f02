"""The classic, dice-rolled Snakes and Ladders (RULES-CLASSIC.md C1-C12), pure."""

from snl_pbem.rules.classic.game import (
    ClassicRound,
    ClassicState,
    Record,
    Throw,
    Throws,
    play_round,
    seeded_throws,
)
from snl_pbem.rules.classic.options import (
    OPTION_KEYS,
    ClassicOptions,
    Dice,
    Ending,
    EnterOn,
    Finish,
    ForfeitTo,
    MaxRoll,
    StartRule,
    board_problems,
    parse_options,
)

__all__ = [
    "OPTION_KEYS",
    "ClassicOptions",
    "ClassicRound",
    "ClassicState",
    "Dice",
    "Ending",
    "EnterOn",
    "Finish",
    "ForfeitTo",
    "MaxRoll",
    "Record",
    "StartRule",
    "Throw",
    "Throws",
    "board_problems",
    "parse_options",
    "play_round",
    "seeded_throws",
]
