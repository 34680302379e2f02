"""The intake as a pipeline of named steps (issue 22), and what it tells its caller: a
typed IngestResult (the game, whether it started, whether every order is now in), the same
for IMAP and LMTP (one Intake), and a command registered in the test tree read and run
through ingest (tests/toycommand.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import toycommand
from mailhelpers import T0, game_config, orders_of, replies_since

from snl_pbem.app.games import sync_games
from snl_pbem.app.intake import IngestResult, ingest
from snl_pbem.app.intake.pipeline import STEPS
from snl_pbem.config import Config, load_config
from snl_pbem.runners.mailboxes import Intake, Readers
from snl_pbem.store import Database

PACKAGE = Path(__file__).parents[2] / "snl_pbem" / "app" / "intake"
REFEREE_KEY = "ref-key-0123456789"


def mail(
    body: str, sender: str = "ann@example.org", tag: str = "x", subject: str = "[g1]"
) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: {subject} orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()


def edited(config: Config, old: str, new: str) -> Config:
    text = config.path.read_text()
    assert old in text
    config.path.write_text(text.replace(old, new, 1))
    return load_config(config.path)


def test_the_steps_run_in_the_issues_order_each_a_small_module_with_one_job() -> None:
    """store (before anything is read), dedupe, bounce, authenticate, commands, reply."""
    modules = [step.__module__.rsplit(".", 1)[1] for _, step in STEPS]
    firsts = list(dict.fromkeys(m for m in modules if m != "store"))
    assert firsts == ["dedupe", "bounce", "authenticate", "commands", "reply"]
    assert modules[-1] == "reply"
    for path in PACKAGE.glob("*.py"):
        text = path.read_text()
        assert text.count("\n") < 320, path.name
        assert ast.get_docstring(ast.parse(text)), f"{path.name} says what it is for"


def test_an_order_says_its_game_and_whether_all_are_in(intake) -> None:
    """all_in only for a game that closes when all are in, and only once the last order
    the round waits for is in (R-close_when_all_in: checked for that game alone)."""
    db, config = intake
    first = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="a"), T0, "t")
    assert (first.status, first.game, first.started, first.all_in) == (
        "processed",
        "g1",
        False,
        False,
    )
    config = edited(config, 'round_length = "3d"', 'round_length = "3d"\nclose_when_all_in = true')
    sync_games(db, config, T0)
    second = ingest(db, config, mail("KEY bob-key-123\nDICE 2", "bob@example.org", "b"), T0, "t")
    assert (second.game, second.all_in) == ("g1", False)  # cy has not sent hers
    last = ingest(db, config, mail("KEY cy-key-123\nDICE 6", "cy@example.org", "c"), T0, "t")
    assert (last.status, last.game, last.all_in) == ("processed", "g1", True)
    wrong = ingest(db, config, mail("KEY nope-nope-nope\nDICE 1", tag="d"), T0, "t")
    assert (wrong.status, wrong.game, wrong.all_in) == ("rejected", "g1", False)
    lost = ingest(db, config, mail("HELLO", "who@example.net", "e", ""), T0, "t")
    assert (lost.game, lost.started, lost.all_in) == (None, False, False)
    assert len(orders_of(db)) == 3


def test_start_by_mail_says_the_game_started(db: Database, tmp_path: Path) -> None:
    """The runner learns that a game started from the result, not from its detail."""
    config = game_config(tmp_path / "config.toml", db.url)
    config = edited(
        config,
        'referee = "ref@example.org"',
        f'referee = "ref@example.org"\nreferee_key = "{REFEREE_KEY}"',
    )
    sync_games(db, config, T0)
    raw = mail(f"KEY {REFEREE_KEY}\nSTART g1", "ref@example.org", "s")
    result = ingest(db, config, raw, T0, "t")
    assert (result.status, result.game, result.started) == ("processed", "g1", True), result
    again = ingest(db, config, mail(f"KEY {REFEREE_KEY}\nSTATUS", "ref@example.org", "t"), T0, "t")
    assert not again.started


def test_imap_and_lmtp_enter_through_one_intake_that_tells_each_result(intake) -> None:
    """Intake.store stores (committed: the source may be acknowledged), the readers read,
    and told() hands the typed result to on_result, as both the IMAP hooks and the LMTP
    receiver call it."""
    db, config = intake
    told: list[IngestResult] = []
    readers = Readers(threads=1)
    entry = Intake(db, config, readers=readers, on_result=told.append)
    stored, reading = entry.store(mail("KEY ann-key-123\nDICE 3", tag="i"), T0, "imap:t")
    assert stored.stored and stored.status == "new"
    reading.result(timeout=60)
    result = entry.told(reading)
    assert result is not None and told == [result]
    assert (result.status, result.game) == ("processed", "g1")
    again, reading = entry.store(mail("KEY ann-key-123\nDICE 3", tag="i"), T0, "imap:t")
    assert again.status == "duplicate" and entry.told(reading) == again
    assert told == [result, again]


def test_a_command_registered_in_the_test_tree_is_read_and_run_through_ingest(intake) -> None:
    """tests/toycommand.py's PING: one file, read by the registry, run by its ``run`` once
    the player's key is checked, never without it."""
    db, config = intake
    toycommand.install()
    try:
        pong = ingest(db, config, mail("GAME g1\nKEY ann-key-123\nPING", tag="p"), T0, "t")
        assert (pong.status, pong.detail, pong.game) == ("processed", "PONG", "g1")
        keyless = ingest(db, config, mail("GAME g1\nPING", tag="q"), T0, "t")
        assert keyless.status == "rejected" and "PONG" not in keyless.detail
        ingest(db, config, mail("GAME g1\nKEY ann-key-123\nHELP", tag="h"), T0, "t")
        assert toycommand.HELP_LINE in replies_since(db, T0)[-1].message.decode()
    finally:
        toycommand.uninstall()
    plain = ingest(db, config, mail("GAME g1\nKEY ann-key-123\nPING", tag="r"), T0, "t")
    assert "PONG" not in plain.detail


@pytest.mark.parametrize("order", ["ROLL", "DICE 4\nROLL"])
def test_another_rulesets_order_word_is_refused_by_the_registry(intake, order: str) -> None:
    """The postal game refuses ROLL (the classic game's word) with the ruleset's reason,
    and ROLL alone is no order here (the registry's order words, not a fixed list)."""
    db, config = intake
    result = ingest(db, config, mail(f"KEY ann-key-123\n{order}", tag="o"), T0, "t")
    assert result.status == "processed"
    text = replies_since(db, T0)[-1].message.decode()
    assert "ROLL" in text
    assert [o.dice for o in orders_of(db)] == (["4"] if "DICE" in order else [])
