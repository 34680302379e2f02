"""The classic game behind the ruleset seam: what an order set is (C12), and what the
referee plays (C11)."""

from __future__ import annotations

from snl_pbem.rules import Board
from snl_pbem.rules.classic import ClassicState
from snl_pbem.rules.classic.ruleset import CLASSIC
from snl_pbem.rules.ruleset import GameState, Orders, RulesetSettings

SETTINGS = RulesetSettings(board=Board.from_mapping({"rows": 2, "columns": 5}), seed=3)
START = GameState(("ann", "bob"), {"ann": 0, "bob": 0}, {"ann": (), "bob": ()})


def test_c12_roll_is_the_order_and_dice_are_refused_with_the_reason() -> None:
    """RULES-CLASSIC C12: "A ROLL line is an order that says "I am here"" and "Dice values
    sent by a player are refused with a reply that explains the server throws"."""
    rolled = CLASSIC.read_orders(SETTINGS, START, "ann", Orders(roll=True), 1)
    assert rolled.valid and rolled.line_problems == () and rolled.ack["rolled"]
    silent = CLASSIC.read_orders(SETTINGS, START, "ann", Orders(), 1)
    assert not silent.valid and silent.summary == "no ROLL"
    assert "the server throws everyone's dice" in (CLASSIC.refuse_word("DICE") or "")
    assert CLASSIC.refuse_word("TRAPDOOR") == "this game has no trapdoors"
    assert CLASSIC.refuse_word("ROLL") is None


def test_c9_a_finished_player_has_nothing_more_to_send() -> None:
    """RULES-CLASSIC C9: "a finished player takes no more turns"."""
    finished = ClassicState(
        ("ann", "bob"), {"ann": 10, "bob": 3}, finished={"ann": 4}, rounds_played=4
    )
    stored = GameState(
        ("ann", "bob"),
        {"ann": 10, "bob": 3},
        {"ann": (), "bob": ()},
        rounds_played=4,
        extra={"state": finished.as_json()},
    )
    reading = CLASSIC.read_orders(SETTINGS, stored, "ann", Orders(), 1)
    assert reading.valid and reading.ack["finished"] == 4 and reading.summary == "finished"
    assert CLASSIC.awaiting(SETTINGS, stored) == ("bob",)


def test_c11_the_referee_throws_for_everyone_from_the_seed() -> None:
    """RULES-CLASSIC C12: "the server throws for everyone at the close either way"."""
    first = CLASSIC.adjudicate(SETTINGS, START, {})
    again = CLASSIC.adjudicate(SETTINGS, START, {"ann": Orders(roll=True)})
    assert first.record == again.record and first.record is not None
    assert [t["player"] for t in first.record["round"]["throws"]][:2] == ["ann", "bob"]
    assert any(  # another game's seed throws otherwise
        CLASSIC.adjudicate(RulesetSettings(board=SETTINGS.board, seed=s), START, {}).record
        != first.record
        for s in range(4, 10)
    )
