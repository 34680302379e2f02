"""STATUS: a player's position and their own dice; the referee's private view of games."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.mail.commands import READERS

register(
    Command(
        word="STATUS",
        who=Who.PLAYER,
        read=READERS["STATUS"],
        help="STATUS             your position and your dice (the referee: every game's)",
        group="status",
    )
)
