"""A toy email command, in the test tree only, to show that a new command is one file
(as tests/toyruleset.py shows the ruleset seam): PING, sent by a player with their GAME
and KEY lines, read here, listed by HELP, and answered by its ``run`` (which the intake's
dispatcher calls)."""

from __future__ import annotations

from typing import Any

from snl_pbem.app.commands import Command, Who, register, unregister
from snl_pbem.mail.commands import Action, Builder, LineProblem

HELP_LINE = "PING               the referee answers PONG"


def read_ping(b: Builder, line: str, rest: str) -> None:
    """PING alone (or PING please); a sentence ("Ping me later") is chat, never a PING."""
    words = rest.strip(" .!").split()
    if not words or words == ["please"]:
        b.actions.append(Action("PING", (), line))
    elif len(words) == 1:
        b.problems.append(LineProblem(line, "PING takes nothing after it"))
    else:
        b.ignored.append(line)


def run(*args: Any, **kwargs: Any) -> str:
    """What PING does: the answer for the reply."""
    return "PONG"


PING = Command(word="PING", who=Who.PLAYER, read=read_ping, run=run, help=HELP_LINE, group="player")


def install() -> Command:
    """Register PING (idempotent)."""
    try:
        return register(PING)
    except ValueError:
        return PING


def uninstall() -> None:
    unregister("PING")
