"""The referee's commands end to end, as a referee types them."""

from __future__ import annotations

import json

import pytest

from snl_pbem.cli.main import main
from snl_pbem.store.migrate import head_revision


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_referee_commands(make_config, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config()
    cfg = ("--config", str(config.path))
    code, _, err = run(capsys, "status", *cfg)
    assert code == 2 and "run 'snl-pbem db upgrade' first" in err
    code, out, _ = run(capsys, "db", "upgrade", *cfg)
    head = head_revision()
    assert code == 0 and f"database schema: empty -> {head}" in out
    assert f"already at {head}" in run(capsys, "db", "upgrade", *cfg)[1]

    code, out, _ = run(capsys, "start", "g1", *cfg)
    assert code == 0 and "config: g1: new game with 3 players" in out
    assert "g1: started; round 1 deadline Fri 4 Jan 2030 18:00 GMT; 3 keys generated" in out
    code, _, err = run(capsys, "start", "g1", *cfg)
    assert code == 2 and "already started" in err

    code, out, _ = run(capsys, "status", "g1", "--json", *cfg)
    [game] = json.loads(out)
    assert (
        code == 0 and game["round"] == 1 and [p["orders"] for p in game["players"]] == ["none"] * 3
    )
    code, out, _ = run(capsys, "status", *cfg)
    assert "round 1 (one turn), deadline Fri 4 Jan 2030 18:00 GMT; valid orders from 0 of 3" in out

    code, out, _ = run(capsys, "extend", "g1", "--by", "1d", *cfg)
    assert code == 0 and "deadline now Sat 5 Jan 2030 18:00 GMT" in out
    assert run(capsys, "extend", "g1", "--by", "soon", *cfg)[0] == 2
    assert run(capsys, "pause", "g1", *cfg)[0] == 0
    assert "resumed" in run(capsys, "resume", "g1", *cfg)[1]

    code, out, _ = run(capsys, "close-round", "g1", *cfg)
    assert code == 0 and "g1: round 1 closed; positions: " in out and "round 2 open" in out
    code, out, _ = run(capsys, "rollback", "g1", *cfg)
    assert code == 0 and "round 1 reopened" in out and "paused" in out
    code, out, err = run(capsys, "close-round", "nope", *cfg)
    assert code == 2 and "no game 'nope' in the database (games: g1)" in err


def test_rollback_of_a_revealed_game_needs_force(make_config, capsys) -> None:
    """A finished game whose reveal went to the players (the board, all dice, the
    trapdoors: R19 no longer holds) is reopened only with --force, and the refusal says
    why."""
    from sqlalchemy import select

    from snl_pbem.store import Database, Game

    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    assert run(capsys, "close-round", "g1", *cfg)[0] == 0
    db = Database(config.settings.database.url)
    with db.transaction() as s:  # as the last close leaves it, the reveal sent
        game = s.scalar(select(Game))
        game.state, game.reveal_after_game = "over", True
    code, _, err = run(capsys, "rollback", "g1", *cfg)
    assert code == 2 and " ".join(err.split()).endswith(
        "g1: the game is over and its reveal has gone to every player (the board, all dice "
        "and the trapdoors): a replayed round would be played knowing them; rollback --force "
        "reopens it all the same"
    )
    with db.transaction() as s:
        assert s.scalar(select(Game.state)) == "over"
    code, out, _ = run(capsys, "rollback", "g1", "--force", *cfg)
    assert code == 0 and "round 1 reopened" in out
    with db.transaction() as s:
        assert s.scalar(select(Game.state)) == "paused"
    db.dispose()


def test_notify_restored_twice_for_one_restore_needs_again(make_config, capsys) -> None:
    """A second notify-restored for the same restore (the same records) would send every
    player the notice again: it is refused, saying when they were told, unless --again."""
    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    code, out, _ = run(capsys, "notify-restored", *cfg)
    assert code == 0 and "g1: round 1 open" in out and "3 told" in out
    code, out, err = run(capsys, "notify-restored", *cfg)
    assert code == 2 and "3 told" not in out
    assert "g1: its players were told of this restore at " in err
    assert "already: nobody told (notify-restored --again tells them once more)" in err
    code, out, _ = run(capsys, "notify-restored", "--again", *cfg)
    assert code == 0 and "3 told" in out


def test_ingest_command_replays_saved_mail(make_config, capsys, tmp_path) -> None:
    from pathlib import Path

    config = make_config([{"keys": True}])
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    eml = tmp_path / "ann.eml"
    eml.write_bytes(
        b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <c1@x.org>\r\n\r\n"
        b"KEY ann-key-123\r\nDICE 5\r\n"
    )
    code, out, err = run(capsys, "ingest", str(eml), str(eml), str(Path("missing.eml")), *cfg)
    assert code == 2 and "missing.eml: cannot read" in err
    assert f"{eml}: processed (orders for round 1 (valid))" in out
    assert f"{eml}: duplicate (already stored)" in out
    assert "valid orders from 1 of 3" in run(capsys, "status", "g1", *cfg)[1]


def test_inbound_set_aside_mail_is_listed_shown_and_retried(
    make_config, capsys, tmp_path, monkeypatch
) -> None:
    """A message that processing could not handle (a bug, here made on purpose) is set aside;
    the referee lists it, reads it as received, and runs it again once the cause is fixed."""
    from snl_pbem.app.intake import pipeline as intake

    config = make_config([{"keys": True}])
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    assert run(capsys, "inbound", "list", *cfg)[1] == "no incoming mail set aside\n"
    eml = tmp_path / "ann.eml"
    eml.write_bytes(
        b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <s1@x.org>\r\n\r\n"
        b"KEY ann-key-123\r\nDICE 5\r\n"
    )

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug in processing")

    monkeypatch.setattr(intake, "_process", broken)
    code, out, _ = run(capsys, "ingest", str(eml), *cfg)
    assert code == 1 and "set-aside (RuntimeError: a bug in processing)" in out
    code, out, _ = run(capsys, "inbound", "list", *cfg)
    [line] = out.splitlines()
    number = line.split()[0]
    assert "set-aside" in line and "ann@example.org" in line and "a bug in processing" in line
    code, out, err = run(capsys, "inbound", "show", number, *cfg)
    assert code == 0 and out.startswith("From: ann@example.org") and "DICE 5" in out
    assert f"inbound {number}: set-aside" in err and "RuntimeError: a bug in processing" in err
    assert run(capsys, "inbound", "retry", number, *cfg)[0] == 1  # not fixed yet: still aside
    monkeypatch.undo()
    code, out, _ = run(capsys, "inbound", "retry", number, *cfg)
    assert code == 0 and f"inbound {number}: processed (orders for round 1 (valid))" in out
    retries = [
        (actor, via) for action, actor, via, _ in audit_rows(config) if action == "inbound-retry"
    ]
    assert retries == [("referee", "cli")] * 2  # the one that failed again is audited too
    assert "valid orders from 1 of 3" in run(capsys, "status", "g1", *cfg)[1]
    code, _, err = run(capsys, "inbound", "retry", number, *cfg)
    assert code == 2 and "it is processed, not set aside" in err
    code, _, err = run(capsys, "inbound", "show", *cfg)
    assert code == 2 and "give the message's number" in err
    assert run(capsys, "inbound", "list", *cfg)[1] == "no incoming mail set aside\n"
    assert "processed" in run(capsys, "inbound", "list", "--all", *cfg)[1]


# -- outbox list|show|retry, a bounced welcome, a locked database ---------------------------


def drain_to(sink, config) -> None:
    """The running server's sender, once: everything due goes to the SMTP sink."""
    from snl_pbem.app.outbox import drain_outbox
    from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
    from snl_pbem.store import Database
    from snl_pbem.timeutil import utcnow

    db = Database(config.database_url)
    sender = SmtpSender(SmtpConfig(sink.host, sink.port, "none", timeout=10), "snl@example.org")
    try:
        drain_outbox(db, config, sender, utcnow, worker="test")
    finally:
        sender.close()
        db.dispose()


def outbox_rows(config) -> list:
    from sqlalchemy import select

    from snl_pbem.store import Database, OutboxMessage

    db = Database(config.database_url)
    try:
        with db.transaction() as s:
            return list(s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)))
    finally:
        db.dispose()


