"""What a round close mails: R19 reports that reveal nothing, the referee's summary, game over."""

from __future__ import annotations

import email
import email.policy
import re
from datetime import timedelta

from mailhelpers import T0, game_config
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.rounds import close_round
from snl_pbem.config import load_config
from snl_pbem.store import Database, OutboxMessage
from snl_pbem.store.migrate import upgrade

LATE = T0.replace(year=2030, month=2)
NAMES = ("ann", "bob", "cy")


def orders(db, config, who: str, body: str, tag: str, at=T0) -> None:
    raw = (
        f"From: {who}@example.org\r\nSubject: [g1]\r\nMessage-ID: <{tag}@x.org>\r\n\r\n"
        f"KEY {who}-key-123\r\n{body}\r\n"
    ).encode()
    assert ingest(db, config, raw, at, "t").status == "processed"


def mails(db: Database, kind: str) -> dict[str, str]:
    with db.transaction() as s:
        rows = s.scalars(
            select(OutboxMessage).where(OutboxMessage.kind == kind).order_by(OutboxMessage.id)
        ).all()
    out = {}
    for row in rows:
        msg = email.message_from_bytes(row.message, policy=email.policy.default)
        part = next(p for p in msg.walk() if p.get_content_type() == "text/plain")
        out[row.recipient.split("@")[0]] = (
            str(msg["Subject"]) + "\n" + part.get_content().replace("\r\n", "\n")
        )
    return out


def flat(text: str) -> str:
    """A paragraph's words on one line (the mail wraps them)."""
    return " ".join(text.split())


def own_part(text: str) -> str:
    """What a report tells its reader alone of the round: between the standings and
    "Next:" (or the end of the game's positions and the reveal); "" when nothing."""
    after = text.split("<- you\n", 1)[1]
    rows = re.match(r"(?:\s+\d+=?\s+\S+\s+\d+\n)*", after)
    assert rows is not None
    rest = after[rows.end() :]
    return re.split(r"\n(?:Next: |The board, revealed|Thank you for playing)", rest)[0].strip()


def test_reports_show_positions_and_nothing_else(intake) -> None:
    db, config = intake
    orders(db, config, "ann", "DICE 6\nTRAPDOOR 37", "a")
    orders(db, config, "bob", "DICE 5\nTRAPDOOR 37", "b")  # cy sends nothing: R17
    outcome = close_round(db, "g1", LATE, config=config)
    assert outcome is not None and outcome.result.trapdoors == (37,)
    reports = mails(db, "report")
    assert sorted(reports) == list(NAMES)
    assert own_part(reports["ann"]) == own_part(reports["bob"]) == ""
    mine = flat(own_part(reports["cy"]))  # R17 and R16 for cy, told to cy alone: their own
    assert "No orders from you for round 1" in mine and "(rule 17): 1." in mine
    assert "Your trapdoor nomination was space 1" in mine
    for reader, text in reports.items():
        text = text.replace(own_part(text), "")  # the rest: what R19 allows everyone
        assert "[g1] Round 1 report" in text
        assert re.search(rf"\n\s+\S+\s+{reader}\s+\d+\s+<- you\n", text), text
        for other in set(NAMES) - {reader}:
            for line in text.splitlines():
                if re.search(rf"\b{other}\b", line):  # only a standings line: place, name, position
                    assert re.fullmatch(rf"\s+\d+=?\s+{other}\s+\d+", line), line
        lowered = text.lower()
        for secret in (
            "ladder",
            "snake",
            "nominat",
            "vote",
            "no orders",
            "37",
            "r17",
            "r18",
            "26",
            "47",
            "14",
        ):
            assert secret not in lowered, (reader, secret)
        assert "Next: round 2 (one turn)." in text and "ROUND 2" in text
    assert "Your dice used in this set of six: 6\nStill open: 1, 2, 3, 4, 5" in reports["ann"]
    assert "Your dice used in this set of six: 1\nStill open: 2, 3, 4, 5, 6" in reports["cy"]
    [summary] = mails(db, "referee-summary").values()
    assert "Active trapdoors: 37" in summary and "cy: no orders received (R17)" in summary
    assert "ann: turn 1: 6 0->6 = 6; nominated 37" in summary


