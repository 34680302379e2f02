"""The referee by email (issue 15), on SQLite and PostgreSQL: the referee's key, each
command's effect and reply, the limits, and what forged or stray referee mail gets
(nothing done, and never a word to anyone but the referee)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from snl_pbem.app.games import sync_games
from snl_pbem.cli.main import main
from snl_pbem.config import Config, load_config
from snl_pbem.keys import verify_key
from snl_pbem.store import AuditEntry, Database, ServerKey

REFEREE_KEY = "ref-key-0123456789"


def with_referee_key(config: Config, key: str | None) -> Config:
    """The same config file with ``mail.referee_key`` set to ``key`` (or without one)."""
    lines = [
        line for line in config.path.read_text().splitlines() if not line.startswith("referee_key")
    ]
    if key is not None:
        at = lines.index('referee = "ref@example.org"') + 1
        lines.insert(at, f'referee_key = "{key}"')
    config.path.write_text("\n".join(lines) + "\n")
    return load_config(config.path)


# -- the key: hashed in the database, in step with the config -------------------------------


def server_keys(db: Database) -> list[tuple[str, str, str]]:
    with db.transaction() as s:
        return [(k.name, k.key_hash, k.salt) for k in s.scalars(select(ServerKey))]


def test_sync_keeps_the_referee_key_hashed_with_a_salt_of_its_own(
    db: Database, make_config, tmp_path: Path
) -> None:
    from mailhelpers import T0

    config = make_config()
    assert sync_games(db, config, T0).lines[-1] == "g1: player cy added"
    assert server_keys(db) == []  # none in the config: none stored, commands by mail off

    config = with_referee_key(config, REFEREE_KEY)
    report = sync_games(db, config, T0)
    assert report.lines == [
        "the referee key (mail.referee_key) set: referee commands by mail are on"
    ]
    [(name, key_hash, salt)] = server_keys(db)
    assert name == "referee" and verify_key(REFEREE_KEY.upper(), key_hash, salt)
    assert REFEREE_KEY not in key_hash and REFEREE_KEY not in salt
    assert sync_games(db, config, T0).lines == []  # unchanged: the same hash and salt
    assert server_keys(db) == [(name, key_hash, salt)]

    config = with_referee_key(config, "another-key-98765")
    assert sync_games(db, config, T0).lines == [
        "the referee key (mail.referee_key) changed: the old one no longer works"
    ]
    [(_, new_hash, new_salt)] = server_keys(db)
    assert new_salt != salt and not verify_key(REFEREE_KEY, new_hash, new_salt)
    assert verify_key("another-key-98765", new_hash, new_salt)

    config = with_referee_key(config, None)
    assert sync_games(db, config, T0).lines == [
        "the referee key (mail.referee_key) removed from the config: referee commands by "
        "mail are off"
    ]
    assert server_keys(db) == []
    with db.transaction() as s:
        changes = s.scalars(select(AuditEntry.action).where(AuditEntry.action == "referee-key"))
        assert len(changes.all()) == 3


def test_check_config_warns_when_referee_commands_by_mail_are_off(
    make_config, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config()
    assert main(["check-config", "--config", str(config.path)]) == 0
    warning = "warning: mail.referee_key is not set: referee commands by mail are off"
    assert warning in capsys.readouterr().out
    with_referee_key(config, REFEREE_KEY)
    assert main(["check-config", "--config", str(config.path)]) == 0
    out = capsys.readouterr().out
    assert "referee_key" not in out and REFEREE_KEY not in out


# -- commands by mail -------------------------------------------------------------------------


@pytest.fixture
def referee(intake):
    """The started game g1 (ann, bob, cy; mailhelpers), with a referee key synced."""
    from mailhelpers import T0

    db, config = intake
    config = with_referee_key(config, REFEREE_KEY)
    sync_games(db, config, T0)
    return db, config


def mail(
    body: str,
    sender: str = "ref@example.org",
    tag: str = "r",
    subject: str = "commands",
    headers: str = "",
) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: {subject}\r\n{headers}"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()


def as_referee(*lines: str) -> str:
    return "\n".join((f"KEY {REFEREE_KEY}", *lines))


def send_mail(db, config, raw: bytes, at=None):
    from mailhelpers import T0

    from snl_pbem.app.intake import ingest

    return ingest(db, config, raw, at or T0, "t")


def outbox(db: Database, kind: str | None = None) -> list[tuple[str, str, str]]:
    """(kind, recipient, text) of every message queued of one kind, or of all but the
    welcomes, oldest first."""
    import email
    import email.policy

    from snl_pbem.store import OutboxMessage

    with db.transaction() as s:
        wanted = OutboxMessage.kind != "welcome" if kind is None else OutboxMessage.kind == kind
        query = select(OutboxMessage).where(wanted)
        found = s.scalars(query.order_by(OutboxMessage.id))
        rows = [(r.kind, r.recipient, r.message) for r in found]
    out = []
    for k, to, raw in rows:
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        out.append((k, to, f"Subject: {msg['Subject']}\n{msg.get_content()}"))
    return out


def replies(db: Database) -> list[str]:
    """The texts of the replies to the referee's commands."""
    return [text for _, to, text in outbox(db, "referee-reply") if to == "ref@example.org"]