def audit_actions(config) -> list:
    from sqlalchemy import select

    from snl_pbem.store import AuditEntry, Database

    db = Database(config.database_url)
    try:
        with db.transaction() as s:
            entries = s.scalars(select(AuditEntry).order_by(AuditEntry.id))
            return [(a.action, a.detail) for a in entries]
    finally:
        db.dispose()


def test_outbox_failed_mail_is_listed_shown_and_retried(make_config, capsys, smtp_sink) -> None:
    """The relay refuses ann's welcome for good (a 550 during a misconfiguration): the referee
    lists it, reads its headers (never its key), and queues it again; the sender sends it."""
    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    assert run(capsys, "outbox", "list", *cfg)[1] == "no failed mail\n"
    smtp_sink.handler.script = {"ann@example.org": ["550"]}
    drain_to(smtp_sink, config)
    welcome = next(r for r in outbox_rows(config) if r.recipient == "ann@example.org")
    assert welcome.status == "failed" and b"order key" in welcome.message  # never sent: intact

    code, out, _ = run(capsys, "outbox", "list", *cfg)
    header, line = out.splitlines()
    assert header.split()[:3] == ["id", "game", "kind"]
    assert line.split()[:6] == [str(welcome.id), "g1", "welcome", "ann@example.org", "failed", "1"]
    assert "550 5.1.1 No such user" in line
    sent = run(capsys, "outbox", "list", "--status", "sent", "--game", "g1", *cfg)[1]
    assert "bob@example.org" in sent and "cy@example.org" in sent and "ann@" not in sent
    assert "delivery-failure" in run(capsys, "outbox", "list", "--status", "all", *cfg)[1]
    assert "outbox list --game g1" in run(capsys, "status", "g1", *cfg)[1]

    code, out, err = run(capsys, "outbox", "show", str(welcome.id), *cfg)
    head, body = welcome.message.split(b"\r\n\r\n", 1)
    assert code == 0 and out.encode() == head + b"\r\n" and b"order key" in body  # no body
    assert "To: ann@example.org" in out and f"Message-ID: {welcome.message_id}" in out
    assert f"outbox {welcome.id}: failed, welcome to ann@example.org (game g1)" in err
    assert "headers only: the body holds ann@example.org's order key" in err

    for argv, message in (
        (("show", "999"), "snl-pbem outbox: outbox 999: no such message\n"),
        (("retry", "999"), "snl-pbem outbox: outbox 999: no such message\n"),
    ):
        code, out, err = run(capsys, "outbox", *argv, *cfg)
        assert (code, out, err) == (2, "", message)
    bob = next(r for r in outbox_rows(config) if r.recipient == "bob@example.org")
    code, _, err = run(capsys, "outbox", "retry", str(bob.id), *cfg)
    assert code == 2 and "it is sent, not failed" in err
    assert run(capsys, "outbox", "retry", *cfg)[0] == 2  # an id or --all-failed
    assert run(capsys, "outbox", "retry", str(welcome.id), "--all-failed", *cfg)[0] == 2

    code, out, _ = run(capsys, "outbox", "retry", str(welcome.id), *cfg)
    assert code == 0 and f"outbox {welcome.id}: welcome to ann@example.org queued again" in out
    again = next(r for r in outbox_rows(config) if r.id == welcome.id)
    assert (again.status, again.attempts, again.last_error) == ("pending", 0, None)
    [(_, detail)] = [a for a in audit_actions(config) if a[0] == "mail-retry"]
    assert detail["outbox"] == welcome.id and "550" in detail["last_error"]
    assert [
        (actor, via) for action, actor, via, _ in audit_rows(config) if action == "mail-retry"
    ] == [("referee", "cli")]
    drain_to(smtp_sink, config)  # the relay works again
    assert [d.recipient for d in smtp_sink.delivered].count("ann@example.org") == 1
    assert next(r for r in outbox_rows(config) if r.id == welcome.id).status == "sent"
    assert run(capsys, "outbox", "list", *cfg)[1] == "no failed mail\n"
    code, _, err = run(capsys, "outbox", "retry", str(welcome.id), *cfg)
    assert code == 2 and "it is sent, not failed" in err

    # once kept for keep_sent_mail, the referee's notice is its headers and fingerprint
    from datetime import timedelta

    from snl_pbem.app.retention import purge_sent_mail
    from snl_pbem.store import Database
    from snl_pbem.timeutil import utcnow

    notice = next(r for r in outbox_rows(config) if r.kind == "delivery-failure")
    db = Database(config.database_url)
    with db.transaction() as s:
        assert purge_sent_mail(s, utcnow() + timedelta(days=91), timedelta(days=90))[0] >= 1
    db.dispose()
    code, out, err = run(capsys, "outbox", "show", str(notice.id), *cfg)
    assert code == 0 and out.startswith("X-SNL-PBEM-Trimmed: body removed ")
    assert "To: ref@example.org" in out and "X-SNL-PBEM-Lines:" in out
    assert f"outbox {notice.id}: its body was removed after keep_sent_mail" in err


