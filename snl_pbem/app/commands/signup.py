"""Finding and joining a game, and following one: LIST, JOIN, CONFIRM, OBSERVE,
UNOBSERVE. Anyone may send them (no key); HELP lists them in this order."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.mail.commands import READERS

for word, help_line in (
    ("LIST", "LIST               the games here you can join or follow"),
    ("JOIN", 'JOIN spring26 Ann  ask for a seat as "Ann" (we mail you a code)'),
    ("CONFIRM", "CONFIRM abcd-efgh  send the code back, from the same address"),
    ("OBSERVE", "OBSERVE spring26   get each round's report without playing"),
    ("UNOBSERVE", "UNOBSERVE spring26 stop getting them"),
):
    register(Command(word=word, who=Who.ANYONE, read=READERS[word], help=help_line, group="signup"))
