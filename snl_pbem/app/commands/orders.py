"""The order words: each ruleset's own (``Ruleset.order_words``: postal DICE and TRAPDOOR,
classic ROLL), registered from the rulesets, and CLEAR, which takes back a round's orders
in every game."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register, register_order_words
from snl_pbem.mail.commands import READERS

register_order_words()
register(
    Command(
        word="CLEAR",
        who=Who.PLAYER,
        read=READERS["CLEAR"],
        help="CLEAR              withdraw this round's orders",
        group="orders",
    )
)
