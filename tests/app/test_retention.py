"""Raw inbound mail is cut to its headers once handled and older than keep_processed_mail
(never mail set aside or not yet processed); the scheduler does it at start and daily. The
new [mail] limits are checked and documented. Database tests run on SQLite and PostgreSQL."""

from __future__ import annotations

import email
import email.policy
import hashlib
import logging
import time
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, select

from snl_pbem.app.retention import (
    LARGEST_TRIMMED,
    TRIMMED_HEADER,
    headers_only,
    purge_raw_mail,
    purge_sent_mail,
)
from snl_pbem.config import MailSettings, load_config
from snl_pbem.errors import ConfigError
from snl_pbem.runners.scheduler import PURGE_BATCH, RoundScheduler, make_scheduler
from snl_pbem.store import Database, InboundMessage, OutboxMessage

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
KEEP = timedelta(days=90)
OLD = NOW - KEEP - timedelta(seconds=1)
RECENT = NOW - KEEP + timedelta(seconds=1)

ORDER = (
    b"Return-Path: <ann@example.org>\r\nFrom: Ann <ann@example.org>\r\nTo: snl@example.org\r\n"
    b"Subject: [g1] orders\r\nDate: Sat, 02 Mar 2030 10:00:00 +0000\r\n"
    b"Message-ID: <{tag}@example.org>\r\n\r\nKEY ann-key-123\r\nDICE 4\r\n\r\n-- \r\nAnn\r\n"
)


def add(db: Database, status: str, at: datetime, raw: bytes | None = None, tag: str = "") -> int:
    raw = raw if raw is not None else ORDER.replace(b"{tag}", (tag or status).encode())
    with db.transaction() as s:
        row = InboundMessage(
            message_id=f"<{tag or status}@example.org>",
            sha256=hashlib.sha256(raw).hexdigest(),
            source="test",
            received_at=at,
            raw=raw,
            status=status,
            sender="ann@example.org",
        )
        s.add(row)
        s.flush()
        return row.id


def raws(db: Database) -> dict[int, bytes]:
    with db.transaction() as s:
        return dict(s.execute(select(InboundMessage.id, InboundMessage.raw)).all())


def purge(db: Database, now: datetime = NOW, keep: timedelta | None = KEEP, **kw: int) -> int:
    with db.transaction() as s:
        return purge_raw_mail(s, now, keep, **kw)


def test_handled_mail_older_than_keep_is_cut_to_its_headers(db: Database) -> None:
    trimmable = {st: add(db, st, OLD) for st in ("processed", "rejected", "ignored", "duplicate")}
    kept = {st: add(db, st, OLD) for st in ("set-aside", "new")}  # set aside / not yet processed
    kept["recent"] = add(db, "processed", RECENT, tag="recent")
    before = raws(db)
    with db.transaction() as s:
        hashes = dict(s.execute(select(InboundMessage.id, InboundMessage.sha256)).all())

    assert purge(db) == 4
    after = raws(db)
    for row_id in kept.values():
        assert after[row_id] == before[row_id]
    for row_id in trimmable.values():
        trimmed = after[row_id]
        assert trimmed.startswith(TRIMMED_HEADER + b"body removed 2030-06-01T12:00:00Z, kept 90d")
        assert b"KEY ann-key-123" not in trimmed and b"DICE" not in trimmed  # the key is gone
        message = email.message_from_bytes(trimmed, policy=email.policy.default)
        assert message["From"] == "Ann <ann@example.org>"  # who sent what, when
        assert message["Subject"] == "[g1] orders"
        assert message["Date"] == "Sat, 02 Mar 2030 10:00:00 +0000"
        assert message.get_content().strip() == ""
        assert trimmed.endswith(b"@example.org>\r\n\r\n")
        assert f"{len(before[row_id])} bytes as received".encode() in trimmed
    with db.transaction() as s:  # the same message arriving again is still recognised
        assert dict(s.execute(select(InboundMessage.id, InboundMessage.sha256)).all()) == hashes

    assert purge(db) == 0  # done once
    assert purge(db, NOW + timedelta(days=365)) == 1  # the recent one, in its time
    assert raws(db)[kept["set-aside"]] == before[kept["set-aside"]]
    assert purge(db, NOW + timedelta(days=3650), keep=None) == 0  # false: keep forever


