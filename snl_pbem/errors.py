"""The errors a user is told about, under one base class.

Each is reported by the command line in one line (or a few) on stderr with exit status 2
(``snl_pbem.cli.main``); none is a crash. The rules engine keeps its own ``RulesError``
(``snl_pbem.rules.errors``): the rules import nothing of ours outside ``rules``.
"""

from __future__ import annotations

from collections.abc import Iterable


class SnlError(Exception):
    """A problem to report to the person who ran the command, not a bug."""


class CommandError(SnlError):
    """A command given something it cannot do (a bad argument, a state that forbids it)."""


class NotFound(CommandError, LookupError):
    """No such game, round or message. Its text names what was asked for and what exists."""

    def __str__(self) -> str:  # not KeyError's quoted repr
        return str(self.args[0]) if self.args else "not found"


class ConfigError(SnlError):
    """The config cannot be used; ``problems`` holds one line per problem, each naming
    the key and the fix."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class LifecycleError(SnlError):
    """A referee command that cannot be carried out; the message says why and what to do."""


class ReplayError(SnlError, ValueError):
    """A replay (or board) file that cannot be read; the message is one line for a person."""


class StartupError(SnlError):
    """The server cannot start: a bad config or an out-of-date database."""


def no_such_game(game_name: str, known: list[str], where: str = "") -> NotFound:
    """The one wording of an unknown game id."""
    listed = ", ".join(known) or "none"
    place = f" in {where}" if where else ""
    return NotFound(f"no game {game_name!r}{place} (games: {listed})")


def said(exc: BaseException) -> str:
    """What ``exc`` says, as it was written: a ``Text`` stays Text (shown in the reader's
    language when a mail puts it in a sentence), where ``str(exc)`` is English for good."""
    first = exc.args[0] if exc.args else None
    return first if isinstance(first, str) else str(exc)
