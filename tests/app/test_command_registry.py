"""The command registry (issue 22): every email word registered once, with who may send
it, its reader, its run slot and its line of help; the order words come from the
rulesets; HELP, the welcome's command list and docs/players.md agree with it; and a new
command (tests/toycommand.py) is one file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import toycommand
from toyruleset import install as install_toy_ruleset

from snl_pbem.app.commands import (
    Command,
    Who,
    commands,
    lookup,
    read,
    reading_table,
    register,
    register_order_words,
)
from snl_pbem.app.commands.signup import open_word
from snl_pbem.mail.commands import (
    PLAYER_ACTIONS,
    READERS,
    REFEREE_ACTIONS,
    parse_commands,
    read_commands,
)
from snl_pbem.mail.parse import parse_message
from snl_pbem.mail.quotes import COMMAND_WORDS, read_lines
from snl_pbem.mail.render import environment, render
from snl_pbem.rules import ruleset as rulesets
from snl_pbem.rules.ruleset import OrderWord, get_ruleset, ruleset_names

ROOT = Path(__file__).parents[2]
TEMPLATES = ROOT / "templates"


def help_text(ruleset: str) -> str:
    return render(f"{ruleset}/help.txt.j2", game=None, subject="x")[1]


def order_words(ruleset: str) -> set[str]:
    return {o.word for o in get_ruleset(ruleset).order_words}


def mail(body: str, subject: str = "orders") -> bytes:
    return (
        "From: Ann <ann@example.org>\r\nTo: game@example.org\r\n"
        f"Subject: {subject}\r\nMessage-ID: <r1@example.org>\r\n\r\n{body}"
    ).encode()


def test_every_word_the_order_language_reads_is_registered() -> None:
    """Nothing readable but unregistered: every first word (aliases too) the sandbox's
    table reads is registered, with READERS' reader, and the quote reader knows each one
    as a command (mail/quotes.py COMMAND_WORDS). A command added in its own file may bring
    its own reader: the app reads the kept lines again with the registry's table."""
    table = reading_table()
    assert set(READERS) == set(COMMAND_WORDS)
    assert set(READERS) <= set(table)
    assert all(table[word] is READERS[word] for word in READERS)
    assert all(callable(reader) for reader in table.values())


def test_each_command_once_with_its_help_and_who_may_send_it() -> None:
    every = commands()
    assert len({c.word for c in every}) == len(every)
    for command in every:
        assert command.help.startswith(command.word.split()[0]), command.word
        assert command.firsts[0] == command.word.split()[0]
    assert {c.word for c in commands(who=Who.REFEREE)} == REFEREE_ACTIONS
    life_cycle = commands(group="signup") + commands(group="player")
    assert {c.word for c in life_cycle} == PLAYER_ACTIONS
    assert {c.word for c in commands(who=Who.ANYONE)} == {
        "HELP", "LIST", "JOIN", "CONFIRM", "OBSERVE", "UNOBSERVE",
    }  # fmt: skip
    assert lookup("new key") is lookup("NEW") is not None
    assert lookup("DIE") is lookup("dice") is not None
    assert lookup("PASSWORD") is lookup("KEY") is not None
    assert lookup("PONG") is None
    # the envelope words the pipeline uses itself have nothing to run
    assert all(lookup(w).run is None for w in ("GAME", "KEY", "ROUND"))  # type: ignore[union-attr]


def test_a_word_or_a_first_word_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register(Command(word="GAME", who=Who.PLAYER, read=READERS["GAME"], help="GAME x"))
    with pytest.raises(ValueError, match="read already"):
        register(Command(word="DIE ROLL", who=Who.PLAYER, read=READERS["DIE"], help="DIE"))
    assert lookup("DIE ROLL") is None


def test_the_order_words_come_from_each_ruleset() -> None:
    """Postal DICE (DIE) and TRAPDOOR, classic ROLL: a game's commands are the commands
    of every game and its own ruleset's order words."""
    install_toy_ruleset()
    postal = {c.word for c in commands(ruleset="postal")}
    classic = {c.word for c in commands(ruleset="classic")}
    assert {"DICE", "TRAPDOOR", "CLEAR", "STATUS", "HELP"} <= postal
    assert "ROLL" not in postal
    assert "ROLL" in classic and not {"DICE", "TRAPDOOR"} & classic
    dice = lookup("DICE")
    assert dice is not None and dice.aliases == ("DIE",)
    assert dice.rulesets is not None and {"postal", "toy"} <= dice.rulesets  # one DICE, two games