def game_row(db: Database):
    from snl_pbem.store import Game

    with db.transaction() as s:
        game = s.scalar(select(Game))
        s.expunge(game)
        return game


def deadline(db: Database):
    from snl_pbem.store import Round

    with db.transaction() as s:
        return s.scalar(select(Round.deadline).where(Round.state == "open"))


def audit_log(db: Database, action: str | None = None) -> list[tuple[str, str, str | None, dict]]:
    with db.transaction() as s:
        query = select(AuditEntry).order_by(AuditEntry.id)
        if action is not None:
            query = query.where(AuditEntry.action == action)
        return [(a.action, a.actor, a.via, a.detail) for a in s.scalars(query)]


def test_status_by_mail_is_the_referees_private_status_and_only_theirs(referee) -> None:
    db, config = referee
    send_mail(db, config, mail("KEY ann-key-123\nDICE 5", sender="ann@example.org", tag="a"))
    result = send_mail(db, config, mail(as_referee("STATUS"), tag="s"))
    assert (result.status, result.detail) == ("processed", "referee's commands: 1 done, 0 not done")
    [reply] = replies(db)
    assert "PRIVATE: for the referee only." in reply
    assert "g1: Test game [running]" in reply
    assert "valid orders from 1 of 3" in reply and "ann" in reply and "valid" in reply
    assert REFEREE_KEY not in reply
    # to the referee alone: the only other mail is ann's acknowledgement
    assert [(k, to) for k, to, _ in outbox(db)] == [
        ("ack", "ann@example.org"),
        ("referee-reply", "ref@example.org"),
    ]


def test_a_reply_to_the_referee_is_threaded_and_goes_to_the_configured_address(referee) -> None:
    """Reply-To and a different case in From change nothing: the referee's address from the
    config gets the reply, threaded to the command."""
    from snl_pbem.store import OutboxMessage

    db, config = referee
    raw = mail(
        as_referee("STATUS"),
        sender="Ref <REF@Example.org>",
        tag="thread",
        headers="Reply-To: mallory@evil.example\r\n",
    )
    assert send_mail(db, config, raw).status == "processed"
    with db.transaction() as s:
        [row] = s.scalars(select(OutboxMessage).where(OutboxMessage.kind != "welcome")).all()
        assert row.recipient == "ref@example.org"
        assert b"In-Reply-To: <thread@example.org>" in row.message
        assert b"mallory" not in row.message