def test_odd_messages_are_trimmed_once_and_stay_small(db: Database) -> None:
    huge_header = b"X-Junk: " + b"y" * 70 + b"\r\n"
    messages = {
        "lf": b"From: a@example.org\nSubject: s\n\nsecret text\n",
        "no-body": b"From: a@example.org\r\nSubject: s\r\n",
        "no-headers": b"\r\nonly a body\r\n" + b"x" * 5000,
        "header-flood": b"From: a@example.org\r\n" + huge_header * 2000 + b"\r\nbody",
        "forged-mark": TRIMMED_HEADER + b"mine\r\nFrom: a@example.org\r\n\r\n" + b"z" * 200_000,
        "one-line": b"x" * 100_000,
    }
    ids = {name: add(db, "rejected", OLD, raw, tag=name) for name, raw in messages.items()}
    assert purge(db) == len(messages)
    after = raws(db)
    for name, row_id in ids.items():
        assert after[row_id].startswith(TRIMMED_HEADER), name
        assert len(after[row_id]) <= LARGEST_TRIMMED, name
    assert after[ids["lf"]].endswith(b"Subject: s\n\n") and b"secret" not in after[ids["lf"]]
    assert after[ids["no-body"]].endswith(b"Subject: s\r\n\r\n")
    assert b"only a body" not in after[ids["no-headers"]]
    assert b"headers cut at" in after[ids["header-flood"]]
    assert b"zzz" not in after[ids["forged-mark"]]  # writing the mark oneself does not help
    assert purge(db) == 0


def test_limit_trims_the_oldest_first(db: Database) -> None:
    ids = [add(db, "processed", OLD - timedelta(days=i), tag=f"m{i}") for i in range(5)]
    assert purge(db, limit=2) == 2
    after = raws(db)
    assert [after[i].startswith(TRIMMED_HEADER) for i in ids] == [True, True, False, False, False]
    assert purge(db, limit=10) == 3 and purge(db) == 0


def test_headers_only_keeps_a_message_s_own_line_ends() -> None:
    assert headers_only(b"A: 1\nB: 2\n\nbody\n", NOW, KEEP).endswith(b"\nA: 1\nB: 2\n\n")
    assert headers_only(b"A: 1\r\n\r\nbody", NOW, KEEP).endswith(b"\r\nA: 1\r\n\r\n")


# -- the scheduler -------------------------------------------------------------------------


def _config(tmp_path: Path, url: str, mail: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[database]\nurl = "{url}"\n[mail]\naddress = "snl@example.org"\n'
        f'referee = "ref@example.org"\n{mail}'
    )
    return path