def test_refuse_word_refuses_exactly_the_other_rulesets_order_words() -> None:
    """The reasons of refuse_word stay the ruleset's (tested with each ruleset); which
    words it refuses agrees with its order_words."""
    install_toy_ruleset()
    every = {o.word for name in ruleset_names() for o in get_ruleset(name).order_words}
    for name in ruleset_names():
        ruleset = get_ruleset(name)
        for word in every:
            refused = ruleset.refuse_word(word) is not None
            assert refused == (word not in order_words(name)), (name, word)


def test_a_ruleset_word_the_order_language_cannot_read_is_refused() -> None:
    class Moves:
        name = "moves-test"
        order_words = (OrderWord("MOVE", "MOVE 3             how far"),)

    rulesets._RULESETS[Moves.name] = Moves()  # type: ignore[assignment]
    try:
        with pytest.raises(ValueError, match="reads no line beginning MOVE"):
            register_order_words()
    finally:
        del rulesets._RULESETS[Moves.name]
    assert lookup("MOVE") is None


@pytest.mark.parametrize("ruleset", ["postal", "classic", "toy"])
def test_each_rulesets_help_names_its_order_words_and_no_other(ruleset: str) -> None:
    install_toy_ruleset()
    text = help_text(ruleset)
    others = {c.word for c in commands(group="orders")} - order_words(ruleset) - {"CLEAR"}
    for word in order_words(ruleset):
        assert re.search(rf"\b{word}\b", text), (ruleset, word)
    for word in others:
        assert not re.search(rf"^{word}\b", text, re.MULTILINE), (ruleset, word)


def test_help_lists_the_registrys_life_cycle_commands() -> None:
    """templates/player/more_commands.txt.j2 is the registry's help lines, in order."""
    for ruleset in ("postal", "classic"):
        text = help_text(ruleset)
        listed = "\n".join(line for c in commands(group="signup") for line in [c.help])
        assert listed in text
        listed = "\n".join(c.help for c in commands(group="player"))
        assert f"as for orders:\n{listed}\n" in text


@pytest.mark.parametrize("ruleset", ["postal", "classic"])
def test_the_welcomes_command_lines_are_the_rulesets(ruleset: str) -> None:
    """Each command line of the welcome (GAME, KEY, DICE...) is a registered command of a
    game of that ruleset, and every order word of the ruleset is shown."""
    source = (TEMPLATES / ruleset / "welcome.txt.j2").read_text()
    shown = set()
    for line in source.splitlines():
        found = re.match(r"([A-Z]{2,})(?: |$)", line)
        if found and lookup(found.group(1)) is not None:
            command = lookup(found.group(1))
            assert command is not None
            assert command.rulesets is None or ruleset in command.rulesets, line
            shown.add(command.word)
    assert {"GAME", "KEY"} | order_words(ruleset) <= shown


def test_the_players_guide_names_every_command_a_player_can_send() -> None:
    guide = (ROOT / "docs" / "players.md").read_text()
    for command in commands():
        if command.who is Who.REFEREE:
            continue
        word = command.word
        assert f"`{word}" in guide or f"\n{word} " in guide, word


def test_the_registry_reads_a_mail_as_the_sandbox_did() -> None:
    """ParsedMail keeps the lines it read; the registry's reading of them is the
    sandbox's (with every command registered, the same table), so the sandbox's is used
    and they are not read again (issue 23; with another table they are: the toy command's
    test below)."""
    bodies = [
        "GAME g1\r\nKEY ann-key-123\r\nDICE 4 2\r\nTRAPDOOR 37\r\nSTATUS\r\n",
        "KEY ann-key-123\r\nDICE 2\r\n\r\nOn Mon, 30 Nov 2026 at 09:00, Ann <ann@example.org> "
        "wrote:\r\n> DICE 4\r\n",
        "Dise 4\r\nJOIN g1 Ann\r\nThanks!\r\n-- \r\nDICE 6\r\n",
    ]
    for body in bodies:
        parsed = parse_message(mail(body, "Re: [g1] orders"), "game@example.org")
        assert parsed.commands is not None
        assert parsed.lines == tuple(read_lines(body)[0])
        again = read_commands(
            parsed.lines, parsed.dropped, parsed.cut, parsed.subject, reading_table()
        )
        assert again == parsed.commands
        assert read(parsed) is parsed.commands


