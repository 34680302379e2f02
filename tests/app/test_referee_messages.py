"""What the game master and players noticed (issue 12), on SQLite and PostgreSQL: a moved
deadline is announced to every player once; acknowledgements show the new deadline;
personal mail does not look like list mail; start-up logs each config change once; one
time format (the commands' output: test_command_times.py)."""

from __future__ import annotations

import email
import email.policy
import logging
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage as Message

import pytest
from mailhelpers import T0 as INTAKE_T0
from sqlalchemy import delete, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.referee import extend, pause, resume
from snl_pbem.app.rounds import close_round
from snl_pbem.runners.server import Server
from snl_pbem.store import Database, OutboxMessage
from snl_pbem.store.migrate import upgrade
from snl_pbem.timeutil import show, zone

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)
DEADLINE = "Fri 4 Jan 2030 18:00 GMT"  # round 1 of make_config's game g1


def started(db: Database, config) -> None:
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)


def outbox(db: Database, kind: str | None = None) -> list[tuple[int, str, str, Message]]:
    """(id, kind, recipient, parsed message) of every queued message (of one kind)."""
    with db.transaction() as s:
        query = select(OutboxMessage).order_by(OutboxMessage.id)
        if kind is not None:
            query = query.where(OutboxMessage.kind == kind)
        rows = [(r.id, r.kind, r.recipient, r.message) for r in s.scalars(query)]
    return [
        (i, k, to, email.message_from_bytes(raw, policy=email.policy.default))
        for i, k, to, raw in rows
    ]


def text(msg) -> str:
    return str(msg["Subject"]) + "\n" + msg.get_content().replace("\r\n", "\n")


def notices(db: Database) -> dict[str, str]:
    found = outbox(db, "deadline")
    out = {to.split("@")[0]: text(msg) for _, _, to, msg in found}
    assert len(out) == len(found), "one notice per player"
    return out


# -- the notice of a moved deadline --------------------------------------------------------


