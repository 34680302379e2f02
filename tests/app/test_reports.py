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


def test_reports_show_positions_and_nothing_else(intake) -> None:
    db, config = intake
    orders(db, config, "ann", "DICE 6\nTRAPDOOR 37", "a")
    orders(db, config, "bob", "DICE 5\nTRAPDOOR 37", "b")  # cy sends nothing: R17
    outcome = close_round(db, "g1", LATE, config=config)
    assert outcome is not None and outcome.result.trapdoors == (37,)
    reports = mails(db, "report")
    assert sorted(reports) == list(NAMES)
    for reader, text in reports.items():
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
    with db.transaction() as s:
        row = s.scalar(select(OutboxMessage).where(OutboxMessage.kind == "game-over"))
        msg = email.message_from_bytes(row.message, policy=email.policy.default)
    [svg] = [p for p in msg.walk() if p.get_content_type() == "image/svg+xml"]
    assert svg.get_filename() == "board.svg" and b"<svg" in svg.get_content()
    db.dispose()
