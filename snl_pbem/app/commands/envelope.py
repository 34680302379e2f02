"""GAME, KEY (PASSWORD) and ROUND: the lines that say which game, who, and which round a
message is for. The intake's pipeline uses them itself (no ``run``)."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.mail.commands import READERS

register(
    Command(
        word="GAME",
        who=Who.PLAYER,
        read=READERS["GAME"],
        help="GAME spring26      the game your lines are for",
        group="envelope",
    )
)
register(
    Command(
        word="KEY",
        aliases=("PASSWORD",),
        who=Who.PLAYER,
        read=READERS["KEY"],
        help="KEY (your key)     your order key (the referee: the referee key)",
        group="envelope",
    )
)
register(
    Command(
        word="ROUND",
        who=Who.PLAYER,
        read=READERS["ROUND"],
        help="ROUND 8            optional: if given, it must be the round now open",
        group="envelope",
    )
)