def test_extend_tells_each_active_player_once_with_old_and_new(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    sync_games(db, make_config([{"players": ["ann", "bob"]}]), T0)  # cy left: no mail for him
    extend(db, "g1", T0, by=timedelta(days=1), config=config)
    sent = notices(db)
    assert sorted(sent) == ["ann", "bob"]
    for name, body in sent.items():
        assert body.startswith("[g1] Round 1 deadline now Sat 5 Jan 2030 18:00 GMT\n")
        assert f"Hello {name}," in body and "Test game, round 1:" in body
        assert "the referee extended the deadline." in body
        assert f"Old deadline: {DEADLINE}\nNew deadline: Sat 5 Jan 2030 18:00 GMT\n" in body
        lowered = body.lower()
        for secret in ("key", "ladder", "snake", "trapdoor", "ann-", "bob-", "no orders"):
            assert secret not in lowered, secret
    extend(db, "g1", T0, until=datetime(2030, 1, 5, 18, 0, tzinfo=UTC), config=config)
    assert len(outbox(db, "deadline")) == 2  # the same deadline again: nothing moved, no mail


def test_resume_after_a_pause_tells_each_player_once(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    pause(db, "g1", T0, config=config)
    resume(db, "g1", T0, config=config)  # paused for no time: the deadline did not move,
    sent = [text(msg) for _, _, to, msg in outbox(db, "deadline") if to == "ann@example.org"]
    assert len(sent) == 2 and sent[0].startswith("[g1] Round 1 paused\n")  # but told
    assert "the referee paused the game and resumed it; the deadline did not move." in sent[1]
    assert f"Deadline: {DEADLINE}\n" in sent[1] and "Old deadline" not in sent[1]
    with db.transaction() as s:  # the next pause and resume, on their own
        s.execute(delete(OutboxMessage).where(OutboxMessage.kind == "deadline"))
    pause(db, "g1", T0)
    resume(db, "g1", T0 + timedelta(hours=5, seconds=7, microseconds=400), config=config)
    sent = notices(db)
    assert sorted(sent) == ["ann", "bob", "cy"]
    for body in sent.values():
        assert "the referee paused the game and resumed it" in body
        assert f"Old deadline: {DEADLINE}\nNew deadline: Fri 4 Jan 2030 23:00:07 GMT\n" in body


def test_an_early_close_round_tells_each_player_before_the_report(
    db: Database, make_config
) -> None:
    config = make_config()
    started(db, config)
    closed_at = datetime(2030, 1, 3, 9, 30, 15, tzinfo=UTC)
    assert close_round(db, "g1", closed_at, actor="referee", config=config) is not None
    sent = notices(db)
    assert sorted(sent) == ["ann", "bob", "cy"]
    for body in sent.values():
        assert body.startswith("[g1] Round 1 closed early\n")
        assert "the referee closed the round early, before its deadline." in body
        assert f"Deadline was: {DEADLINE}\nClosed at:    Thu 3 Jan 2030 09:30:15 GMT\n" in body
    order = [(kind, to) for _, kind, to, _ in outbox(db) if kind in ("deadline", "report")]
    for name in ("ann", "bob", "cy"):
        mine = [kind for kind, to in order if to == f"{name}@example.org"]
        assert mine == ["deadline", "report"]  # the notice first, then the round's report


def test_a_close_at_the_deadline_or_by_the_scheduler_sends_no_notice(
    db: Database, make_config
) -> None:
    config = make_config()
    started(db, config)
    early = datetime(2030, 1, 3, 9, 0, tzinfo=UTC)
    assert close_round(db, "g1", early, actor="scheduler", config=config) is not None  # all in
    late = datetime(2030, 1, 7, 18, 0, 5, tzinfo=UTC)  # round 2's deadline has passed
    assert close_round(db, "g1", late, actor="referee", config=config) is not None
    assert outbox(db, "deadline") == []


def test_an_acknowledgement_after_an_extend_shows_the_new_deadline(intake) -> None:
    db, config = intake
    extend(db, "g1", INTAKE_T0, by=timedelta(days=1, seconds=30), config=config)
    raw = (
        b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <ext@x.org>\r\n\r\n"
        b"KEY ann-key-123\r\nDICE 4\r\n"
    )
    assert ingest(db, config, raw, INTAKE_T0, "t").status == "processed"
    [(_, _, _, ack)] = outbox(db, "ack")
    assert "Deadline: Sat 5 Jan 2030 18:00:30 GMT" in text(ack)


# -- personal mail looks personal ------------------------------------------------------------


def test_personal_mail_has_no_list_headers_and_broadcasts_keep_them(intake) -> None:
    """The welcome (it holds the key), replies: Auto-Submitted (RFC 3834) but no Precedence
    and no List-Id. Reports and deadline notices go alike to every player: list headers."""
    db, config = intake
    raw = (
        b"From: bob@example.org\r\nSubject: [g1]\r\nMessage-ID: <p@x.org>\r\n\r\n"
        b"KEY bob-key-123\r\nDICE 4\r\n"
    )
    assert ingest(db, config, raw, INTAKE_T0, "t").status == "processed"
    extend(db, "g1", INTAKE_T0, by=timedelta(hours=1), config=config)
    assert close_round(db, "g1", INTAKE_T0.replace(year=2030, month=2), config=config)
    kinds = {}
    for _, kind, _, msg in outbox(db):
        kinds.setdefault(kind, msg)
    assert {"welcome", "ack", "deadline", "report", "referee-summary"} <= set(kinds)
    for kind in ("welcome", "ack", "referee-summary"):
        msg = kinds[kind]
        assert msg["List-Id"] is None and msg["Precedence"] is None, kind
        assert msg["X-SNL-PBEM-Game"] == "g1" and msg["X-Auto-Response-Suppress"], kind
    assert kinds["welcome"]["Auto-Submitted"] == "auto-generated"
    assert kinds["ack"]["Auto-Submitted"] == "auto-replied"
    for kind in ("deadline", "report"):
        msg = kinds[kind]
        assert msg["List-Id"] == "Snakes and Ladders game g1 <g1.example.org>", kind
        assert msg["Precedence"] == "bulk" and msg["Auto-Submitted"] == "auto-generated", kind


# -- start-up logs each config change once ----------------------------------------------------


def test_start_and_reload_log_each_config_change_once(
    db_url: str, make_config, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config()
    migrate = Database(db_url)
    upgrade(migrate)
    migrate.dispose()
    server = Server(config.path)
    try:
        with caplog.at_level(logging.INFO):
            server.start()
        lines = [r.getMessage() for r in caplog.records if "new game with" in r.getMessage()]
        assert lines == ["config: g1: new game with 3 players"]
        caplog.clear()
        make_config([{"players": ["ann", "bob", "cy", "di"]}])
        with caplog.at_level(logging.INFO):
            server.reload()
        lines = [r.getMessage() for r in caplog.records if "player di added" in r.getMessage()]
        assert lines == ["config: g1: player di added"]
    finally:
        server.shutdown()


def test_show_keeps_seconds_only_when_there_are_some() -> None:
    london = zone("Europe/London")
    assert show(datetime(2026, 12, 5, 18, 0, tzinfo=UTC), london) == "Sat 5 Dec 2026 18:00 GMT"
    assert show(datetime(2026, 12, 5, 18, 3, 27, 900, tzinfo=UTC), london) == (
        "Sat 5 Dec 2026 18:03:27 GMT"
    )
