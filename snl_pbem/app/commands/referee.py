"""The referee's commands, with the referee key: EXTEND, PAUSE, RESUME, CLOSE ROUND,
ROLLBACK, REPLACE, APPROVE, REFUSE, START (their help is the referee's reply,
templates/referee/reply.txt.j2)."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.mail.commands import READERS

for word, help_line in (
    ("EXTEND", "EXTEND g1 BY 2d    the deadline later (12h, 2d, 1w)"),
    ("PAUSE", "PAUSE g1           stop the clock"),
    ("RESUME", "RESUME g1          restart it"),
    ("CLOSE ROUND", "CLOSE ROUND g1     close the open round now"),
    ("ROLLBACK", "ROLLBACK g1        reopen the last closed round"),
    ("REPLACE", "REPLACE g1 Ann new@example.org   give Ann's seat to another address"),
    ("APPROVE", "APPROVE g1 Ann     seat a sign-up waiting for approval"),
    ("REFUSE", "REFUSE g1 Ann      turn a sign-up down (or take it off the standby list)"),
    ("START", "START g1           start a game"),
):
    register(
        Command(
            word=word,
            who=Who.REFEREE,
            read=READERS[word.split()[0]],
            help=help_line,
            group="referee",
        )
    )
