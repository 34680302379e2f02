"""Step five, commands: run what the message asks, each word through its registered
command (snl_pbem.app.commands): the referee's words, the words anyone may send (LIST,
JOIN, CONFIRM, OBSERVE...), then, the key checked, the player's words, the order set
(or CLEAR), STATUS and HELP. The message's commands are read with the registry (a
command registered in this process, a test's toy, is read and run too), and an order
word the game's ruleset does not read is refused here."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import fields, replace
from functools import cache
from types import MappingProxyType
from typing import Any

from snl_pbem.app.commands import commands as registered
from snl_pbem.app.commands import lookup
from snl_pbem.app.commands.player import handle_keyed
from snl_pbem.app.commands.referee import handle_referee_mail
from snl_pbem.app.commands.registry import Run
from snl_pbem.app.commands.signup import handle_open, open_word
from snl_pbem.app.intake.context import Message, Outcome
from snl_pbem.app.lookup import ruleset_of
from snl_pbem.app.txcache import anew
from snl_pbem.mail.commands import Commands, LineProblem
from snl_pbem.rules.ruleset import Ruleset
from snl_pbem.store.states import InboundStatus


def run_of(word: str) -> Run:
    """What the registered command ``word`` does."""
    command = lookup(word)
    assert command is not None and command.run is not None, f"{word} has no run"
    return command.run


def referee_words(msg: Message) -> Outcome | None:
    """The referee's mail: every command in it, answered in one reply."""
    if not msg.referee:
        return None
    with anew(msg.ctx.session):
        return Outcome(*handle_referee_mail(msg.ctx))


def open_words(msg: Message) -> Outcome | None:
    """Words anyone may send, in a message without a key. One with orders (or STATUS,
    CLEAR) as well goes on: those get the usual answer (no key, not applied)."""
    commands = msg.ctx.commands
    if commands.order_key is not None:
        return None
    # read anew around words that may change a seat; a message with none (its misspelt
    # words answered, or mail of no command at all) keeps what the batch read ahead
    changes = any(open_word(action.word) for action in commands.actions)
    with anew(msg.ctx.session) if changes else nullcontext():
        handled = handle_open(msg.ctx)
    if handled is None:
        return None
    if not (commands.has_orders or commands.clear or commands.status):
        return Outcome(*handled)
    msg.done.append(handled[1])
    return None


def keyed(msg: Message) -> Outcome | None:
    """The player's words (RESIGN, ABSENT, NEW KEY, ADDRESS, HISTORY, and LIST, OBSERVE...
    for their game), then the order set, STATUS or HELP; None when nothing of these was
    sent (the reply step answers)."""
    ctx, game, player, other = msg.ctx, msg.game, msg.player, msg.other
    assert game is not None and player is not None
    if ctx.commands.actions:
        with anew(msg.ctx.session):
            msg.done += handle_keyed(ctx, game, player)
    commands = ctx.commands = in_this_game(ctx.commands, ruleset_of(game))
    if commands.help:
        run_of("HELP")(ctx, game, player, other)
    if (commands.has_orders or commands.clear) and player.active:  # not just resigned
        return Outcome(*run_of("CLEAR")(ctx, game, player, other))  # the order set's run
    if commands.status:
        run_of("STATUS")(ctx, game, player, other)
        return Outcome(InboundStatus.PROCESSED, "status sent")
    if commands.help:
        return Outcome(InboundStatus.PROCESSED, "help sent")
    return None


_SAID: dict[str, tuple[str, ...]] = {
    "DICE": ("dice",),
    "TRAPDOOR": ("nomination", "no_nomination"),
    "ROLL": ("roll",),
}
"""The fields of Commands that each order word of the order language fills (a new order
word adds its field there, snl_pbem/mail/commands.py, and its line here)."""


def _line(word: str, commands: Commands) -> str:
    """The order line as read, for the refusal (a message's own line is not echoed)."""
    if word == "DICE":
        return " ".join(["DICE", *map(str, commands.dice or ())])
    if word == "TRAPDOOR":
        return f"TRAPDOOR {'NONE' if commands.nomination is None else commands.nomination}"
    return word


def in_this_game(commands: Commands, ruleset: Ruleset) -> Commands:
    """The commands as the game's ruleset reads them: an order word of another ruleset
    (a DICE line in the classic game, ROLL in the postal one) is no order here. Its line
    is refused with the ruleset's reason, once, and what it said is dropped, so it
    neither replaces earlier orders nor counts as sent."""
    problems, refused = [], set()
    for problem in commands.problems:
        word = _word(problem.line)
        why = ruleset.refuse_word(word)
        if why is None:
            problems.append(problem)
        else:
            problems.append(LineProblem(problem.line, why))
            refused.add(word)
    defaults = _defaults()
    changes: dict[str, Any] = {}
    for command in registered(group="orders"):
        said = _SAID.get(command.word)
        if command.rulesets is None or said is None:
            continue  # CLEAR, in every game
        if all(getattr(commands, name) == defaults[name] for name in said):
            continue
        why = ruleset.refuse_word(command.word)
        if why is None:
            continue
        changes.update({name: defaults[name] for name in said})
        if command.word not in refused:
            problems.append(LineProblem(_line(command.word, commands), why))
    if not changes and len(problems) == len(commands.problems):
        return commands
    return replace(commands, problems=tuple(problems), **changes)


@cache
def _defaults() -> Mapping[str, Any]:
    """Each field of Commands and its default, made once."""
    return MappingProxyType({f.name: f.default for f in fields(Commands)})


def _word(line: str) -> str:
    """An order line's command word, as the ruleset knows it (DIE is DICE)."""
    first = line.strip().split(maxsplit=1)[0].upper().rstrip(":") if line.strip() else ""
    command = lookup(first) if first else None
    return command.word if command is not None and command.group == "orders" else first