def test_the_scheduler_purges_in_batches_and_logs_how_many(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(_config(tmp_path, db.url, 'keep_processed_mail = "30d"'))
    with db.transaction() as s:
        for i in range(PURGE_BATCH + 3):
            raw = b"From: a@x.org\r\n\r\n%d" % i
            s.add(
                InboundMessage(
                    sha256=hashlib.sha256(raw).hexdigest(),
                    source="test",
                    received_at=NOW - timedelta(days=31),
                    raw=raw,
                    status="processed",
                )
            )
    add(db, "processed", NOW - timedelta(days=29), tag="young")
    rs = RoundScheduler(db, config, clock=lambda: NOW)
    with caplog.at_level(logging.INFO, "snl_pbem.scheduler"):
        assert rs.purge_mail() == PURGE_BATCH + 3
    assert (
        f"trimmed {PURGE_BATCH + 3} handled inbound messages received more than 30d ago"
        in caplog.text
    )
    off = load_config(_config(tmp_path, db.url, "keep_processed_mail = false"))
    rs.config = off  # as a reload does
    with caplog.at_level(logging.INFO, "snl_pbem.scheduler"):
        assert rs.purge_mail() == 0
    assert "kept whole (keep_processed_mail = false)" in caplog.text


def sent_mail(
    tag: str,
    at: datetime,
    *,
    status: str = "sent",
    secret: bool = False,
    recipient: str = "ann@example.org",
) -> OutboxMessage:
    """An outbox row: a report sent (or, by ``status``, waiting, failed...) at ``at``."""
    return OutboxMessage(
        kind="report",
        recipient=recipient,
        message_id=f"<{tag}@example.org>",
        message=b"From: snl@example.org\r\nSubject: r\r\n\r\n%s\r\n" % tag.encode(),
        status=status,
        secret=secret,
        attempts=1,
        next_attempt_at=at,
        created_at=at,
        sent_at=None if status == "pending" else at,
    )


def test_the_scheduler_cuts_sent_mail_in_batches_and_logs_how_many(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """More than a batch of mail sent 31 days ago is cut with keep_sent_mail = "30d", each
    row once; mail sent 29 days ago, mail holding a key (scrubbed when sent), failed and
    bounced mail are not."""
    config = load_config(_config(tmp_path, db.url, 'keep_sent_mail = "30d"'))
    old = NOW - timedelta(days=31)

    def sent(i: int, status: str = "sent", at: datetime = old, secret: bool = False) -> None:
        # (a sent_at even on the failed one: its status alone keeps it whole)
        s.add(sent_mail(f"o{i}", at, status=status, secret=secret, recipient=f"p{i % 7}@x.org"))

    with db.transaction() as s:
        for i in range(PURGE_BATCH + 3):
            sent(i)
        sent(-1, at=NOW - timedelta(days=29))
        sent(-2, secret=True)
        sent(-3, status="failed")
        sent(-4, status="bounced")
    rs = RoundScheduler(db, config, clock=lambda: NOW)
    selects: list[str] = []

    def seen(conn, cursor, statement, *_: object) -> None:
        if statement.lstrip().upper().startswith("SELECT OUTBOX.ID \nFROM"):
            selects.append(statement)

    event.listen(db.engine, "before_cursor_execute", seen)
    with caplog.at_level(logging.INFO, "snl_pbem.scheduler"):
        assert rs.purge_sent() == PURGE_BATCH + 3
    event.remove(db.engine, "before_cursor_execute", seen)
    assert (
        f"trimmed {PURGE_BATCH + 3} messages sent more than 30d ago to their headers and "
        "fingerprints" in caplog.text
    )
    assert len(selects) == 2  # a batch, then the three left (each row read once)
    with db.transaction() as s:
        kept = {
            row.message_id: row.message.startswith(TRIMMED_HEADER)
            for row in s.scalars(select(OutboxMessage))
        }
    assert [m for m, cut in kept.items() if not cut] == [
        f"<o{i}@example.org>" for i in (-1, -2, -3, -4)
    ]
    assert rs.purge_sent() == 0
    rs.config = load_config(_config(tmp_path, db.url, "keep_sent_mail = false"))
    with caplog.at_level(logging.INFO, "snl_pbem.scheduler"):
        assert rs.purge_sent() == 0
    assert "sent mail is kept whole (keep_sent_mail = false)" in caplog.text


def test_the_scheduler_purges_at_start_and_then_daily(db: Database, tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, db.url))
    old = add(db, "ignored", datetime.now(UTC) - timedelta(days=91))
    with db.transaction() as s:  # and mail sent as long ago
        s.add(sent_mail("sent", datetime.now(UTC) - timedelta(days=91)))
    scheduler = make_scheduler()
    rs = RoundScheduler(db, config, scheduler=scheduler)
    rs.rebuild()
    job = scheduler.get_job("purge-mail")
    assert job is not None and job.trigger.interval == timedelta(days=1)
    scheduler.start()
    try:
        deadline = time.monotonic() + 120  # a hang detector: the purge runs at once
        while time.monotonic() < deadline and not all(
            m.startswith(TRIMMED_HEADER) for m in (raws(db)[old], *outbox_messages(db))
        ):
            time.sleep(0.1)
        rs.rebuild()  # the rescan keeps the one daily job, it does not run it again
        assert [j.id for j in scheduler.get_jobs()].count("purge-mail") == 1
    finally:
        scheduler.shutdown(wait=True)
    assert raws(db)[old].startswith(TRIMMED_HEADER)
    assert outbox_messages(db)[0].startswith(TRIMMED_HEADER)


def test_a_failed_purge_is_one_log_line_and_tried_again(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(_config(tmp_path, db.url))
    scheduler = make_scheduler()
    scheduler.start(paused=True)
    rs = RoundScheduler(db, config, scheduler=scheduler)

    def broken() -> int:
        raise RuntimeError("database down")

    went_on: list[str] = []
    rs.purge_mail = broken  # type: ignore[method-assign]
    rs.purge_sent = lambda: went_on.append("sent") or 0  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.WARNING, "snl_pbem.scheduler"):
            rs._purge_job()
        assert "trimming old inbound mail failed (RuntimeError: database down)" in caplog.text
        assert went_on == ["sent"]  # the other parts went on: each alone
        assert "Traceback" not in caplog.text
        assert scheduler.get_job("purge-mail-retry") is not None
    finally:
        scheduler.shutdown(wait=False)


# -- the settings ----------------------------------------------------------------------------


def test_the_new_mail_settings_and_their_defaults(tmp_path: Path) -> None:
    mail = load_config(_config(tmp_path, "sqlite:///x.db")).settings.mail
    assert mail.keep_processed_mail == timedelta(days=90)
    assert mail.max_stored_per_sender == 200
    assert mail.max_stored_bytes_per_sender == 20 * 1024 * 1024
    mail = load_config(
        _config(
            tmp_path,
            "sqlite:///x.db",
            'keep_processed_mail = "1d12h"\nmax_stored_per_sender = 5\n'
            "max_stored_bytes_per_sender = 1048576\n",
        )
    ).settings.mail
    assert mail.keep_processed_mail == timedelta(days=1, hours=12)
    assert (mail.max_stored_per_sender, mail.max_stored_bytes_per_sender) == (5, 1048576)
    off = load_config(_config(tmp_path, "sqlite:///x.db", "keep_processed_mail = false"))
    assert off.settings.mail.keep_processed_mail is None
    assert off.settings.mail.keep_sent_mail == timedelta(days=90)  # one does not set the other
    sent = load_config(_config(tmp_path, "sqlite:///x.db", 'keep_sent_mail = "2d"')).settings
    assert (sent.mail.keep_sent_mail, sent.mail.keep_processed_mail) == (
        timedelta(days=2),
        timedelta(days=90),
    )
    off = load_config(_config(tmp_path, "sqlite:///x.db", "keep_sent_mail = false"))
    assert off.settings.mail.keep_sent_mail is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('keep_processed_mail = "0s"', "mail.keep_processed_mail: '0s' is shorter than 1d"),
        ('keep_processed_mail = "12h"', "mail.keep_processed_mail: '12h' is shorter than 1d"),
        ("keep_processed_mail = true", 'write a duration such as "90d", or false to keep'),
        ('keep_processed_mail = "3 months"', "'3 months' is not a duration"),
        ('keep_sent_mail = "23h"', "mail.keep_sent_mail: '23h' is shorter than 1d"),
        ("keep_sent_mail = 90", 'mail.keep_sent_mail: 90 is not a duration (write e.g. "90s"'),
        ("max_stored_per_sender = 0", "mail.max_stored_per_sender: Input should be greater"),
        (
            "max_stored_bytes_per_sender = 100000",
            "mail.max_stored_bytes_per_sender: 100000 is smaller than max_message_size (1048576)",
        ),
        ('max_stored_per_sender = "lots"', "mail.max_stored_per_sender: Input should be a"),
    ],
)
def test_bad_values_of_the_new_settings(tmp_path: Path, line: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, "sqlite:///x.db", line + "\n"))
    assert any(p.startswith("c.toml: mail.") and problem in p for p in caught.value.problems), (
        caught.value.problems
    )