def test_extend_pause_resume_close_and_rollback_by_mail(referee) -> None:
    """Each command does what the command line does, tells the players as it does, and is
    audited with the referee's address as the actor, via mail."""
    from datetime import timedelta

    from mailhelpers import T0

    db, config = referee
    first = deadline(db)
    send_mail(db, config, mail(as_referee("EXTEND g1 BY 2d"), tag="e"))
    assert deadline(db) == first + timedelta(days=2)
    assert game_row(db).extended_s == 2 * 86400
    [reply] = replies(db)
    assert "> EXTEND g1 BY 2d" in reply
    assert "Done: g1: deadline now Sun 6 Jan 2030 18:00 GMT; the players are told" in " ".join(
        reply.split()
    )
    notices = outbox(db, "deadline")
    assert sorted(to for _, to, _ in notices) == [
        "ann@example.org",
        "bob@example.org",
        "cy@example.org",
    ]
    assert all("the referee extended the deadline." in text for _, _, text in notices)

    # several commands run in order; the game comes from the GAME line
    send_mail(
        db,
        config,
        mail(as_referee("GAME g1", "PAUSE", "RESUME"), tag="pr"),
        at=T0 + timedelta(hours=1),
    )
    reply = replies(db)[-1]
    assert reply.index("> PAUSE") < reply.index("> RESUME")
    assert "Done: g1: paused; its deadline stops until RESUME" in reply
    assert "Done: g1: resumed; deadline now Sun 6 Jan 2030 18:00 GMT" in reply
    paused = [to for _, to, text in outbox(db, "deadline") if "Round 1 paused" in text]
    assert len(paused) == 3  # the pause told each player once, and so the resume
    resumed = [to for _, to, text in outbox(db, "deadline") if "the deadline did not move" in text]
    assert len(resumed) == 3

    send_mail(db, config, mail(as_referee("CLOSE ROUND g1"), tag="c"), at=T0 + timedelta(hours=2))
    reply = " ".join(replies(db)[-1].split())
    assert "Done: g1: round 1 closed; positions: " in reply and "round 2 open, deadline" in reply
    assert len(outbox(db, "report")) == 3 and len(outbox(db, "referee-summary")) == 1
    early = [text for _, _, text in outbox(db, "deadline") if "closed early" in text]
    assert len(early) == 3  # closed before its deadline: each player told

    send_mail(db, config, mail(as_referee("ROLLBACK g1"), tag="rb"), at=T0 + timedelta(hours=3))
    reply = " ".join(replies(db)[-1].split())
    assert (
        "Done: g1: round 1 reopened (results discarded, its orders kept); the game is paused; "
        "the players are told; its deadline Sun 6 Jan 2030 18:00 GMT is stopped until RESUME; "
        "then CLOSE ROUND or RESUME"
    ) in reply
    assert game_row(db).state == "paused" and game_row(db).rounds_played == 0

    actions = [
        (a, actor, via)
        for a, actor, via, _ in audit_log(db)
        if a in ("extend", "pause", "resume", "close-round", "rollback")
    ]
    assert actions == [
        (a, "ref@example.org", "mail")
        for a in ("extend", "pause", "resume", "close-round", "rollback")
    ]


def test_one_refused_command_leaves_the_others_done(referee) -> None:
    """Each command has a savepoint of its own: the one over max_extend is refused, naming
    the key, and the commands before and after it stand."""
    from datetime import timedelta

    db, config = referee
    first = deadline(db)
    raw = mail(as_referee("EXTEND g1 BY 2d", "EXTEND g1 BY 8d", "RESUME g1", "PAUSE g1"))
    assert send_mail(db, config, raw).detail == "referee's commands: 2 done, 2 not done"
    assert deadline(db) == first + timedelta(days=2)
    assert game_row(db).state == "paused" and game_row(db).extended_s == 2 * 86400
    [reply] = replies(db)
    flat = " ".join(reply.split())
    assert reply.startswith("Subject: Snakes and Ladders: your referee commands: 2 done, 2 not")
    assert (
        "> EXTEND g1 BY 8d NOT DONE: g1: an extension of 8d is over the limit of 7d for one "
        "extension (config.toml: games[0].max_extend)"
    ) in flat
    assert "> RESUME g1 NOT DONE: g1: not paused (it is running)" in flat
    assert "> PAUSE g1 Done: g1: paused" in flat
    # the refused ones queued nothing: one extension and one pause told, each player once
    assert len(outbox(db, "deadline")) == 6


