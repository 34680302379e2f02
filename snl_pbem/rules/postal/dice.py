"""Chosen dice (R6, R17, R18): sets of six, legal values, and the referee's defaults.

A player's dice are kept as the tuple of every value played so far, in turn
order. Turn t belongs to set (t - 1) // 6; within a set every value 1..6 is
used exactly once (R6). Every player plays every turn, so all players share
turn numbers and the next turn of a player who has played n dice is n + 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import TypeAlias

from snl_pbem.rules.words import Text, ntr, rereader, tr

Die: TypeAlias = int
"""A chosen die value, 1..6 when legal."""

SET_SIZE = 6
DIE_VALUES: tuple[Die, ...] = (1, 2, 3, 4, 5, 6)


def used_in_set(played: Sequence[Die]) -> tuple[Die, ...]:
    """The values already used in the set the player's next turn belongs to."""
    return tuple(played[len(played) - len(played) % SET_SIZE :])


def open_values(played: Sequence[Die]) -> tuple[Die, ...]:
    """The values still open for the player's next turn, lowest first (R6)."""
    used = used_in_set(played)
    return tuple(v for v in DIE_VALUES if v not in used)


class DiceProblemKind(Enum):
    """Why an order's dice break R6 (and so count as no orders, R18)."""

    WRONG_COUNT = "wrong-count"
    """Not exactly one die per turn of the round."""
    NOT_A_DIE = "not-a-die"
    """A value outside 1..6."""
    ALREADY_USED = "already-used"
    """A value used earlier in the same set."""
    REPEATED = "repeated"
    """The same value twice within one set in this order."""


@dataclass(frozen=True, slots=True)
class DiceProblem:
    """One thing wrong with an order's dice, in words a player understands."""

    kind: DiceProblemKind
    value: int | None = None
    """The offending die value (None for WRONG_COUNT)."""
    index: int | None = None
    """Which die of the order, from 0 (None for WRONG_COUNT)."""
    expected: int | None = None
    """For WRONG_COUNT: how many dice the round needs."""
    open: tuple[Die, ...] = ()
    """The values that were still open at that turn."""

    def __str__(self) -> str:
        return str.__str__(self.text())  # English (the log, the store, the referee)

    def text(self) -> Text:
        """The problem in words, shown in the reader's language in a mail."""
        return _text(self)

    @classmethod
    def from_text(cls, kept: str) -> DiceProblem | None:
        """The problem whose English (as stored with the orders) ``kept`` is; None when it
        is none of them (only the index is lost: the English does not say it)."""
        found = _WRONG_COUNT.fullmatch(kept)
        if found:
            return cls(DiceProblemKind.WRONG_COUNT, value=int(found[2]), expected=int(found[1]))
        found = _NOT_A_DIE.fullmatch(kept)
        if found:
            return cls(DiceProblemKind.NOT_A_DIE, int(found[1]))
        found = _ALREADY_USED.fullmatch(kept)
        if found:
            left = () if found[2] == "none" else tuple(map(int, found[2].split(", ")))
            return cls(DiceProblemKind.ALREADY_USED, int(found[1]), open=left)
        found = _REPEATED.fullmatch(kept)
        if found:
            return cls(DiceProblemKind.REPEATED, int(found[1]))
        return None


@lru_cache(maxsize=1024)  # (the same few problems come again and again)
def _text(problem: DiceProblem) -> Text:
    """:meth:`DiceProblem.text`: each problem's words made once."""
    if problem.kind is DiceProblemKind.WRONG_COUNT:
        return ntr(
            "this round needs {n} die, one per turn; {given} given",
            "this round needs {n} dice, one per turn; {given} given",
            problem.expected or 0,
            given=problem.value,
        )
    if problem.kind is DiceProblemKind.NOT_A_DIE:
        return tr("{value} is not a die value (1 to 6)", value=problem.value)
    if problem.kind is DiceProblemKind.ALREADY_USED:
        left = ", ".join(map(str, problem.open)) if problem.open else tr("none")
        return tr(
            "{value} is already used in this set of six (still open: {left})",
            value=problem.value,
            left=left,
        )
    return tr(
        "{value} is given twice in one set of six (each value once per set)",
        value=problem.value,
    )


_WRONG_COUNT = re.compile(r"this round needs (\d+) (?:die|dice), one per turn; (\d+) given")
_NOT_A_DIE = re.compile(r"(-?\d+) is not a die value \(1 to 6\)")
_ALREADY_USED = re.compile(
    r"(-?\d+) is already used in this set of six \(still open: (none|\d(?:, \d)*)\)"
)
_REPEATED = re.compile(r"(-?\d+) is given twice in one set of six \(each value once per set\)")


@rereader
def _reread(kept: str) -> Text | None:
    """A dice problem stored as its English, in words again (snl_pbem.rules.words)."""
    problem = DiceProblem.from_text(kept)
    return problem.text() if problem is not None else None


@dataclass(frozen=True, slots=True)
class DiceCheck:
    """The verdict on an order's dice (R6, R18): valid, or every problem found."""

    dice: tuple[int, ...]
    problems: tuple[DiceProblem, ...]

    @property
    def valid(self) -> bool:
        return not self.problems


def check_dice(played: Sequence[Die], dice: Sequence[int], turns: int) -> DiceCheck:
    """Check an order's dice for a round of ``turns`` turns (R6, R18).

    Invalid: the wrong number of dice, a value outside 1..6, a value already
    used in the current set, or the same value twice within one set. A
    two-turn round may straddle a set boundary: then the first die must be
    the last open value of the old set and the second is free in the new set,
    so ``5 5`` can be legal (RULES.md example 5).
    """
    return _check(used_in_set(played), tuple(dice), turns)


@lru_cache(maxsize=8192)
def _check(used: tuple[Die, ...], dice: tuple[int, ...], turns: int) -> DiceCheck:
    problems: list[DiceProblem] = []
    if len(dice) != turns:
        problems.append(DiceProblem(DiceProblemKind.WRONG_COUNT, value=len(dice), expected=turns))
    in_set = set(used)
    before: set[int] = set(used)  # the set as it stood before this order (what is open)
    from_order: set[int] = set()
    for index, value in enumerate(dice):
        if len(in_set) == SET_SIZE:  # this turn opens a new set
            in_set, before, from_order = set(), set(), set()
        still_open = tuple(v for v in DIE_VALUES if v not in before)
        if value not in DIE_VALUES:
            problems.append(DiceProblem(DiceProblemKind.NOT_A_DIE, value, index))
            continue  # an impossible value does not use up a turn's slot
        if value in in_set:
            kind = DiceProblemKind.REPEATED if value in from_order else DiceProblemKind.ALREADY_USED
            problems.append(DiceProblem(kind, value, index, open=still_open))
            continue
        in_set.add(value)
        from_order.add(value)
    return DiceCheck(dice, tuple(problems))


def lowest_legal_dice(played: Sequence[Die], turns: int) -> tuple[Die, ...]:
    """The referee's move for a player without valid orders (R17).

    Each turn takes the lowest value still open in its set; a turn that opens
    a new set takes 1.
    """
    return _lowest(used_in_set(played), turns)


@lru_cache(maxsize=1024)
def _lowest(used: tuple[Die, ...], turns: int) -> tuple[Die, ...]:
    in_set = set(used)
    chosen = []
    for _ in range(turns):
        if len(in_set) == SET_SIZE:
            in_set = set()
        value = min(v for v in DIE_VALUES if v not in in_set)
        in_set.add(value)
        chosen.append(value)
    return tuple(chosen)