def test_the_example_config_shows_the_defaults() -> None:
    example = Path(__file__).parents[2] / "deploy" / "config.example.toml"
    mail = tomllib.loads(example.read_text())["mail"]
    defaults = MailSettings(address="a@example.org", referee="r@example.org")
    assert mail["keep_processed_mail"] == "90d" and defaults.keep_processed_mail == KEEP
    assert mail["keep_sent_mail"] == "90d" and defaults.keep_sent_mail == KEEP
    assert mail["max_stored_per_sender"] == defaults.max_stored_per_sender
    assert mail["max_stored_bytes_per_sender"] == defaults.max_stored_bytes_per_sender


def test_an_order_trimmed_then_sent_again_is_still_a_duplicate(intake) -> None:
    """Through the real intake: the trimmed order keeps its hash, Message-ID and UID, so the
    same bytes arriving again (a mailbox restored from a backup) are not applied twice."""
    from mailhelpers import T0, orders_of

    from snl_pbem.app.intake import ingest

    db, config = intake
    raw = ORDER.replace(b"{tag}", b"again")
    first = ingest(db, config, raw, T0, "imap:test", uidvalidity=1, uid=7)
    assert first.status == "processed" and len(orders_of(db)) == 1
    assert purge(db, T0 + timedelta(days=91), config.settings.mail.keep_processed_mail) == 1
    assert raws(db)[first.inbound_id].startswith(TRIMMED_HEADER)
    for uid in (7, 8):  # the same UID, or the same bytes under a new UID
        again = ingest(
            db, config, raw, T0 + timedelta(days=92), "imap:test", uidvalidity=1, uid=uid
        )
        assert again.status == "duplicate" and again.inbound_id == first.inbound_id
    assert len(orders_of(db)) == 1


