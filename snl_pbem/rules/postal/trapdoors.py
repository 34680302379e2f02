"""Trapdoor nominations and the tally (R8, R9, R10, R16).

Each player nominates at most one space per round (R10: one nomination
serves both turns of a two-turn round). A player without a valid nomination
nominates the target space of their (first) move, before any snake, ladder or
trapdoor (R16); a target past the last space nominates nothing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import cast

from snl_pbem.rules.geometry import Position, Space


class TrapdoorRule(Enum):
    """Which spaces that reach the vote threshold become trapdoors."""

    ALL = "all"
    """Every space with enough votes (R8, R9): the postal rules as written."""
    MOST_VOTED = "most-voted"
    """A published variant: only the most-voted space, if it has enough votes;
    a tie between spaces is broken by lot from the game's seed."""


def vote_threshold(player_count: int) -> int:
    """Votes a space needs to become a trapdoor: 3, or 2 with eight players or fewer (R8, R9).

    Every registered player counts, whether or not they sent orders.
    """
    return 2 if player_count <= 8 else 3


def default_nomination(target: Position, last: Space) -> Space | None:
    """R16: the target space of the player's (first) move; past L, nothing."""
    return target if 1 <= target <= last else None


@dataclass(frozen=True, slots=True)
class Tally:
    """The result of one round's trapdoor vote."""

    votes: Mapping[Space, int]
    """Nominations per space (only spaces with at least one)."""
    threshold: int
    """Votes needed (R8, R9)."""
    active: tuple[Space, ...]
    """The round's active trapdoors, ascending."""
    by_lot: bool = False
    """True when the most-voted rule broke a tie by lot."""


def tally_trapdoors(
    nominations: Iterable[Space | None],
    player_count: int,
    rule: TrapdoorRule = TrapdoorRule.ALL,
    lot: random.Random | None = None,
) -> Tally:
    """Count one round's nominations and decide its trapdoors.

    ``lot`` breaks a most-voted tie; the caller seeds it so that the same game
    gives the same result every time.
    """
    counted = Counter(nominations)  # (in C: a round may have 100,000 players)
    del counted[None]  # (no nomination: R16's target past the last space)
    return decide_trapdoors(cast("Counter[Space]", counted), player_count, rule, lot)


def decide_trapdoors(
    votes: Mapping[Space, int],
    player_count: int,
    rule: TrapdoorRule = TrapdoorRule.ALL,
    lot: random.Random | None = None,
) -> Tally:
    """Decide one round's trapdoors from its votes: nominations per space, each space
    nominated at least once (what :func:`tally_trapdoors` counts)."""
    threshold = vote_threshold(player_count)
    reaching = sorted(s for s, n in votes.items() if n >= threshold)
    if rule is TrapdoorRule.ALL or len(reaching) <= 1:
        return Tally(dict(sorted(votes.items())), threshold, tuple(reaching))
    top = max(votes[s] for s in reaching)
    leaders = [s for s in reaching if votes[s] == top]
    if len(leaders) == 1:
        return Tally(dict(sorted(votes.items())), threshold, (leaders[0],))
    chooser = lot if lot is not None else random.Random(0)
    return Tally(dict(sorted(votes.items())), threshold, (chooser.choice(leaders),), True)
