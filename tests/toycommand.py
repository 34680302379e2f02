"""A toy email command, in the test tree only, to show that a new command is one file
(as tests/toyruleset.py shows the ruleset seam): PING, sent by a player with their GAME
and KEY lines, read here, listed by HELP, and answered by its ``run`` (which the intake's
dispatcher calls)."""

from __future__ import annotations

from snl_pbem.app.commands import Command, Who, register, unregister
from snl_pbem.app.commands.answers import player_reply
from snl_pbem.app.replies import Context
from snl_pbem.mail.commands import Action, Builder, LineProblem
from snl_pbem.store import Game, Player

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


def run(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """What PING does: a reply to the player (the mail every player's command may send,
    with the player's notice template), and the intake's note of it."""
    player_reply(ctx, game, player, "PONG")
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