def test_a_toy_command_is_one_file() -> None:
    """tests/toycommand.py registers PING: the registry reads it, HELP lists it, and
    taking it out restores the table and the text."""
    before_table, before_help = dict(reading_table()), help_text("postal")
    lines = ["GAME g1", "KEY ann-key-123", "PING"]
    assert not read_commands(lines, 0, None, "", reading_table()).actions  # unknown yet
    toycommand.install()
    try:
        got = read_commands(lines, 0, None, "", reading_table())
        assert [(a.word, a.args) for a in got.actions] == [("PING", ())]
        parsed = parse_message(mail("\r\n".join(lines)), "game@example.org")
        assert [a.word for a in read(parsed).actions] == ["PING"]
        assert parsed.commands is not None and not parsed.commands.actions  # sandbox: READERS
        assert parse_commands("PING me later, please").ignored  # a sentence, as before
        command = lookup("ping")
        assert command is not None and command.run is toycommand.run
        assert f"\n{toycommand.HELP_LINE}\n" in help_text("postal")
        assert f"\n{toycommand.HELP_LINE}\n" in help_text("classic")
    finally:
        toycommand.uninstall()
    assert dict(reading_table()) == before_table
    assert help_text("postal") == before_help
    assert "command_help" in environment().globals


def test_the_referees_help_and_guide_name_every_referee_command() -> None:
    """The referee's HELP (templates/referee/reply.txt.j2) and the GM's guide list each
    referee command of the registry."""
    reply = (TEMPLATES / "referee" / "reply.txt.j2").read_text()
    guide = (ROOT / "deploy" / "README.md").read_text()
    for command in commands(who=Who.REFEREE):
        assert re.search(rf"^\s*(?:\S.*/ )?{command.word} ", reply, re.MULTILINE), command.word
        assert re.search(rf"\b{command.word} g1\b", guide), command.word


def test_open_word_is_the_sign_up_words_and_not_help() -> None:
    """handle_open runs the sign-up words; HELP, which anyone may send too and which has a
    run of its own, is the intake's to answer (open_word once took any ANYONE word with a
    run, so HELP from a stranger went down the sign-up path)."""
    assert not open_word("HELP")
    for word in ("JOIN", "LIST", "CONFIRM", "OBSERVE", "UNOBSERVE"):
        assert open_word(word), word
    assert not open_word("STATUS") and not open_word("PAUSE") and not open_word("NOPE")


def test_the_reading_table_is_made_once_and_follows_the_commands() -> None:
    """Every message read asks for the table (issue 23): it is made once while no command
    changes, and a command registered or taken out is in it, or gone, at once."""
    assert reading_table() is reading_table()
    assert "PING" not in reading_table()
    toycommand.install()
    try:
        assert "PING" in reading_table()
    finally:
        toycommand.uninstall()
    assert "PING" not in reading_table()


def test_the_commands_chosen_are_kept_and_follow_the_registry() -> None:
    """``commands`` is asked at every message (issue 23): the same choice is the same tuple
    while no command changes, and a command registered or taken out is in it, or gone, at
    once."""
    assert commands(group="player") is commands(group="player")
    assert "PING" not in {c.word for c in commands(who=Who.PLAYER)}
    toycommand.install()
    try:
        assert "PING" in {c.word for c in commands(who=Who.PLAYER)}
        assert "PING" in {c.word for c in commands()}
    finally:
        toycommand.uninstall()
    assert "PING" not in {c.word for c in commands(who=Who.PLAYER)}
    assert "PING" not in {c.word for c in commands()}