def test_outbox_retry_all_failed_keeps_mail_for_a_changed_address(
    make_config, capsys, smtp_sink
) -> None:
    """retry --all-failed queues every failed message, except one written to an address the
    config no longer gives its player: it may hold a key, and the old address a stranger's."""
    from snl_pbem.app.games import sync_games
    from snl_pbem.config import load_config
    from snl_pbem.store import Database
    from snl_pbem.timeutil import utcnow

    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    smtp_sink.handler.script = {"ann@example.org": ["550"], "bob@example.org": ["550"]}
    drain_to(smtp_sink, config)
    failed = {r.recipient: r.id for r in outbox_rows(config) if r.status == "failed"}
    assert set(failed) == {"ann@example.org", "bob@example.org"}
    config.path.write_text(config.path.read_text().replace("bob@example.org", "bob@example.net"))
    db = Database(config.database_url)
    sync_games(db, load_config(config.path), utcnow())  # what a reload does
    db.dispose()

    code, _, err = run(capsys, "outbox", "retry", "--all-failed", "--game", "nope", *cfg)
    assert code == 2 and "no game 'nope'" in err
    code, _, err = run(capsys, "outbox", "retry", str(failed["bob@example.org"]), *cfg)
    assert code == 2 and "bob@example.org is no longer a player's address" in err
    code, out, err = run(capsys, "outbox", "retry", "--all-failed", *cfg)
    assert code == 0 and f"outbox {failed['ann@example.org']}: welcome to ann@" in out
    assert f"outbox {failed['bob@example.org']}: left failed" in err
    states = {r.recipient: r.status for r in outbox_rows(config) if r.kind == "welcome"}
    assert states["ann@example.org"] == "pending" and states["bob@example.org"] == "failed"
    code, out, err = run(capsys, "outbox", "retry", "--all-failed", "--game", "g1", *cfg)
    assert (code, out) == (0, "") and "left failed" in err  # only bob's is left: it stays
    assert len([a for a in audit_actions(config) if a[0] == "mail-retry"]) == 1