# -- mail we sent ------------------------------------------------------------------------------


def outbox(db: Database) -> dict[int, tuple[str, str, bool, bytes]]:
    with db.transaction() as s:
        return {
            row.id: (row.kind, row.status, row.secret, row.message)
            for row in s.scalars(select(OutboxMessage))
        }


def test_mail_sent_longer_ago_than_keep_sent_mail_keeps_its_headers_and_fingerprint(
    intake, smtp_sink
) -> None:
    """Through the real intake and sender: the HELP we sent bob, once kept for
    keep_sent_mail, is cut to its headers and the fingerprint of its lines. The intake
    passes the same fingerprints for bob as before, so a copy of it that bob's
    out-of-office pastes under his new orders is still ours: only DICE 3 counts, not the
    example's DICE 4. Mail waiting is never cut, and the welcomes were scrubbed when sent."""
    from mailhelpers import T0, orders_of

    from snl_pbem.app import sentprints
    from snl_pbem.app.intake import ingest
    from snl_pbem.app.intake import reading as intake_module
    from snl_pbem.app.outbox import drain_outbox
    from snl_pbem.mail.smtp import SmtpConfig, SmtpSender

    db, config = intake
    keep = config.settings.mail.keep_sent_mail
    assert keep == KEEP
    head = b"From: bob@example.org\r\nTo: snl@example.org\r\nSubject: [g1] help\r\n"
    asked = head + b"Message-ID: <b1@example.org>\r\n\r\nHELP\r\n"
    assert ingest(db, config, asked, T0, "t").status == "processed"
    sender = SmtpSender(SmtpConfig(smtp_sink.host, smtp_sink.port, "none"), "snl@example.org")
    assert drain_outbox(db, config, sender, lambda: T0, worker="t").sent == 4  # 3 welcomes
    sender.close()
    [help_] = [m.raw for m in smtp_sink.delivered if b"In-Reply-To: <b1@" in m.raw]
    shown = email.message_from_bytes(help_).get_payload(decode=True).decode()
    assert "\nDICE 4 " in shown  # the example
    sentprints._prints.clear()
    before = intake_module._sent_to(db, config, "bob@example.org")
    waiting = add_waiting(db)
    kept = outbox(db)

    with db.transaction() as s:
        assert purge_sent_mail(s, T0 + keep, keep) == (0, None)  # sent exactly 90d ago: kept
    with db.transaction() as s:
        assert purge_sent_mail(s, T0 + keep + timedelta(seconds=1), keep) == (1, None)
    after = outbox(db)
    # the HELP only: not the welcomes (scrubbed once sent), nor mail waiting
    [cut] = [row_id for row_id, row in after.items() if row != kept[row_id]]
    assert kept[cut][:3] == ("guest-help", "sent", False)  # HELP with no key
    assert after[waiting][1] == "pending"
    message = after[cut][3]
    assert message.startswith(TRIMMED_HEADER + b"body removed ")
    assert b"kept 90d (keep_sent_mail); %d bytes as sent" % len(kept[cut][3]) in message
    parsed = email.message_from_bytes(message, policy=email.policy.default)
    assert parsed["To"] == "bob@example.org" and parsed["Subject"]  # who was sent what, when
    assert b"DICE" not in message and b"Write to this address" not in message
    assert len(message) < len(kept[cut][3])
    sentprints._prints.clear()  # read from the cut bytes, not remembered
    assert intake_module._sent_to(db, config, "bob@example.org") == before
    # and so for mail written before its fingerprint was kept with it (migration 0011):
    # worked out from the cut bytes, and from the scrubbed welcome's
    with db.transaction() as s:
        s.execute(OutboxMessage.__table__.update().values(fingerprint=None))
    sentprints._prints.clear()
    assert intake_module._sent_to(db, config, "bob@example.org") == before

    away = (
        head + b"Message-ID: <b2@example.org>\r\n\r\nKEY bob-key-123\r\nDICE 3\r\n\r\n"
        b"I am away until Monday.\r\n\r\n" + shown.replace("\n", "\r\n").encode()
    )
    result = ingest(db, config, away, T0 + timedelta(minutes=5), "t")  # (in the round)
    assert result.status == "processed", result.detail
    [order] = orders_of(db)
    assert (order.player, order.dice) == ("bob", "3")

    with db.transaction() as s:  # done once; false keeps everything
        later = T0 + timedelta(days=3650)
        assert purge_sent_mail(s, T0 + keep + timedelta(days=2), keep) == (0, None)
        assert purge_sent_mail(s, later, None) == (0, None)