def test_extensions_by_mail_stop_at_the_total_limit(referee) -> None:
    from datetime import timedelta

    db, config = referee
    first = deadline(db)
    for i in range(3):
        send_mail(db, config, mail(as_referee("EXTEND g1 BY 1w"), tag=f"w{i}"))
    send_mail(db, config, mail(as_referee("EXTEND g1 BY 1h"), tag="h"))
    assert deadline(db) == first + timedelta(days=21)
    flat = " ".join(replies(db)[-1].split())
    assert (
        "NOT DONE: g1: 1h more would make 21d1h of extensions in all, over the limit of 21d "
        "(config.toml: games[0].max_total_extend; 21d used so far)"
    ) in flat
    assert "(21d of the 21d of extensions allowed are used)" in " ".join(replies(db)[-2].split())


def test_rollback_by_mail_never_discards_the_next_rounds_orders(referee) -> None:
    from datetime import timedelta

    from mailhelpers import T0

    db, config = referee
    send_mail(db, config, mail(as_referee("CLOSE ROUND"), tag="c"))  # the only game: g1
    later = T0 + timedelta(minutes=5)
    send_mail(
        db, config, mail("KEY bob-key-123\nDICE 3", sender="bob@example.org", tag="b"), at=later
    )
    send_mail(db, config, mail(as_referee("ROLLBACK g1"), tag="rb"), at=later)
    flat = " ".join(replies(db)[-1].split())
    assert (
        "NOT DONE: g1: round 2 already has 1 order set; by mail a rollback never discards "
        "orders (on the server, snl-pbem rollback g1 --force does)"
    ) in flat
    assert game_row(db).rounds_played == 1 and game_row(db).state == "running"


def test_rollback_by_mail_never_reopens_a_game_whose_reveal_went_out(referee) -> None:
    """A finished game with reveal_after_game: every player has seen the board, all dice
    and the trapdoors (R19 lifted), so a replayed round would be played knowing them. By
    mail the rollback is refused and says why; only the server's --force reopens it."""
    from snl_pbem.store import Game

    db, config = referee
    send_mail(db, config, mail(as_referee("CLOSE ROUND"), tag="c"))
    with db.transaction() as s:  # as the last close leaves it, the reveal sent
        game = s.scalar(select(Game))
        game.state, game.reveal_after_game = "over", True
    send_mail(db, config, mail(as_referee("ROLLBACK g1"), tag="rb"))
    flat = " ".join(replies(db)[-1].split())
    assert (
        "NOT DONE: g1: the game is over and its reveal has gone to every player (the board, "
        "all dice and the trapdoors): a replayed round would be played knowing them; by mail "
        "it stays over (on the server, snl-pbem rollback g1 --force reopens it all the same)"
    ) in flat
    assert game_row(db).rounds_played == 1 and game_row(db).state == "over"


def test_a_message_with_no_referee_command_gets_the_list_of_them(referee) -> None:
    db, config = referee
    raw = mail(as_referee("EXTNED g1 BY 2d", "DICE 4", "HELP"), tag="h")
    assert send_mail(db, config, raw).status == "processed"
    flat = " ".join(replies(db)[-1].split())
    assert "DICE, TRAPDOOR, ROLL and CLEAR are a player's: not read here" in flat
    assert "Lines not understood:" in flat and "unknown command 'EXTNED'" in flat
    assert "Referee commands (each message needs KEY and your referee key" in flat
    assert "EXTEND g1 BY 2d the deadline later" in flat
    assert game_row(db).extended_s == 0


def test_two_different_keys_do_nothing(referee) -> None:
    db, config = referee
    raw = mail(as_referee("KEY ann-key-123", "PAUSE g1"), tag="k2")
    assert send_mail(db, config, raw).status == "processed"
    assert "NOT DONE: nothing was done: it has two different KEY lines" in " ".join(
        replies(db)[-1].split()
    )
    assert game_row(db).state == "running"


def test_the_referee_key_is_never_kept_nor_echoed(referee) -> None:
    from snl_pbem.store import InboundMessage

    db, config = referee
    send_mail(db, config, mail(as_referee(f"EXTEND g1 BY {REFEREE_KEY}"), tag="x"))
    send_mail(db, config, mail(as_referee("PAUSE g1"), sender="ann@example.org", tag="y"))
    with db.transaction() as s:
        for raw in s.scalars(select(InboundMessage.raw)):
            assert REFEREE_KEY.encode() not in raw and b"KEY ****" in raw
    for _, _, text in outbox(db):
        assert REFEREE_KEY not in text