def test_a_bounced_welcome_from_start_alerts_the_referee(
    make_config, capsys, smtp_sink, tmp_path
) -> None:
    """snl-pbem start mails the welcomes; ann's comes back as a Postfix bounce. ingest shows
    which outbox message it returns; the referee is mailed about ann, by name; outbox list
    shows the welcome as bounced."""
    from mailhelpers import CORPUS

    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    drain_to(smtp_sink, config)
    welcome = next(r for r in outbox_rows(config) if r.recipient == "ann@example.org")
    bounce = tmp_path / "bounce.eml"
    bounce.write_bytes(
        (CORPUS / "bounces" / "postfix.eml")
        .read_bytes()
        .replace(b"<snl.5f0c2b7e9a1d4c3b8e6f7a9b0c1d2e3f@example.org>", welcome.message_id.encode())
    )
    code, out, _ = run(capsys, "ingest", str(bounce), *cfg)
    assert code == 0 and f"ignored (bounce of outbox {welcome.id}: welcome to ann@" in out
    [alert] = [r for r in outbox_rows(config) if r.kind == "bounce-alert"]
    assert alert.recipient == "ref@example.org"
    text = " ".join(alert.message.decode().replace("=\r\n", "").split())
    assert "Subject: [g1] ann never got their order key: the welcome mail bounced" in text
    assert "ann (ann@example.org) never got their order key" in text
    assert "Their key was generated" in text  # make_config gives no keys: start made them
    line = run(capsys, "outbox", "list", "--status", "bounced", *cfg)[1].splitlines()[1]
    assert line.split()[:5] == [str(welcome.id), "g1", "welcome", "ann@example.org", "bounced"]
    assert "bounced: 550 5.1.1" in line


