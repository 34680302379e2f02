"""Bounces of our own mail, as real MTAs write them: read, tied to the outbox message they
return, recorded, and reported to the referee once; never answered, never forwarded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailhelpers import CORPUS, T0
from sqlalchemy import select

from snl_pbem.app.intake import ingest
from snl_pbem.app.outbox import drain_outbox
from snl_pbem.app.rounds import close_round
from snl_pbem.mail.dsn import parse_dsn
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.store import AuditEntry, Database, OutboxMessage

BOUNCES = CORPUS / "bounces"
RETURNED = b"<snl.5f0c2b7e9a1d4c3b8e6f7a9b0c1d2e3f@example.org>"
"""The Message-ID of the returned message in every file here: a test puts the Message-ID
of the outbox message it bounces in its place."""

# file: (format, failed address, status, words of the reason, player it bounces)
FILES = {
    "postfix.eml": ("rfc3464", "ann@example.org", "5.1.1", "User unknown in virtual", "ann"),
    "exim.eml": ("rfc3464", "bob@example.org", "5.0.0", "550 5.2.1", "bob"),
    "exchange_online.eml": ("rfc3464", "cy@example.org", "5.1.10", "RecipientNotFound", "cy"),
    "gmail.eml": ("rfc3464", "cy@example.org", "5.2.2", "out of storage space", "cy"),
    "in_reply_to_only.eml": ("rfc3464", "ann@example.org", "5.7.1", "Relaying denied", "ann"),
    "exim_text.eml": ("exim", "ann@example.org", "5.1.1", "User unknown", "ann"),
    "qmail.eml": ("qmail", "bob@example.org", "5.1.1", "Recipient address rejected", "bob"),
    "exchange_2003.eml": ("exchange", "cy@example.org", None, "name is not recognized", "cy"),
}


def test_every_bounce_file_is_tested() -> None:
    assert {p.name for p in BOUNCES.glob("*.eml")} == set(FILES) | {
        "postfix_delayed.eml",
        "forged_not_ours.eml",
    }


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize("name", sorted(FILES))
def test_a_bounce_is_read(name: str, crlf: bool) -> None:
    raw = (BOUNCES / name).read_bytes().replace(b"\r\n", b"\n")
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    kind, address, status, words, _player = FILES[name]
    report = parse_dsn(raw)
    assert report is not None and report.format == kind
    [failed] = report.failed
    assert (failed.address, failed.action, failed.status) == (address, "failed", status)
    assert words in report.why and "\n" not in report.why
    assert report.message_ids[0] == RETURNED.decode()


def test_a_delay_warning_is_not_a_failure() -> None:
    report = parse_dsn((BOUNCES / "postfix_delayed.eml").read_bytes())
    assert report is not None and not report.is_failure
    assert [(r.address, r.action, r.status) for r in report.recipients] == [
        ("ann@example.org", "delayed", "4.4.1")
    ]


@pytest.mark.parametrize(
    "name", ["gmail_alternative.eml", "vacation_reply.eml", "mailing_list.eml", "html_only.eml"]
)
def test_other_mail_is_not_a_bounce(name: str) -> None:
    assert parse_dsn((CORPUS / name).read_bytes()) is None


def test_broken_bounces_never_raise() -> None:
    for path in sorted(BOUNCES.glob("*.eml")):
        raw = path.read_bytes()
        for cut in range(0, len(raw), 37):  # every truncation, and some damage
            parse_dsn(raw[:cut])
            parse_dsn(raw[:cut] + b"\x00\xff--" + raw[cut + 5 :])
    assert parse_dsn(b"") is None
    assert parse_dsn(b"Content-Type: multipart/report; boundary=\r\n\r\n--\r\n") is None


# -- through ingest -------------------------------------------------------------------------


def send_all(db: Database, config, sink) -> None:
    """Everything due goes out to the SMTP sink: sent mail holding a key is scrubbed."""
    sender = SmtpSender(SmtpConfig(sink.host, sink.port, "none", timeout=10), "snl@example.org")
    try:
        drain_outbox(db, config, sender, lambda: T0, worker="test")
    finally:
        sender.close()


def outbox(db: Database) -> list[OutboxMessage]:
    with db.transaction() as s:
        return list(s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)))


def mail_of(db: Database, kind: str, recipient: str) -> OutboxMessage:
    [row] = [r for r in outbox(db) if r.kind == kind and r.recipient == recipient]
    return row


def bounce_of(name: str, row: OutboxMessage, **replace: bytes) -> bytes:
    raw = (BOUNCES / name).read_bytes().replace(RETURNED, row.message_id.encode())
    for old, new in replace.items():
        raw = raw.replace(old.encode(), new)
    return raw


def alerts(db: Database) -> list[str]:
    return [
        r.message.decode()
        for r in outbox(db)
        if r.kind == "bounce-alert" and r.recipient == "ref@example.org"
    ]


def test_a_bounced_welcome_tells_the_referee_once(intake, smtp_sink) -> None:
    """ann's welcome (with her key) went out and bounced: the referee is told, in one mail
    that names her and the reason; nobody else is mailed; a second report of the same
    bounce changes nothing."""
    db, config = intake
    send_all(db, config, smtp_sink)
    welcome = mail_of(db, "welcome", "ann@example.org")
    assert welcome.status == "sent" and b"ann-key-123" not in welcome.message  # scrubbed
    before = len(outbox(db))

    result = ingest(db, config, bounce_of("postfix.eml", welcome), T0, "imap:INBOX")
    assert result.status == "ignored"
    assert result.detail.startswith(
        f"bounce of outbox {welcome.id}: welcome to ann@example.org (550 5.1.1 <ann@example.org>:"
    ), result.detail
    row = mail_of(db, "welcome", "ann@example.org")
    assert row.status == "bounced" and row.last_error.startswith("bounced: 550 5.1.1")
    new = outbox(db)[before:]
    assert [(r.kind, r.recipient) for r in new] == [("bounce-alert", "ref@example.org")]
    [alert] = alerts(db)
    assert "ann never got their order key: the welcome mail bounced" in alert  # the subject
    body = " ".join(alert.replace("=\r\n", "").split())
    assert (
        "ann (ann@example.org) never got their order key: the welcome mail bounced "
        "(550 5.1.1 <ann@example.org>: Recipient address rejected: User unknown in virtual "
        "mailbox table). Check the address in the config." in body
    )
    assert "Their key is the one set in the config" in body  # mailhelpers sets the keys
    assert "ann-key-123" not in alert and "Hello ann" not in alert  # nothing of the bounce
    with db.transaction() as s:
        [entry] = s.scalars(select(AuditEntry).where(AuditEntry.action == "mail-bounced")).all()
        assert entry.detail["outbox"] == welcome.id and entry.detail["kind"] == "welcome"

    again = bounce_of("postfix.eml", welcome, **{"<4RzK0T3xQbz9sWm@": b"<another@"})
    result = ingest(db, config, again, T0 + timedelta(minutes=5), "imap:INBOX")
    assert result.status == "ignored" and result.detail.endswith("already recorded")
    assert len(outbox(db)) == before + 1  # still the one alert
    assert all(r.recipient == "ref@example.org" for r in outbox(db)[before:])


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_mta_bounce_names_the_player(sqlite_intake, name: str) -> None:
    db, config = sqlite_intake
    player = FILES[name][4]
    welcome = mail_of(db, "welcome", f"{player}@example.org")
    result = ingest(db, config, bounce_of(name, welcome), T0, "file:" + name)
    assert result.status == "ignored"
    assert result.detail.startswith(f"bounce of outbox {welcome.id}: welcome"), result.detail
    [alert] = alerts(db)
    assert f"{player} ({player}@example.org) never got their order key" in " ".join(alert.split())
    assert mail_of(db, "welcome", f"{player}@example.org").status == "bounced"


def test_a_forged_bounce_of_a_message_we_never_sent_changes_nothing(sqlite_intake) -> None:
    """A bounce naming a Message-ID of our shape that is not in our outbox (and a foreign
    In-Reply-To) is ignored like any robot's mail: no alert, no message marked."""
    db, config = sqlite_intake
    before = [(r.id, r.status, r.last_error) for r in outbox(db)]
    raw = (BOUNCES / "forged_not_ours.eml").read_bytes()
    result = ingest(db, config, raw, T0, "file:forged")
    assert result.status == "ignored" and result.detail.startswith("automated mail")
    assert [(r.id, r.status, r.last_error) for r in outbox(db)] == before
    with db.transaction() as s:
        assert s.scalars(select(AuditEntry).where(AuditEntry.action == "mail-bounced")).all() == []