def test_game_over_reveals_the_board_when_configured(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    config = game_config(
        tmp_path / "c.toml",
        db.url,
        reveal=True,
        board='{ rows = 2, columns = 5, ladders = { "2" = 9 } }',
    )
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    now = T0
    for number, dice in enumerate(((5, 2, 1), (5, 4, 3)), start=1):
        for name, die in zip(NAMES, dice, strict=True):
            orders(db, config, name, f"DICE {die}", f"{name}{number}", at=now)
        now = LATE + timedelta(days=10 * number)
        assert close_round(db, "g1", now, config=config) is not None
    over = mails(db, "game-over")
    assert sorted(over) == list(NAMES)
    text = over["bob"]
    assert "Game over: bob wins" in text  # ann repeated her 5: R18 moved her 1
    assert "2^9" in text and "Round 1: ann 5; bob 2; cy 1" in text
    assert own_part(text) == ""  # bob's move aimed past the end: no nomination, no news
    ann = flat(own_part(over["ann"]))  # the last round's default, told in the last mail
    assert ann.startswith("Your dice for round 2 could not be played: 5 is already used")
    assert "(rule 17): 1." in ann and "before the deadline" not in ann  # no next time
    with db.transaction() as s:
        row = s.scalar(select(OutboxMessage).where(OutboxMessage.kind == "game-over"))
        msg = email.message_from_bytes(row.message, policy=email.policy.default)
    [svg] = [p for p in msg.walk() if p.get_content_type() == "image/svg+xml"]
    assert svg.get_filename() == "board.svg" and b"<svg" in svg.get_content()
    db.dispose()


def test_each_player_is_told_their_own_default_and_why(intake) -> None:
    """Issue 21: a player the referee moved was told nothing of it. Now each report tells
    its reader, and only its reader (R19: their own move), what the referee chose for
    them and why: no orders (R17), dice that could not be played (R18), orders withdrawn,
    or away (ABSENT, not held against them); the nomination made for them (R16); and how
    to choose their own next time."""
    db, config = intake
    away_at = T0.replace(year=2030, month=1, day=2)  # round 1's deadline: 4 Jan 2030 18:00
    orders(db, config, "cy", "ABSENT UNTIL 2030-01-10", "c1", at=away_at)  # and no orders
    orders(db, config, "bob", "DICE 7\nTRAPDOOR 9", "b1")  # not a die: R18, TRAPDOOR stands
    assert close_round(db, "g1", LATE, config=config) is not None  # ann sends nothing: R17
    reports = mails(db, "report")
    ann, bob, cy = (flat(own_part(reports[name])) for name in NAMES)
    assert ann.startswith("No orders from you for round 1 reached us before its deadline")
    assert "the lowest die you could play (rule 17): 1." in ann
    assert "Your trapdoor nomination was space 1, where your move aimed (0 + your die 1)" in ann
    assert "send your orders before the deadline" in ann and "DICE line" in ann
    assert bob.startswith("Your dice for round 1 could not be played: 7 is not a die value")
    assert "counts as sending no orders (rule 18)" in bob and "(rule 17): 1." in bob
    assert "Your own TRAPDOOR nomination still counted (rule 18)." in bob
    assert "trapdoor nomination was space" not in bob and "send your orders before" in bob
    assert cy.startswith("No orders from you for round 1") and "(rule 17): 1." in cy
    assert "You are away (ABSENT) until Thu 10 Jan 2030" in cy and "not held against you" in cy
    assert "send your orders before" not in cy  # away: nothing to mend
    told = {"ann": ann, "bob": bob, "cy": cy}
    for reader, own in told.items():  # nobody's own part names anyone else or their case
        for other in set(NAMES) - {reader}:
            assert other not in own
        assert bool(re.search(r"\b[79]\b", own)) == (reader == "bob"), own  # bob's 7 and 9
        assert ("away" in own) == (reader == "cy")
    assert_rest_alike(reports)

    # round 2: ann withdraws her orders; bob's dice stand but he names no trapdoor (R16
    # alone); cy is back and sends nothing (R17, held against nobody's report but hers)
    orders(db, config, "ann", "DICE 2", "a2", at=LATE + timedelta(hours=1))
    orders(db, config, "ann", "CLEAR", "a3", at=LATE + timedelta(hours=2))
    orders(db, config, "bob", "DICE 3", "b2", at=LATE + timedelta(hours=1))
    assert close_round(db, "g1", LATE + timedelta(days=10), config=config) is not None
    reports = {k: v for k, v in mails(db, "report").items()}  # the latest of each
    ann, bob, cy = (flat(own_part(reports[name])) for name in NAMES)
    assert ann.startswith("You withdrew your orders for round 2 (CLEAR) and sent none after")
    assert "the lowest die you could play (rule 17): 2." in ann
    assert bob == (
        "Your trapdoor nomination was space 4, where your move aimed (1 + your die 3), "
        "as you named no space of the board on a TRAPDOOR line (rule 16)."
    )
    assert cy.startswith("No orders from you for round 2") and "away" not in cy
    assert "send your orders before the deadline" in cy
    assert_rest_alike(reports)


def assert_rest_alike(reports: dict[str, str]) -> None:
    """Apart from each reader's own part, name, marker and own dice, every report is the
    same text: nothing in it depends on another player's orders (R19)."""
    own_lines = ("Hello ", "Your dice used in this set of six:", "Still open:", "DICE ")
    rests = set()
    for text in reports.values():
        rest = text.replace(own_part(text), "").replace("   <- you", "")
        rests.add("\n".join(x for x in rest.splitlines() if not x.startswith(own_lines)))
    assert len(rests) == 1, rests


def test_two_dice_played_for_a_player(tmp_path) -> None:
    """A two-turn round (R7): the referee plays the lowest legal die for each turn (R17),
    and the nomination is where the first move aimed (R16)."""
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    config = game_config(path, db.url)
    two_turns = path.read_text().replace('round_length = "3d"', "double_from_round = 1")
    path.write_text(two_turns.replace("players = [", 'round_length = "3d"\nplayers = ['))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    orders(db, config, "ann", "DICE 2 5\nTRAPDOOR 30", "a")
    orders(db, config, "bob", "DICE 1 2", "b")
    assert close_round(db, "g1", LATE, config=config) is not None
    reports = mails(db, "report")
    assert flat(own_part(reports["cy"])) == (
        "No orders from you for round 1 reached us before its deadline, so the referee "
        "played for you the lowest dice you could play, one per turn (rule 17): 1 then 2. "
        "Your trapdoor nomination was space 1, where your first move aimed (0 + your die "
        "1), as you named no space of the board on a TRAPDOOR line (rule 16).\n"
        "To choose your own dice, send your orders before the deadline: the lines at the "
        "end of this message, with your two dice (one per turn) on the DICE line."
    ).replace(".\nTo", ". To")
    assert own_part(reports["ann"]) == ""
    assert flat(own_part(reports["bob"])).startswith("Your trapdoor nomination was space 1,")
    db.dispose()


def test_standings_lines_are_made_once_as_the_reports_print_them() -> None:
    """The rows every report of a game shares: place (``2=`` when shared), the name padded
    to the longest, the position right-aligned, exactly as the templates once wrote each."""
    from snl_pbem.app.reports import standings

    rows = standings({"ann": 40, "bobby": 17, "cy": 40, "dee": 100, "ed": 1})
    assert [row.line for row in rows] == [
        "1   dee    100",
        "2=  ann     40",
        "2=  cy      40",
        "4   bobby   17",
        "5   ed       1",
    ]
    old = "%-3s %-*s %4d"  # the templates' own formats before (Jinja's format filter is %)
    for row in rows:
        assert row.line == old % (row.place, 5, row.name, row.position)


def test_the_summary_lists_the_standby_list_and_those_waiting_apart(tmp_path) -> None:
    """The referee's summary names the standby list (with addresses) and the sign-ups
    waiting for approval on lines of their own, read in one query, in sign-up order."""
    from snl_pbem.app.views import seat_lines
    from snl_pbem.store import Game, Signup
    from snl_pbem.store.states import SignupState

    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    config = game_config(tmp_path / "c.toml", db.url)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "g1"))
        for name, state in (
            ("eve", SignupState.STANDBY),
            ("fay", SignupState.WAITING),
            ("gus", SignupState.STANDBY),
            ("hal", SignupState.REFUSED),  # neither: not listed
        ):
            s.add(
                Signup(
                    game_id=game.id,
                    name=name,
                    email=f"{name}@example.org",
                    state=state,
                    created_at=T0,
                )
            )
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "g1"))
        lines = seat_lines(s, game, T0)
    assert lines == [
        "standby: eve <eve@example.org>, gus <gus@example.org>",
        "waiting for your approval: fay",
    ]
    db.dispose()
