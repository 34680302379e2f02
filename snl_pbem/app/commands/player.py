"""A seated player's own affairs, with their GAME and KEY lines: HISTORY, ABSENT,
NEW KEY, ADDRESS, RESIGN (HELP lists them in this order)."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.mail.commands import READERS

for word, help_lines in (
    ("HISTORY", ("HISTORY            everyone's position after each round so far",)),
    (
        "ABSENT",
        (
            "ABSENT UNTIL 2026-12-24   away: no reminders, and rounds you miss",
            "                   are not held against you (ABSENT OFF when back)",
        ),
    ),
    ("NEW KEY", ("NEW KEY            a new order key to your address; the old one stops",)),
    (
        "ADDRESS",
        (
            "ADDRESS ann@new.example   move your mail (we mail a code there; send it",
            "                   back from there with CONFIRM, GAME and KEY)",
        ),
    ),
    ("RESIGN", ("RESIGN             leave the game (we ask you to confirm)",)),
):
    register(
        Command(
            word=word,
            who=Who.PLAYER,
            read=READERS[word.split()[0]],
            help="\n".join(help_lines),
            group="player",
        )
    )