def test_a_locked_database_is_reported_in_one_line(
    make_config, capsys, monkeypatch, db_url
) -> None:
    """close-round while another process holds the lock it needs (SQLite: the write lock;
    PostgreSQL: the game's row, as a concurrent close holds it): one line saying so and how
    long it waited, exit status 1; nothing half done, and it works once the lock is gone."""
    import sqlite3

    from sqlalchemy import create_engine, text

    from snl_pbem.cli import referee as cli_referee

    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    monkeypatch.setattr(cli_referee, "LOCK_WAIT_SECONDS", 0.5)
    if db_url.startswith("sqlite"):
        blocker = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        release = blocker.rollback
    else:
        engine = create_engine(db_url)
        holder = engine.connect()
        holder.execute(text("SELECT id FROM games WHERE key = 'g1' FOR UPDATE"))
        release = holder.rollback
    try:
        code, out, err = run(capsys, "close-round", "g1", *cfg)
    finally:
        release()
        if not db_url.startswith("sqlite"):
            holder.close()
            engine.dispose()
        else:
            blocker.close()
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert line.startswith(
        "snl-pbem close-round: the database is locked by another process (waited "
    ), line
    waited = float(line.split("(waited ")[1].split(" s)")[0])
    assert 0.5 <= waited < 10 and line.endswith("; try again")
    assert "round 1 (one turn)" in run(capsys, "status", "g1", *cfg)[1]  # still open
    code, out, _ = run(capsys, "close-round", "g1", *cfg)
    assert code == 0 and "g1: round 1 closed" in out


# -- extension caps, the pause notice, the audit's "via" --------------------------------------


def audit_rows(config) -> list[tuple[str, str, str | None, dict]]:
    """(action, actor, via, detail) of every audit entry, oldest first."""
    from sqlalchemy import select

    from snl_pbem.store import AuditEntry, Database

    db = Database(config.database_url)
    try:
        with db.transaction() as s:
            entries = s.scalars(select(AuditEntry).order_by(AuditEntry.id))
            return [(a.action, a.actor, a.via, a.detail) for a in entries]
    finally:
        db.dispose()