# -- hostile mail ------------------------------------------------------------------------------


def notices_to_referee(db: Database) -> list[str]:
    return [text for _, to, text in outbox(db, "referee-notice") if to == "ref@example.org"]


def test_forged_referee_mail_without_the_key_does_nothing_and_costs_one_mail_an_hour(
    referee,
) -> None:
    """Ten forgeries of the referee's address without the key: nothing done, no reply to
    anyone, each audited, and the referee told once; again only after an hour."""
    from datetime import timedelta

    from mailhelpers import T0

    db, config = referee
    first = deadline(db)
    for i in range(10):
        result = send_mail(
            db,
            config,
            mail("GAME g1\nPAUSE\nEXTEND BY 7d", tag=f"f{i}"),
            at=T0 + timedelta(minutes=i),
        )
        assert result.status == "rejected"
        assert result.detail == (
            "referee command refused: it had no KEY line with the referee's key"
        )
    assert game_row(db).state == "running" and deadline(db) == first
    [notice] = notices_to_referee(db)
    assert [k for k, _, _ in outbox(db)] == ["referee-notice"]  # nothing else, to nobody
    flat = " ".join(notice.split())
    assert notice.startswith("Subject: Snakes and Ladders: referee commands refused")
    assert "A message from ref@example.org (as its From line says: it can be forged)" in flat
    assert "it had no KEY line with the referee's key." in flat
    assert "asking for: STATUS" not in flat and "PAUSE EXTEND BY 7d" in flat
    refused = audit_log(db, "referee-refused")
    assert len(refused) == 10
    assert all(actor == "intake" and via == "mail" for _, actor, via, _ in refused)
    assert refused[0][3]["address"] == "ref@example.org" and not refused[0][3]["alarm"]
    send_mail(db, config, mail("PAUSE g1", tag="later"), at=T0 + timedelta(minutes=61))
    assert len(notices_to_referee(db)) == 2


def test_a_wrong_key_from_the_referees_address_does_nothing(referee) -> None:
    db, config = referee
    result = send_mail(db, config, mail("KEY not-the-key-42\nPAUSE g1", tag="w"))
    assert (result.status, result.detail) == (
        "rejected",
        "referee command refused: its KEY was not the referee's key",
    )
    assert game_row(db).state == "running" and replies(db) == []
    [notice] = notices_to_referee(db)
    assert "its KEY was not the referee's key" in " ".join(notice.split())
    assert "not-the-key-42" not in notice


def test_the_referee_key_from_another_address_alarms_the_referee(referee) -> None:
    """The key from a player's address (or behind a From name showing the referee's):
    nothing done, not a word to the sender, and the alarm to the referee, even when a
    forgery without the key already used up the hour's refusal notice."""
    db, config = referee
    send_mail(db, config, mail("PAUSE g1", tag="forged"))  # the hour's plain notice
    for i, sender in enumerate(("ann@example.org", '"ref@example.org" <evil@example.com>')):
        raw = mail(as_referee("STATUS", "PAUSE g1"), sender=sender, tag=f"k{i}")
        result = send_mail(db, config, raw)
        assert result.status == "rejected" and "it gave the referee's key" in result.detail
    assert game_row(db).state == "running"
    recipients = {to for _, to, _ in outbox(db)}
    assert recipients == {"ref@example.org"}  # no status, no reply, nothing to a sender
    plain, alarm = notices_to_referee(db)  # the second alarm falls in the same hour
    assert plain.startswith("Subject: Snakes and Ladders: referee commands refused")
    flat = " ".join(alarm.split())
    assert alarm.startswith(
        "Subject: Snakes and Ladders: ALERT: your referee key was used from another address"
    )
    assert "its From line shows ann@example.org" in flat
    assert "Whoever sent it knows your referee key. Change mail.referee_key" in flat
    assert "asking for: STATUS PAUSE g1" in flat
    alarms = [d for *_, d in audit_log(db, "referee-refused") if d["alarm"]]
    assert [d["address"] for d in alarms] == ["ann@example.org", "evil@example.com"]