def test_a_delay_warning_is_recorded_as_nothing_to_do(sqlite_intake) -> None:
    db, config = sqlite_intake
    welcome = mail_of(db, "welcome", "ann@example.org")
    result = ingest(db, config, bounce_of("postfix_delayed.eml", welcome), T0, "file:delay")
    assert result.status == "ignored" and result.detail.startswith(
        f"delay notice for outbox {welcome.id}"
    )
    assert mail_of(db, "welcome", "ann@example.org").status == welcome.status
    assert alerts(db) == []


def test_a_bounced_report_and_a_bounced_referee_mail(intake) -> None:
    """A round report that bounces gets its own wording; a bounce of the referee's own
    mail is recorded but raises no alert (it would go to the same address)."""
    db, config = intake
    close_round(db, "g1", T0.replace(year=2030, month=2), config=config)
    report = mail_of(db, "report", "cy@example.org")
    result = ingest(db, config, bounce_of("gmail.eml", report), T0, "file:gmail")
    assert result.detail.startswith(f"bounce of outbox {report.id}: report to cy@example.org")
    [alert] = alerts(db)
    body = " ".join(alert.replace("=\r\n", "").split())
    assert "Subject: [g1] Mail to cy bounced: a round report" in alert
    assert 'cy (cy@example.org) did not get a round report ("[g1] Round 1 report"): it ' in body
    assert "552-5.2.2 The recipient's inbox is out of storage space" in body

    summary = mail_of(db, "referee-summary", "ref@example.org")
    result = ingest(db, config, bounce_of("postfix.eml", summary), T0, "file:ref")
    assert result.status == "ignored" and result.detail.endswith("mail to the referee: no alert")
    assert len(alerts(db)) == 1
    assert mail_of(db, "referee-summary", "ref@example.org").status == "bounced"
