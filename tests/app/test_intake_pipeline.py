"""The intake as a pipeline of named steps (issue 22), and what it tells its caller: a
typed IngestResult (the game, whether it started, whether every order is now in), the same
for IMAP and LMTP (one Intake), and a command registered in the test tree read and run
through ingest (tests/toycommand.py)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
import toycommand
from mailhelpers import T0, game_config, orders_of, replies_since

from snl_pbem.app.games import sync_games
from snl_pbem.app.intake import IngestResult, ingest
from snl_pbem.app.intake.pipeline import STEPS
from snl_pbem.config import Config, load_config
from snl_pbem.rules.ruleset import get_ruleset
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
        answer = replies_since(db, T0)[-1]
        assert answer.recipient == "ann@example.org" and "PONG" in answer.message.decode()
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


def closing_when_all_in(db: Database, config: Config, *, referee_key: bool = False) -> Config:
    """g1 set to close when all are in (and the referee key synced, if asked)."""
    config = edited(config, 'round_length = "3d"', 'round_length = "3d"\nclose_when_all_in = true')
    if referee_key:
        config = edited(
            config,
            'referee = "ref@example.org"',
            f'referee = "ref@example.org"\nreferee_key = "{REFEREE_KEY}"',
        )
    sync_games(db, config, T0)
    return config


def test_a_failure_telling_whether_all_are_in_never_costs_the_orders(
    intake, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """all_in is worked out in a savepoint: when it fails (here the ruleset's ``awaiting``)
    the orders still count and are answered, all_in is False (the deadline's job closes
    the round) and the failure is logged; the message is never set aside for it."""
    db, config = intake
    config = closing_when_all_in(db, config)
    ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="a"), T0, "t")
    ingest(db, config, mail("KEY bob-key-123\nDICE 2", "bob@example.org", "b"), T0, "t")

    def broken(*_: object) -> tuple[str, ...]:
        raise RuntimeError("awaiting broke")

    monkeypatch.setattr(get_ruleset("postal"), "awaiting", broken)
    with caplog.at_level(logging.ERROR, logger="snl_pbem.intake"):
        last = ingest(db, config, mail("KEY cy-key-123\nDICE 6", "cy@example.org", "c"), T0, "t")
    assert (last.status, last.game, last.all_in) == ("processed", "g1", False), last
    assert [(o.player, o.dice, o.valid) for o in orders_of(db)][-1] == ("cy", "6", True)
    assert len(orders_of(db)) == 3
    assert "g1: could not tell whether all orders are in: awaiting broke" in caplog.text
    assert replies_since(db, T0)[-1].recipient == "cy@example.org"  # and cy is answered


def test_referee_mail_naming_no_game_tells_the_only_games_all_in_round(intake) -> None:
    """RESUME with no game named (the server's only game) of a game paused once its round
    was all in: the result names the game and says all are in, so serve plans the
    early close (close_when_all_in) at once rather than at the deadline."""
    db, config = intake
    config = closing_when_all_in(db, config, referee_key=True)
    for who, dice in (("ann", 4), ("bob", 2), ("cy", 6)):
        sender = f"{who}@example.org"
        ingest(db, config, mail(f"KEY {who}-key-123\nDICE {dice}", sender, who), T0, "t")
    ref = "ref@example.org"  # paused before the early close came: it waits for RESUME
    paused = ingest(db, config, mail(f"KEY {REFEREE_KEY}\nPAUSE g1", ref, "p", "r"), T0, "t")
    assert (paused.status, paused.game, paused.all_in) == ("processed", "g1", False)
    resumed = ingest(db, config, mail(f"KEY {REFEREE_KEY}\nRESUME", ref, "u", "referee"), T0, "t")
    assert "1 done, 0 not done" in resumed.detail, resumed
    assert (resumed.status, resumed.game, resumed.all_in) == ("processed", "g1", True)