def test_the_referee_key_with_a_doubtful_from_line_is_not_obeyed(referee) -> None:
    db, config = referee
    raw = mail(as_referee("PAUSE g1"), sender='"boss@evil.example" <ref@example.org>')
    result = send_mail(db, config, raw)
    assert result.status == "rejected"
    assert "not plainly from ref@example.org" in result.detail
    assert game_row(db).state == "running"
    [alarm] = notices_to_referee(db)
    assert "the From name shows 'boss@evil.example'" in " ".join(alarm.split())


def test_referee_commands_by_mail_are_off_without_a_key(intake) -> None:
    db, config = intake
    result = send_mail(db, config, mail(f"KEY {REFEREE_KEY}\nPAUSE g1"))
    assert result.detail == (
        "referee command refused: referee commands by mail are off: mail.referee_key is not "
        "set in the config"
    )
    assert game_row(db).state == "running"
    assert len(notices_to_referee(db)) == 1


def test_a_referee_word_in_a_players_orders_never_blocks_orders(referee) -> None:
    """ann's orders with PAUSE in them: her orders count, the PAUSE is refused on its line
    in her acknowledgement; bob's orders are untouched; the referee is not troubled."""
    from mailhelpers import orders_of

    db, config = referee
    raw = mail(
        "KEY ann-key-123\nDICE 4\nPAUSE g1\nEXTEND g1 BY 7d",
        sender="ann@example.org",
        subject="[g1] orders",
        tag="a",
    )
    result = send_mail(db, config, raw)
    assert (result.status, result.detail) == ("processed", "orders for round 1 (valid)")
    send_mail(
        db,
        config,
        mail("KEY bob-key-123\nDICE 2", sender="bob@example.org", subject="[g1] orders", tag="b"),
    )
    assert [(o.player, o.dice, o.valid) for o in orders_of(db)] == [
        ("ann", "4", True),
        ("bob", "2", True),
    ]
    assert game_row(db).state == "running" and game_row(db).extended_s == 0
    [(_, to, ack), _] = outbox(db, "ack")
    flat = " ".join(ack.split())
    assert to == "ann@example.org"
    assert (
        '"PAUSE g1": only the referee can give this command (from the referee\'s address, '
        "with the referee's key): not done"
    ) in flat
    assert notices_to_referee(db) == [] and replies(db) == []
    [(_, actor, via, detail)] = audit_log(db, "referee-refused")
    assert (actor, via, detail["address"]) == ("intake", "mail", "ann@example.org")
    assert detail["commands"] == ["PAUSE g1", "EXTEND g1 BY 7d"]


def test_a_referee_word_from_a_stranger_is_read_as_a_strangers_mail(referee) -> None:
    """No referee key, not the referee's address: the words are refused, and the rest is
    a stranger's mail as ever (no reply to an unregistered address)."""
    db, config = referee
    result = send_mail(db, config, mail("GAME g1\nPAUSE", sender="mallory@evil.example"))
    assert result.status == "rejected" and game_row(db).state == "running"
    assert outbox(db) == []


# -- who plays: APPROVE, REFUSE, START, REPLACE by mail ----------------------------------------