def add_waiting(db: Database) -> int:
    with db.transaction() as s:
        row = sent_mail("waiting", NOW - timedelta(days=400), status="pending")
        s.add(row)
        s.flush()
        return row.id


def test_sent_mail_that_bounced_or_was_cut_meanwhile_is_not_cut_again(db: Database) -> None:
    """The rows due are found first (outside the write lock), then cut each under the same
    conditions: one that bounced in between stays whole, one another server cut is cut
    once."""
    from snl_pbem.app.retention import _SENT, _find, _write, purge_sent_batch

    with db.transaction() as s:
        for i in range(3):
            s.add(sent_mail(f"m{i}", OLD))
    with db.reading() as s:
        cuts, last = _find(s, _SENT, NOW, KEEP, 0, 10)
    ids = [row_id for row_id, _ in cuts]
    assert len(ids) == 3 and last is None
    with db.transaction() as s:
        s.get(OutboxMessage, ids[0]).status = "bounced"  # a bounce came in meanwhile
    assert purge_sent_batch(db, NOW, KEEP, 1, after=ids[1]) == (1, ids[2])  # another server
    with db.transaction() as s:
        assert _write(s, _SENT, cuts, NOW, KEEP) == 1  # only ids[1]: ids[0] bounced, ids[2] cut
    assert [m.startswith(TRIMMED_HEADER) for m in outbox_messages(db)] == [False, True, True]


def outbox_messages(db: Database) -> list[bytes]:
    with db.transaction() as s:
        return list(s.scalars(select(OutboxMessage.message).order_by(OutboxMessage.id)))


