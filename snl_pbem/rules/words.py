"""English counts for people: "1 snake", "0 snakes", "2 snakes".

Every count a person reads (mail, command output, a message naming a problem) takes its
noun, or a verb that agrees with it, from here; the templates have the same two as the
filters ``counted`` and ``agree``. One place, so that a move to gettext's plural forms
(ngettext) changes only this module. It sits in ``rules``, the innermost layer, so that
every other layer, the rules engine's own messages included, may use it.
"""

from __future__ import annotations


def agree(count: float, singular: str, plural: str | None = None) -> str:
    """The word that agrees with ``count``: ``singular`` for exactly 1, else ``plural``
    (default: ``singular`` + "s"). Also for verbs: ``agree(n, "was", "were")``."""
    if count == 1:
        return singular
    return plural if plural is not None else singular + "s"


def counted(count: float, singular: str, plural: str | None = None) -> str:
    """``count`` and its noun: ``counted(1, "snake")`` is "1 snake", ``counted(0, "die",
    "dice")`` is "0 dice"."""
    return f"{count} {agree(count, singular, plural)}"
