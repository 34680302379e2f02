"""The command registry: every email word once, with who may send it, how its line is
read, what it does, and its line of help (issue 22, after GNU Mailman 3's commands).

A command is one :class:`Command`, registered once by the module of its group
(envelope.py, orders.py, status.py, help.py, signup.py, player.py, referee.py in this
package); the order words come from the rulesets (``Ruleset.order_words``), so a new
ruleset adds its words in its own file. The sandbox reads each message with the order
language's own table (mail/commands.py READERS); the app reads the kept lines again with
this registry's (:func:`read`), so a command registered here is read without a change in
``snl_pbem.mail``. ``run`` is what the command does, called by the intake's dispatcher.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any

from snl_pbem.mail.commands import READERS, Commands, Reader, read_commands
from snl_pbem.mail.parse import ParsedMail
from snl_pbem.rules.ruleset import get_ruleset, ruleset_names

Run = Callable[..., Any]
"""What a command does, called by its dispatcher. A command read into an ``Action``
runs by who may send it, and returns the intake's note of what it did:
- Who.ANYONE: ``run(ctx, action, address, player | None) -> str`` (commands/signup.py
  ``handle_open``; with a player's key, ``commands/player.py handle_keyed``);
- Who.PLAYER: ``run(ctx, game, player, action) -> str`` (``handle_keyed``);
- Who.REFEREE: ``run(ctx, action, game, actor) -> str``, or LifecycleError/NotFound
  saying why not (commands/referee.py ``handle_referee_mail``).
The words read as flags of the whole message are run by the intake's commands step as
``run(ctx, game, player, other_sender)``: HELP (game and player may be None) and STATUS
return None; CLEAR's run is the whole order set's (the order words have none of their own:
they are read into one set) and returns (status, detail)."""


class Who(Enum):
    """Who may send a command."""

    ANYONE = "anyone"
    """No key needed (HELP, LIST, JOIN...)."""
    PLAYER = "player"
    """A player, with their GAME and KEY lines."""
    REFEREE = "referee"
    """The game's referee, with the referee key."""


@dataclass(frozen=True, kw_only=True)
class Command:
    """One email command. See the module's docstring."""

    word: str
    """The command as written in help: "LIST", "NEW KEY", "CLOSE ROUND", "DICE"."""
    first: str = ""
    """The first word of its line, which the reading table is keyed by ("NEW", "CLOSE");
    "" means the word's own first word."""
    aliases: tuple[str, ...] = ()
    """Other first words read as it (DIE for DICE, PASSWORD for KEY)."""
    who: Who
    read: Reader
    """How its line is read (see snl_pbem.mail.commands.Reader)."""
    run: Run | None = None
    """What it does (see ``Run``); None for the words the intake's pipeline uses itself
    (GAME, KEY, ROUND) and for the rulesets' order words (read into one order set)."""
    help: str
    """Its line of help, as HELP prints it ('LIST               the games here you can
    join or follow'); a long one goes on, indented, on the lines after."""
    rulesets: frozenset[str] | None = None
    """The rulesets whose orders use it; None: it is a command in every game."""
    group: str = ""
    """Which of this package's modules registers it (envelope, orders, status, help,
    signup, player, referee): HELP lists a group together."""

    def __post_init__(self) -> None:
        if not self.first:
            object.__setattr__(self, "first", self.word.split()[0])

    @property
    def firsts(self) -> tuple[str, ...]:
        """Every first word read as this command."""
        return (self.first, *self.aliases)


GROUPS = ("envelope", "orders", "status", "help", "signup", "player", "referee")
"""Help order: group by group (another group after these), each in the order registered."""
_COMMANDS: dict[str, Command] = {}
"""Word to command, in the order registered."""
_ORDER_WORDS_OF: set[str] = set()
"""The rulesets whose order words are registered."""
_ORDER_WORDS_LOCK = threading.Lock()
"""Held while the rulesets' words are registered: the readers' threads look words up."""


def register(command: Command) -> Command:
    """Add a command; ValueError when its word, or a first word it is read by, is taken."""
    if command.word in _COMMANDS:
        raise ValueError(f"the command {command.word} is registered twice")
    taken = {first for c in _COMMANDS.values() for first in c.firsts}
    clash = taken.intersection(command.firsts)
    if clash:
        raise ValueError(f"{command.word}: a line beginning {sorted(clash)} is read already")
    _COMMANDS[command.word] = command
    _changed()
    return command


def unregister(word: str) -> Command:
    """Take a command out (a test's own); KeyError when it is not registered."""
    command = _COMMANDS.pop(word)
    _changed()
    return command


_VERSION = [0]
"""Bumped at every change of the commands (``_changed``)."""
_TABLE: list[tuple[int, Mapping[str, Reader], bool]] = []
"""``reading_table``'s table, the version it was made of, and whether it is READERS (the
sandbox's: ``read``): made once while no command changes, as every message read in a batch
asks for it (issue 23)."""


_CHOSEN: dict[tuple[int, Who | None, str | None, str | None], tuple[Command, ...]] = {}
"""``commands``' answers, by the version they were chosen from: the intake asks for the
order words at every message (2.9 us a time to choose them anew, 0.6 kept; issue 23)."""


def _changed() -> None:
    _VERSION[0] += 1
    _CHOSEN.clear()


def register_order_words() -> None:
    """Register the order words of every ruleset known, once each: a word that several
    rulesets use (DICE) is one command, naming them all. A word the order language does
    not read (mail/commands.py READERS) is refused: its reader must be written first."""
    if _ORDER_WORDS_OF.issuperset(ruleset_names()):
        return  # the usual case: no lock taken
    with _ORDER_WORDS_LOCK:
        for name in ruleset_names():
            if name not in _ORDER_WORDS_OF:
                _ORDER_WORDS_OF.add(name)
                _register_words_of(name)


def _register_words_of(name: str) -> None:
    for order in get_ruleset(name).order_words:
        known = _COMMANDS.get(order.word)
        if known is not None and known.group == "orders" and known.rulesets is not None:
            _COMMANDS[order.word] = replace(known, rulesets=known.rulesets | {name})
            _changed()
            continue
        if order.word not in READERS:
            raise ValueError(
                f"ruleset {name}: the order language reads no line beginning {order.word} "
                "(add its reader to snl_pbem/mail/commands.py READERS)"
            )
        register(
            Command(
                word=order.word,
                aliases=order.aliases,
                who=Who.PLAYER,
                read=READERS[order.word],
                help=order.help,
                rulesets=frozenset({name}),
                group="orders",
            )
        )


def lookup(word: str) -> Command | None:
    """The command called ``word`` ("NEW KEY") or read from a line beginning ``word``
    ("NEW", "DIE"), in any case; None when there is none."""
    register_order_words()
    word = " ".join(word.upper().split())
    if word in _COMMANDS:
        return _COMMANDS[word]
    return next((c for c in _COMMANDS.values() if word in c.firsts), None)


def commands(
    who: Who | None = None, ruleset: str | None = None, group: str | None = None
) -> tuple[Command, ...]:
    """The commands in help order: those ``who`` may send, those of a game of ``ruleset``
    (the commands of every game and its ruleset's order words), of ``group``; None: all."""
    register_order_words()
    key = (_VERSION[0], who, ruleset, group)
    found = _CHOSEN.get(key)
    if found is not None:
        return found
    chosen = [
        c
        for c in _COMMANDS.values()
        if (who is None or c.who is who)
        and (ruleset is None or c.rulesets is None or ruleset in c.rulesets)
        and (group is None or c.group == group)
    ]
    rank = {name: i for i, name in enumerate(GROUPS)}
    found = _CHOSEN[key] = tuple(sorted(chosen, key=lambda c: rank.get(c.group, len(GROUPS))))
    return found


def reading_table() -> Mapping[str, Reader]:
    """Each first word (aliases too) and its reader: the table for
    :func:`snl_pbem.mail.commands.read_commands`."""
    return _made()[0]


def _made() -> tuple[Mapping[str, Reader], bool]:
    """The reading table, and whether it is READERS: the same words, each to the same
    reader."""
    register_order_words()  # (may change the commands: before the table is looked at)
    version = _VERSION[0]  # read first: a change while the table is made makes it stale
    made = _TABLE[:1]
    if made and made[0][0] == version:
        return made[0][1], made[0][2]
    table = MappingProxyType({first: c.read for c in commands() for first in c.firsts})
    sandboxs = dict(table) == dict(READERS)
    _TABLE[:] = [(version, table, sandboxs)]
    return table, sandboxs


def read(mail: ParsedMail) -> Commands:
    """A parsed mail's commands, read with the registry from the lines the sandbox kept
    (``mail.lines``: at most 50). The sandbox read them with READERS
    (``snl_pbem.mail.parse.parse_message``, for the keys to redact): while the registry's
    table is that one (its words, each to the same reader), its reading is the registry's
    and is not made again (issue 23: an order's lines read again took 18 us alone, and 7%
    of the readers' time through Dovecot by py-spy's samples). A robot's mail has none."""
    if mail.commands is None:
        return read_commands((), 0, None)
    table, sandboxs = _made()
    if sandboxs:
        return mail.commands
    return read_commands(mail.lines, mail.dropped, mail.cut, mail.subject, table)


def help_lines(group: str) -> tuple[str, ...]:
    """The help of a group's commands, line by line, in help order (HELP's text:
    templates/player/more_commands.txt.j2 calls it as ``command_help``), in the language of
    the mail being written (a command's help may be ``Text``)."""
    return tuple(line for c in commands(group=group) for line in str(c.help).split("\n"))


__all__ = [
    "Command",
    "Run",
    "Who",
    "commands",
    "help_lines",
    "lookup",
    "read",
    "reading_table",
    "register",
    "register_order_words",
    "unregister",
]