def test_a_cut_message_keeps_the_fingerprint_it_had(tmp_path: Path) -> None:
    """Whatever our mail holds (Thai or Chinese quoted-printable, a replay file attached,
    more lines than are fingerprinted, a DKIM signature in front), the cut message's
    fingerprint, read from its body, is the one the whole message had; and only a cut
    message starts with the mark."""
    import shutil
    import subprocess

    from snl_pbem.app.retention import is_trimmed_sent, sent_headers_only
    from snl_pbem.mail.compose import compose
    from snl_pbem.mail.dkim import sign
    from snl_pbem.mail.ours import MAX_SENT_LINES, fingerprint_of_sent

    def ours(body: str, language: str = "en", **kw: object) -> bytes:
        return compose(
            sender="snl@example.org",
            sender_name="Snakes and Ladders referee",
            to="ann@example.org",
            subject="[g1] Positions after round 3 ตำแหน่ง 第三轮",
            body=body,
            now=NOW,
            message_id="<snl.1@example.org>",
            game_name="g1",
            language=language,
            **kw,  # type: ignore[arg-type]
        )

    report = "GAME g1\nKEY (your order key)\nDICE 4\n-- \nThe g1 referee\n"
    messages = {
        "thai": ours("สวัสดีคุณ ann\n\nตำแหน่งหลังรอบที่ 3:\n  1   ann   13\n" + report, "th"),
        "chinese": ours("你好 ann\n\n第三轮后的位置\uff1a\n  1   ann   13\n" + report, "zh-Hans"),
        "replay": ours(
            "The game is over.\n" + report,
            attachments=[("g1-replay.txt", "text/plain", b"round 1: 4 4 4\n" * 500)],
        ),
        "long": ours("\n".join(f"round {i}: ann 13, bob 12" for i in range(600))),
    }
    if shutil.which("openssl") is not None:
        key = tmp_path / "dkim.pem"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True)
        messages["dkim"] = sign(
            messages["thai"], selector="snl", domain="example.org", private_key=key.read_bytes()
        )
        assert messages["dkim"].startswith(b"DKIM-Signature:")
    for name, raw in messages.items():
        whole = fingerprint_of_sent(raw)
        assert whole and not is_trimmed_sent(raw), name
        cut = sent_headers_only(raw, NOW, KEEP)
        assert is_trimmed_sent(cut), name
        assert len(cut) < (len(raw) if name in ("replay", "long") else len(raw) + 300), name
        assert fingerprint_of_sent(cut, scrubbed=True) == whole, name
        assert b"ann" not in cut.split(b"\r\n\r\n", 1)[1], name  # no text: digests only
    assert len(fingerprint_of_sent(messages["long"]).split()) == MAX_SENT_LINES
    assert b"round 1: 4 4 4" not in sent_headers_only(messages["replay"], NOW, KEEP)


def test_the_purges_walk_each_table_in_its_primary_keys_order(tmp_path: Path) -> None:
    """SQLite (no statistics): each batch's search goes on from the last row the batch
    before looked at, by the primary key; with the outbox's status index it read and
    sorted every sent row at each batch, the square of the backlog in all."""
    from sqlalchemy import text

    from snl_pbem.app.retention import _INBOUND, _SENT
    from snl_pbem.store.migrate import upgrade

    db = Database(f"sqlite:///{tmp_path / 'plan.db'}")
    upgrade(db)
    for kept in (_SENT, _INBOUND):
        query = (
            select(kept.id)
            .where(kept.id > 5, kept.due(NOW, KEEP))
            .order_by(kept.id)
            .limit(PURGE_BATCH)
        )
        sql = str(query.compile(db.engine, compile_kwargs={"literal_binds": True}))
        with db.engine.connect() as connection:
            plan = [row[3] for row in connection.execute(text("EXPLAIN QUERY PLAN " + sql))]
        assert plan == [
            f"SEARCH {kept.id.class_.__tablename__} USING INTEGER PRIMARY KEY (rowid>?)"
        ]
    db.dispose()