SIGNUP_CONFIG = """
timezone = "Europe/London"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{key}"

[[games]]
id = "appr"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "approval"
max_players = 4

[[games]]
id = "g1"
title = "Running game"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""


def join(db: Database, config: Config, who: str, game: str, name: str) -> None:
    """JOIN and CONFIRM from ``who``, as a player does (the code read from our mail)."""
    from mailhelpers import code_in

    send_mail(db, config, mail(f"JOIN {game} {name}", sender=who, tag=f"j-{who}"))
    [(_, _, text)] = [m for m in outbox(db, "code") if m[1] == who]
    code = code_in(text)
    send_mail(db, config, mail(f"CONFIRM {code}", sender=who, tag=f"c-{who}"))


def test_approve_refuse_start_and_replace_by_mail(db: Database, tmp_path: Path) -> None:
    from mailhelpers import T0, key_in

    from snl_pbem.app.games import start_game
    from snl_pbem.store import Player, Signup

    path = tmp_path / "config.toml"
    path.write_text(SIGNUP_CONFIG.format(url=db.url, key=REFEREE_KEY))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    join(db, config, "x1@example.net", "appr", "Xavier")
    join(db, config, "x2@example.net", "appr", "Yo")

    raw = mail(
        as_referee(
            "APPROVE appr Xavier",
            "REFUSE appr Yo",
            "APPROVE appr Nobody",
            "START appr",
            "REPLACE g1 bob dora@example.net",
        ),
        tag="who",
    )
    detail = send_mail(db, config, raw).detail  # serve plans round 1 at once (STARTED)
    assert detail == "referee's commands: 4 done, 1 not done; the game started"
    flat = " ".join(replies(db)[-1].split())
    assert "> APPROVE appr Xavier Done: appr: Xavier approved, seated" in flat
    assert "> REFUSE appr Yo Done: appr: Yo's sign-up refused (they are told)" in flat
    assert "> APPROVE appr Nobody NOT DONE: appr: no sign-up named 'Nobody'" in flat
    assert "> START appr Done: appr: started with 1 player; round 1 deadline" in flat
    assert (
        "> REPLACE g1 bob dora@example.net Done: g1: bob's seat now belongs to "
        "dora@example.net (a new key was mailed)"
    ) in flat
    with db.transaction() as s:
        signups = dict(s.execute(select(Signup.name, Signup.state)).all())
        bob = s.scalar(select(Player).where(Player.name == "bob"))
        assert bob.email == "dora@example.net"
    assert signups == {"Xavier": "seated", "Yo": "refused"}
    assert game_row_named(db, "appr") == "running"
    [(_, _, welcome)] = [m for m in outbox(db, "welcome") if m[1] == "x1@example.net"]
    assert key_in(welcome)
    [(_, _, seat)] = [m for m in outbox(db, "welcome") if m[1] == "dora@example.net"]
    assert "You now play bob's seat" in seat
    # bob's old key is no more
    old = send_mail(
        db, config, mail("GAME g1\nKEY bob-key-123\nDICE 1", sender="bob@example.org", tag="old")
    )
    assert old.status == "rejected"
    done = {(a, actor, via) for a, actor, via, _ in audit_log(db)}
    for action in ("signup-seated", "signup-refused", "start", "replace"):
        assert (action, "ref@example.org", "mail") in done, action


def test_approve_by_mail_from_a_forger_does_nothing(db: Database, tmp_path: Path) -> None:
    from mailhelpers import T0

    from snl_pbem.store import Signup

    path = tmp_path / "config.toml"
    path.write_text(SIGNUP_CONFIG.format(url=db.url, key=REFEREE_KEY))
    config = load_config(path)
    sync_games(db, config, T0)
    join(db, config, "x1@example.net", "appr", "Xavier")
    result = send_mail(db, config, mail("APPROVE appr Xavier", tag="forged"))  # no key
    assert result.status == "rejected"
    # a joiner approving themselves with a guessed key: refused on its line, nothing done
    send_mail(
        db,
        config,
        mail("KEY guess-123456\nAPPROVE appr Xavier", sender="x1@example.net", tag="self"),
    )
    with db.transaction() as s:
        assert s.scalar(select(Signup.state)) == "waiting"
    assert game_row_named(db, "appr") == "new"


def game_row_named(db: Database, name: str) -> str:
    from snl_pbem.store import Game

    with db.transaction() as s:
        return s.scalar(select(Game.state).where(Game.name == name))


def test_a_referee_who_plays_keeps_their_orders(referee) -> None:
    """Orders with a player's key from the referee's address, a referee word beside them:
    the orders count (the word is refused on its line); without orders it would be the
    referee's mail, refused whole for want of the referee key."""
    from mailhelpers import orders_of

    db, config = referee
    raw = mail("KEY ann-key-123\nDICE 4\nPAUSE g1", subject="[g1] orders", tag="rp")
    result = send_mail(db, config, raw)
    assert (result.status, result.detail) == ("processed", "orders for round 1 (valid)")
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4")]
    assert game_row(db).state == "running"


# -- the order written (issue 21) --------------------------------------------------------------