def test_extensions_stop_at_the_games_limits_naming_the_key(make_config, capsys) -> None:
    """One extension at most max_extend; all of them together at most max_total_extend. A
    move earlier does not count (nor give back), nor does a pause; a refusal names the key."""
    from sqlalchemy import select

    from snl_pbem.store import Database, Game

    config = make_config(extra='max_extend = "2d"\nmax_total_extend = "3d"\n')
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    code, out, err = run(capsys, "extend", "g1", "--by", "2d1s", *cfg)
    assert (code, out) == (2, "")
    assert err == (
        "snl-pbem extend: g1: an extension of 2d1s is over the limit of 2d for one "
        "extension (config.toml: games[0].max_extend)\n"
    )
    assert run(capsys, "extend", "g1", "--by", "2d", *cfg)[1] == (
        "g1: deadline now Sun 6 Jan 2030 18:00 GMT\n"
    )
    code, _, err = run(capsys, "extend", "g1", "--by", "1d1s", *cfg)
    assert code == 2 and err == (
        "snl-pbem extend: g1: 1d1s more would make 3d1s of extensions in all, over the "
        "limit of 3d (config.toml: games[0].max_total_extend; 2d used so far)\n"
    )
    # earlier by a day: allowed, and it gives nothing back
    assert run(capsys, "extend", "g1", "--until", "2030-01-05T18:00", *cfg)[0] == 0
    assert run(capsys, "pause", "g1", *cfg)[0] == 0  # a pause is no extension
    assert run(capsys, "resume", "g1", *cfg)[0] == 0
    assert run(capsys, "extend", "g1", "--by", "1d", *cfg)[0] == 0  # 3d in all: the limit
    code, _, err = run(capsys, "extend", "g1", "--by", "1s", *cfg)
    assert code == 2 and "max_total_extend; 3d used so far" in err
    db = Database(config.database_url)
    try:
        with db.transaction() as s:
            assert s.scalar(select(Game.extended_s)) == 3 * 86400
    finally:
        db.dispose()
    extends = [row for row in audit_rows(config) if row[0] == "extend"]
    assert len(extends) == 3  # the refused ones changed nothing, not even the audit log
    assert [d["extended_s"] for *_, d in extends] == [2 * 86400, 2 * 86400, 3 * 86400]


def test_a_pause_is_announced_to_every_active_player(make_config, capsys) -> None:
    """pause tells each player still in the game, once: the deadline stops, orders already
    sent count, new ones wait for the resume (the intake refuses them while paused)."""
    import email
    import email.policy

    config = make_config([{"players": ["ann", "bob", "cy", "dee"]}])
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    config.path.write_text(
        config.path.read_text().replace('  { name = "dee", email = "dee@example.org" },\n', "")
    )
    assert run(capsys, "check-config", *cfg)[0] == 0
    from snl_pbem.app.games import sync_games
    from snl_pbem.config import load_config
    from snl_pbem.store import Database
    from snl_pbem.timeutil import utcnow

    db = Database(config.database_url)
    sync_games(db, load_config(config.path), utcnow())  # dee left: no mail for her
    db.dispose()
    code, out, _ = run(capsys, "pause", "g1", *cfg)
    assert code == 0 and "players are told" in out
    notices = [r for r in outbox_rows(config) if r.kind == "deadline"]
    assert sorted(r.recipient for r in notices) == [
        "ann@example.org",
        "bob@example.org",
        "cy@example.org",
    ]
    for row in notices:
        msg = email.message_from_bytes(row.message, policy=email.policy.default)
        body = " ".join(msg.get_content().split())
        assert msg["Subject"] == "[g1] Round 1 paused"
        assert "the referee paused the game." in body
        assert "Deadline was: Fri 4 Jan 2030 18:00 GMT" in body
        assert "The deadline is stopped until the referee resumes the game" in body
        assert "Orders you have already sent still count" in body
        assert "no new orders are accepted: send any change after it resumes" in body
    assert run(capsys, "pause", "g1", *cfg)[0] == 2  # already paused: no second notice
    assert len([r for r in outbox_rows(config) if r.kind == "deadline"]) == 3


def test_each_referee_command_is_audited_as_given_on_the_command_line(make_config, capsys) -> None:
    config = make_config()
    cfg = ("--config", str(config.path))
    assert run(capsys, "db", "upgrade", *cfg)[0] == 0
    assert run(capsys, "start", "g1", *cfg)[0] == 0
    for argv in (
        ("extend", "g1", "--by", "1d"),
        ("pause", "g1"),
        ("resume", "g1"),
        ("close-round", "g1"),
        ("rollback", "g1"),
    ):
        assert run(capsys, *argv, *cfg)[0] == 0, argv
    mine = {
        action: (actor, via)
        for action, actor, via, _ in audit_rows(config)
        if action in ("start", "extend", "pause", "resume", "close-round", "rollback")
    }
    assert mine == dict.fromkeys(
        ("start", "extend", "pause", "resume", "close-round", "rollback"), ("referee", "cli")
    )
    game_added = [
        (actor, via) for action, actor, via, _ in audit_rows(config) if action == "game-added"
    ]
    assert game_added == [("start", None)]  # the config's own changes: no person's "via"
