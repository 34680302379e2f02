"""The classic game's options (RULES-CLASSIC.md, "Options and their defaults"), read and
checked: each problem names its key, and the one bad combination names both keys."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from snl_pbem.rules.board import Board
from snl_pbem.rules.errors import GameSetupError

MAX_DICE = 4
SIDES = range(2, 21)
_DICE = re.compile(r"^([0-9]+)d([0-9]+)$")


class StartRule(StrEnum):
    NONE = "none"
    MAX_TO_ENTER = "max_to_enter"
    """C5: a piece on space 0 must throw a maximum to enter."""


class EnterOn(StrEnum):
    ROLL_AGAIN = "roll_again"
    """C5: after the qualifying throw the player throws again and moves by it."""
    SQUARE1 = "square1"
    """C5: the piece is placed on space 1 (and C3 acts there); the turn ends."""


class MaxRoll(StrEnum):
    NOTHING = "nothing"
    ROLL_AGAIN = "roll_again"
    FORFEIT_AFTER_THREE = "forfeit_after_three"
    """C6: throw again, but the third maximum in a row in one turn forfeits."""


class ForfeitTo(StrEnum):
    START = "start"
    SQUARE1 = "square1"


class Ending(StrEnum):
    CLOSE_ENOUGH = "close_enough"
    EXACT = "exact"
    BOUNCE_BACK = "bounce_back"


class Finish(StrEnum):
    FIRST = "first"
    ALL = "all"


@dataclass(frozen=True)
class Dice:
    """N dice of S sides (C11 throws them; a throw is a maximum when every die shows S)."""

    count: int = 1
    sides: int = 6

    def __str__(self) -> str:
        return f"{self.count}d{self.sides}"

    def is_maximum(self, throw: tuple[int, ...]) -> bool:
        return all(die == self.sides for die in throw)

    @classmethod
    def parse(cls, value: object, where: str = "dice") -> Dice:
        match = _DICE.match(value) if isinstance(value, str) else None
        count, sides = (int(match[1]), int(match[2])) if match else (0, 0)
        if not 1 <= count <= MAX_DICE or sides not in SIDES:
            raise GameSetupError(
                f'{where}: {value!r} is not "NdS" with 1 to {MAX_DICE} dice of '
                f'{SIDES.start} to {SIDES.stop - 1} sides (for example "1d6" or "2d6")'
            )
        return cls(count, sides)


@dataclass(frozen=True)
class ClassicOptions:
    """Every option of the table, with its default."""

    dice: Dice = field(default_factory=Dice)
    start_rule: StartRule = StartRule.NONE
    enter_on: EnterOn = EnterOn.ROLL_AGAIN
    max_roll: MaxRoll = MaxRoll.NOTHING
    forfeit_to: ForfeitTo = ForfeitTo.START
    reenter_needs_max: bool = False
    ending: Ending = Ending.CLOSE_ENOUGH
    chain: bool = False
    bump: bool = False
    finish: Finish = Finish.FIRST

    def __post_init__(self) -> None:
        if self.reenter_needs_max and (
            self.max_roll is not MaxRoll.FORFEIT_AFTER_THREE
            or self.forfeit_to is not ForfeitTo.START
        ):
            raise GameSetupError(
                'reenter_needs_max: true needs max_roll = "forfeit_after_three" and '
                f'forfeit_to = "start" (they are {self.max_roll.value!r} and '
                f"{self.forfeit_to.value!r}): the Draconian re-entry follows a forfeit "
                "to the start"
            )

    def as_mapping(self) -> dict[str, Any]:
        """The options as a config or replay file writes them."""
        return {
            "dice": str(self.dice),
            "start_rule": self.start_rule.value,
            "enter_on": self.enter_on.value,
            "max_roll": self.max_roll.value,
            "forfeit_to": self.forfeit_to.value,
            "reenter_needs_max": self.reenter_needs_max,
            "ending": self.ending.value,
            "chain": self.chain,
            "bump": self.bump,
            "finish": self.finish.value,
        }


_CHOICES: dict[str, type[StrEnum]] = {
    "start_rule": StartRule,
    "enter_on": EnterOn,
    "max_roll": MaxRoll,
    "forfeit_to": ForfeitTo,
    "ending": Ending,
    "finish": Finish,
}
_FLAGS = ("reenter_needs_max", "chain", "bump")
OPTION_KEYS = ("dice", *_CHOICES, *_FLAGS)


def parse_options(data: Mapping[str, Any], prefix: str = "") -> ClassicOptions:
    """The options among ``data``'s keys (others are left alone); a missing one takes its
    default. ``prefix`` goes before every key named in an error (``games[0].``)."""
    values: dict[str, Any] = {}
    if "dice" in data:
        values["dice"] = Dice.parse(data["dice"], f"{prefix}dice")
    for key, choice in _CHOICES.items():
        if key in data:
            try:
                values[key] = choice(data[key])
            except ValueError:
                allowed = ", ".join(f'"{c.value}"' for c in choice)
                raise GameSetupError(
                    f"{prefix}{key}: {data[key]!r} is not one of {allowed}"
                ) from None
    for key in _FLAGS:
        if key in data:
            if not isinstance(data[key], bool):
                raise GameSetupError(f"{prefix}{key}: {data[key]!r} is not true or false")
            values[key] = data[key]
    try:
        return ClassicOptions(**values)
    except GameSetupError as exc:
        raise GameSetupError(f"{prefix}{exc}") from None


def board_problems(board: Board) -> list[str]:
    """C4: a classic board has no snake or ladder on its last space L, and nothing leads
    past L (a ladder to L finishes)."""
    problems = []
    for feature in board.features:
        if feature.space == board.last:
            problems.append(
                f"{feature}: a classic board has no snake or ladder on its last space "
                f"{board.last} (C4)"
            )
        elif feature.destination > board.last:
            problems.append(
                f"{feature}: leads past the last space {board.last}; a classic board's "
                f"ladders end on it at most (C4)"
            )
    return problems
