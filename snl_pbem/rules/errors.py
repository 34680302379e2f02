"""The rules engine's errors: each message names the bad input and where it is."""

from __future__ import annotations

from collections.abc import Iterable


class RulesError(ValueError):
    """Base class of every error the rules engine raises."""


class BoardError(RulesError):
    """A board definition breaks R2/R3 as RULES.md reads them.

    ``problems`` lists every problem found, each naming its key path
    (``board.snakes.16``) and the spaces involved; ``str()`` joins them.
    """

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems: tuple[str, ...] = (
            (problems,) if isinstance(problems, str) else tuple(problems)
        )
        super().__init__("; ".join(self.problems))


class GameSetupError(RulesError):
    """A game's settings or inputs (players, rounds, options) cannot be played."""


class RulesetError(RulesError):
    """A ruleset broke the seam's contract (snl_pbem.rules.ruleset): a bug in that
    ruleset, named with what it did."""
