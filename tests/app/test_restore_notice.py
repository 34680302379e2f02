"""notify-restored on SQLite and PostgreSQL (issue 21; the guide's steps as written:
tests/cli/test_restore_guide.py): the time the records end, a paused game, a round whose
deadline is ahead, a time that is each player's own (R19), and telling twice only when
asked."""

from __future__ import annotations

import email
import email.policy
from datetime import timedelta

from mailhelpers import T0
from sqlalchemy import select

from snl_pbem.app.intake import ingest
from snl_pbem.app.referee import pause
from snl_pbem.app.reopened import notify_restored
from snl_pbem.store import AuditEntry, OutboxMessage


def notices(db) -> dict[str, list[str]]:
    with db.transaction() as s:
        rows = s.execute(
            select(OutboxMessage.recipient, OutboxMessage.message).order_by(OutboxMessage.id)
        ).all()
    found: dict[str, list[str]] = {}
    for to, raw in rows:
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        if "restored from a backup" in str(msg["Subject"]):
            text = " ".join(msg.get_content().split())  # type: ignore[attr-defined]
            found.setdefault(to, []).append(text)
    return found


def test_a_restore_is_told_with_the_open_round_and_own_orders(intake) -> None:
    db, config = intake
    raw = (
        b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <a1@example.org>\r\n\r\n"
        b"KEY ann-key-123\r\nDICE 5\r\nTRAPDOOR 40\r\n"
    )
    assert ingest(db, config, raw, T0, "t").status == "processed"
    pause(db, "g1", T0 + timedelta(minutes=5), config=config)
    now = T0 + timedelta(days=1)
    report = notify_restored(db, config, now, via="cli")
    assert report.records_end == T0 + timedelta(minutes=5)  # the pause, the last thing done
    [game] = report.games
    assert (game.game, game.told, game.round, game.passed) == ("g1", 3, 1, False)
    told = notices(db)
    assert sorted(told) == ["ann@example.org", "bob@example.org", "cy@example.org"]
    ann, bob = told["ann@example.org"][0], told["bob@example.org"][0]
    assert (
        "The last mail between you and it that the server still has is from Sat 1 Dec 2029 "
        "12:05 GMT (a time from your own mail and the game's reports, never from anyone "
        "else's): orders or other mail"
    ) in ann
    assert (
        "The game is paused: no orders are accepted until the referee resumes it. Round 1 is "
        "open until its deadline, Fri 4 Jan 2030 18:00 GMT (stopped while the game is paused)."
    ) in ann
    assert "Your orders for round 1, as the server has them: dice 5, trapdoor 40." in ann
    assert "Your orders for round 1, as the server has them: none." in bob
    assert "dice 5" not in bob and "trapdoor 40" not in bob  # R19: ann's are hers alone
    assert "If you sent orders after Sat 1 Dec 2029 12:05 GMT, send them again" in bob

    again = notify_restored(db, config, now + timedelta(minutes=1), "g1", via="cli")
    assert again.records_end == report.records_end  # its own notices do not move it
    [game] = again.games  # the same restore: not told twice
    assert (game.told, game.told_before) == (0, now) and len(notices(db)["ann@example.org"]) == 1
    forced = notify_restored(db, config, now + timedelta(minutes=2), "g1", via="cli", again=True)
    assert forced.records_end == report.records_end and forced.games[0].told == 3
    assert notices(db)["ann@example.org"][1] == ann  # the same notice, the same time in it
    with db.transaction() as s:
        audited = s.scalars(select(AuditEntry.via).where(AuditEntry.action == "restored")).all()
    assert audited == ["cli", "cli"]


def test_the_time_told_is_from_the_players_own_mail(intake) -> None:
    """ann's orders at 12:07 are the last thing the server recorded; bob, who sent nothing
    since his welcome, is not shown 12:07 (it would tell him when ann sent mail, R19): his
    notice's time is that of his own mail and the game's reports. ann's is 12:07."""
    db, config = intake
    raw = (
        b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <a1@example.org>\r\n\r\n"
        b"KEY ann-key-123\r\nDICE 5\r\n"
    )
    assert ingest(db, config, raw, T0 + timedelta(minutes=7), "t").status == "processed"
    report = notify_restored(db, config, T0 + timedelta(days=1), via="cli")
    assert report.records_end == T0 + timedelta(minutes=7)  # for the GM: the server's own
    told = notices(db)
    assert "the server still has is from Sat 1 Dec 2029 12:07 GMT" in told["ann@example.org"][0]
    for who in ("bob@example.org", "cy@example.org"):
        assert "12:07" not in told[who][0] and "the server still has is from " in told[who][0]
