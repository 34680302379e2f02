"""HELP: how to send orders (the game's ruleset's help text), to anyone who asks."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.mail.commands import READERS

register(
    Command(
        word="HELP",
        who=Who.ANYONE,
        read=READERS["HELP"],
        help="HELP               how to send orders (this text)",
        group="help",
    )
)