J1_CONFIG = """
timezone = "Europe/London"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{key}"

[[games]]
id = "j1"
title = "Issue game"
board = "standard"
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""


def test_commands_run_and_are_answered_in_the_order_written(db: Database, tmp_path: Path) -> None:
    """The referee's mail of issue 21, as sent: STATUS, then EXTEND, then a PAUSE of a game
    that does not exist. The reply answers them in that order, and STATUS shows the deadline
    as it was before the EXTEND below it; a STATUS after them shows the new one."""
    from mailhelpers import T0

    from snl_pbem.app.games import start_game

    path = tmp_path / "config.toml"
    path.write_text(J1_CONFIG.format(url=db.url, key=REFEREE_KEY))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "j1", T0)
    raw = mail(as_referee("STATUS", "EXTEND j1 BY 10m", "PAUSE nosuchgame"), tag="order")
    detail = send_mail(db, config, raw).detail
    assert detail == "referee's commands: 2 done, 1 not done"
    [reply] = replies(db)
    flat = " ".join(reply.split())
    status, extend, pause = (
        flat.index("> STATUS Done: the games as they are at this point of your message:"),
        flat.index("> EXTEND j1 BY 10m Done: j1: deadline now Fri 4 Jan 2030 18:10 GMT"),
        flat.index("> PAUSE nosuchgame NOT DONE: no game 'nosuchgame'"),
    )
    assert status < extend < pause
    shown = flat[status:extend]
    assert "round 1 (one turn), deadline Fri 4 Jan 2030 18:00 GMT" in shown  # not yet extended
    assert "18:10" not in shown

    raw = mail(as_referee("EXTEND j1 BY 5m", "STATUS", "PAUSE j1", "STATUS"), tag="order2")
    assert send_mail(db, config, raw).detail == "referee's commands: 4 done, 0 not done"
    flat = " ".join(replies(db)[-1].split())
    first, second = flat.split("> STATUS")[1:]
    assert "j1: Issue game [running]" in first and "deadline Fri 4 Jan 2030 18:15 GMT" in first
    assert "j1: Issue game [paused]" in second
    assert flat.index("> EXTEND j1 BY 5m") < flat.index("> STATUS") < flat.index("> PAUSE j1")


def test_status_lines_past_the_last_command_obeyed_show_one_block(referee) -> None:
    """Only the first five commands of a message are obeyed: two STATUS lines below the
    fifth, a sixth command between them, would show the same thing, so the reply has one
    status block, not two alike."""
    db, config = referee
    lines = [f"PAUSE nosuchgame{i}" for i in range(5)] + ["STATUS", "PAUSE g1", "STATUS"]
    send_mail(db, config, mail(as_referee(*lines), tag="cap"))
    flat = " ".join(replies(db)[-1].split())
    assert flat.count("the games as they are at this point of your message") == 1
    assert flat.index("PAUSE nosuchgame4") < flat.index("> STATUS")
    assert game_row(db).state == "running"  # the sixth command is not obeyed


def test_a_game_started_by_mail_is_in_the_typed_result(db: Database, tmp_path: Path) -> None:
    """serve plans round 1 at once from the ingest result's ``started`` (issue 22), not
    from the words of the detail: a START that starts the game sets it; a PAUSE, and a
    START refused (its savepoint rolled back), do not."""
    from mailhelpers import T0

    from snl_pbem.app.games import start_game

    path = tmp_path / "config.toml"
    path.write_text(SIGNUP_CONFIG.format(url=db.url, key=REFEREE_KEY))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    join(db, config, "x1@example.net", "appr", "Xavier")

    paused = send_mail(db, config, mail(as_referee("PAUSE g1"), tag="p1"))
    assert paused.detail == "referee's commands: 1 done, 0 not done"
    assert not paused.started
    refused = send_mail(db, config, mail(as_referee("START g1"), tag="s0"))  # running already
    assert refused.detail == "referee's commands: 0 done, 1 not done"
    assert not refused.started
    started = send_mail(db, config, mail(as_referee("APPROVE appr Xavier", "START appr"), tag="s1"))
    assert started.detail == "referee's commands: 2 done, 0 not done; the game started"
    assert started.started and started.game == "appr"
    assert game_row_named(db, "appr") == "running"
