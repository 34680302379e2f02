"""Mail as players and attackers really send it (issue: no order lost, misread, or applied
for the wrong player). Each class is tried with several examples, and for each the
question is what the worst message of the class does to *other* players' orders."""

from __future__ import annotations

import base64
import email
import smtplib
import threading
from datetime import timedelta

import pytest
from imapclient import IMAPClient
from mailhelpers import T0, orders_of, replies_since
from sqlalchemy import select

from snl_pbem.app.games import sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.mailbox_state import ensure_state, intake_health
from snl_pbem.app.replies import GUEST_REPLIES_PER_ADDRESS_PER_HOUR
from snl_pbem.config import ImapSettings, load_config
from snl_pbem.mail.commands import parse_commands
from snl_pbem.mail.imap import DeliveryFailed, ImapPoller, MailboxConfig
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.mail.quotes import command_lines
from snl_pbem.runners.mailboxes import DatabaseHooks
from snl_pbem.store import AuditEntry, InboundMessage, OutboxMessage, Player


def mail(
    body: str,
    sender: str = "ann@example.org",
    subject: str = "[g1] orders",
    tag: str = "x",
    extra: str = "",
) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: {subject}\r\n"
        f"Message-ID: <{tag}@example.org>\r\n{extra}\r\n{body}\r\n"
    ).encode()


def good_order(tag: str = "good") -> bytes:
    return mail("KEY bob-key-123\r\nDICE 2", "bob@example.org", tag=tag)


def replies_to(db, address: str) -> list[OutboxMessage]:
    return [r for r in replies_since(db, T0) if r.recipient == address]


def text_of(message: OutboxMessage) -> str:
    """The headers and the decoded body of a message we send."""
    parsed = email.message_from_bytes(message.message)
    head = message.message.split(b"\r\n\r\n", 1)[0].decode()
    body = parsed.get_payload(decode=True)
    return head + "\r\n\r\n" + (body.decode("utf-8") if isinstance(body, bytes) else "")


# -- one message can never cost other players their orders -------------------------------

HOSTILE_HTML = {
    "unclosed_b_66k": "<b>" * 22000,
    "unclosed_b_190k": "<b>" * 63000,
    "nested_tables": "<div><table><tr><td>" * 8000,
    "unclosed_anchors": '<a href="x">' * 12000,
    "comment_soup": "<!--<!--<p" * 20000,
}


def html_only(body: str, tag: str) -> bytes:
    """An HTML-only message, its lines wrapped at 900 characters as an MTA needs them."""
    body = "\r\n".join(body[i : i + 900] for i in range(0, len(body), 900))
    return mail(
        body,
        tag=tag,
        extra="MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n",
    )


@pytest.mark.parametrize("name", sorted(HOSTILE_HTML))
def test_hostile_html_is_read_and_the_next_order_counts(intake, name: str) -> None:
    db, config = intake
    result = ingest(db, config, html_only(HOSTILE_HTML[name], name), T0, "t")
    assert result.status in ("processed", "rejected"), result.detail  # read, not set aside
    assert ingest(db, config, good_order(), T0, "t").status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("bob", "2")]


@pytest.mark.parametrize(
    "charset", ["punycode", "idna", "unicode_escape", "raw_unicode_escape", "x-nonsense"]
)
def test_exotic_codecs_are_never_run(sqlite_intake, charset: str) -> None:
    """A text part naming a codec that is not a plain text encoding (punycode is quadratic)
    is read as UTF-8: the order in it still counts."""
    db, config = sqlite_intake
    body = "KEY ann-key-123\r\nDICE 4\r\n" + "aaaaaaaaa-\r\n" * 6000
    raw = mail(
        body,
        tag=charset,
        extra=f"MIME-Version: 1.0\r\nContent-Type: text/plain; charset={charset}\r\n",
    )
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4")]


BAD_HEADERS = {
    "nul_message_id": "Message-ID: =?utf-8?q?=00?=\r\n",
    "nul_in_subject": "Subject: =?utf-8?q?orders=00now?=\r\n",
    "nul_in_from_name": "From: =?utf-8?q?Bob=00?= <bob@example.org>\r\n",
    "nul_in_references": "References: <a=00@x> =?utf-8?q?=00?=\r\n",
    "raw_8bit_subject": "Subject: W\xfcrfel \xff\xfe\r\n",
    "control_chars": "Message-ID: =?utf-8?q?<=01=02=1b[31m@x>?=\r\n",
}


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_headers_the_database_cannot_hold_are_cleaned(intake, name: str) -> None:
    """PostgreSQL refuses NUL in text: such a header once killed the poller's thread on
    every retry. The message is stored cleaned and processed; the order in it counts."""
    db, config = intake
    header = BAD_HEADERS[name]
    lines = [
        header if header.split(":")[0] == h else f"{h}: {v}\r\n"
        for h, v in (
            ("From", "bob@example.org"),
            ("To", "snl@example.org"),
            ("Subject", "[g1] orders"),
            ("Message-ID", f"<{name}@example.org>"),
        )
    ]
    if header.split(":")[0] not in ("From", "To", "Subject", "Message-ID"):
        lines.append(header)
    raw = ("".join(lines) + "\r\nKEY bob-key-123\r\nDICE 5\r\n").encode("latin-1")
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "processed", result.detail
    assert [(o.player, o.dice) for o in orders_of(db)] == [("bob", "5")]
    with db.transaction() as s:
        row = s.get(InboundMessage, result.inbound_id)
        assert "\x00" not in (row.message_id or "") + (row.sender or "") + (row.error or "")


def test_a_message_the_database_refuses_is_stored_as_a_stub(intake, monkeypatch) -> None:
    """If the database still refuses what was read from a message, the message is stored
    as received (a stub, nothing read from it) and set aside, and intake goes on."""
    db, config = intake
    from snl_pbem.app.intake import store as intake_module

    monkeypatch.setattr(intake_module, "envelope_of", lambda raw: ("x" * 5000, None))
    if db.engine.dialect.name == "sqlite":  # SQLite holds any length: make it refuse
        monkeypatch.setattr(
            intake_module, "_kept_bytes", lambda *a: (_ for _ in ()).throw(ValueError("bad"))
        )
    result = ingest(db, config, mail("KEY ann-key-123\r\nDICE 3", tag="poison"), T0, "t")
    assert result.stored and result.status == "set-aside"
    monkeypatch.undo()
    assert ingest(db, config, good_order(), T0, "t").status == "processed"
    with db.transaction() as s:
        row = s.get(InboundMessage, result.inbound_id)
        assert row.status == "set-aside" and "could not be stored as received" in row.error
        assert b"DICE 3" in row.raw  # kept for the referee (inbound show / retry)


def poisons() -> list[bytes]:
    return [
        (
            b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: x\r\n"
            b"Message-ID: =?utf-8?q?=00?=\r\n\r\nKEY ann-key-123\r\nDICE 1\r\n"
        ),
        html_only("<b>" * 63000, "poison-html"),
        mail("x", tag="cp", extra="Content-Type: text/plain; charset=punycode\r\n"),
    ]


def test_no_message_stops_the_mailbox(dovecot, intake) -> None:
    """Poisonous messages before a good one in a real Dovecot mailbox: one poll reads
    them all and moves them all; the good order counts."""
    db, config = intake
    user = dovecot.new_user()
    c = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
    c.login(user, "secret")
    for raw in poisons():
        c.append("INBOX", raw)
    c.append("INBOX", good_order())
    c.logout()
    hooks = DatabaseHooks(db, config, clock=lambda: T0)
    poller = ImapPoller(
        MailboxConfig(dovecot.host, dovecot.port, "none", user, "secret", timeout=10), hooks
    )
    assert poller.poll_once() == 4
    poller.close()
    assert ("bob", "2") in [(o.player, o.dice) for o in orders_of(db)]
    assert all(r.status != "set-aside" for r in hooks.results), hooks.results


def test_a_mailbox_that_keeps_failing_marks_intake_unhealthy(dovecot, intake) -> None:
    """When a fetched message cannot be stored at all, the poll stops there (the message
    stays in the mailbox, in order), the failure is recorded, and the thread lives on."""
    db, config = intake
    user = dovecot.new_user()
    c = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
    c.login(user, "secret")
    c.append("INBOX", good_order("g1"))
    c.append("INBOX", good_order("g2"))
    c.logout()

    class Broken(DatabaseHooks):
        calls = 0

        def deliver(self, raw, source, uidvalidity, uid, arrived=None, size=None):
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("the database went away")
            return super().deliver(raw, source, uidvalidity, uid, arrived, size)

    hooks = Broken(db, config, clock=lambda: T0)
    poller = ImapPoller(
        MailboxConfig(dovecot.host, dovecot.port, "none", user, "secret", timeout=10), hooks
    )
    with pytest.raises(DeliveryFailed):
        poller.poll_once()
    source = poller.config.source
    # run() records it (healthy_since cleared: the breaker holds rounds) and goes on
    stop = threading.Event()
    failed_before = intake_health(db, source)
    poller.close()
    hooks.failed(source, "DeliveryFailed: the database went away")
    assert intake_health(db, source)[1] is None and failed_before is not None
    thread = threading.Thread(target=poller.run, args=(stop,))
    thread.start()
    try:
        for _ in range(1200):  # ends with the two orders (a second); 120 s: a hang detector
            if len(orders_of(db)) == 2:
                break
            stop.wait(0.1)
    finally:
        stop.set()
        thread.join(120)
    assert [(o.player, o.dice) for o in orders_of(db)] == [("bob", "2"), ("bob", "2")]
    assert intake_health(db, source)[1] is not None  # healthy again


def test_the_breaker_holds_a_round_while_the_last_read_failed(intake) -> None:
    from snl_pbem.runners.scheduler import RoundScheduler

    db, config = intake
    imap = ImapSettings(host="127.0.0.1", username="u", password="p")
    object.__setattr__(config.settings.mail, "imap", imap)
    rounds = RoundScheduler(db, config, clock=lambda: T0)
    hooks = DatabaseHooks(db, config, clock=lambda: T0)
    from snl_pbem.runners.mailboxes import imap_poller

    source = imap_poller(db, config).config.source
    ensure_state(db, source)
    hooks.healthy(source, 1)
    assert rounds.intake_unhealthy() is None
    hooks.failed(source, "DeliveryFailed: x")
    assert "last read of the mailbox failed" in (rounds.intake_unhealthy() or "")


def test_lmtp_poison_is_stored_and_set_aside_not_451_forever(intake) -> None:
    db, config = intake
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def deliver(raw: bytes, source: str) -> None:
        if not ingest(db, config, raw, T0, source).stored:
            raise RuntimeError("not stored")

    controller = ReceiverController(
        GameAddressHandler("snl@example.org", deliver), "127.0.0.1", port, max_size=2**22
    )
    controller.start()
    try:
        with smtplib.LMTP("127.0.0.1", port, timeout=60) as client:
            for raw in [*poisons(), good_order()]:
                assert client.sendmail("x@example.org", ["snl@example.org"], raw) == {}
    finally:
        controller.stop()
    assert ("bob", "2") in [(o.player, o.dice) for o in orders_of(db)]


# -- what counts is what the player wrote now -------------------------------------------


QUOTE_STYLES = {
    "mutt_below": (
        "On Mon, Nov 30, 2026 at 09:00:00AM +0000, Snakes and Ladders referee wrote:\n"
        "> GAME g1\n> KEY cy-key-123\n> DICE 6\n\nKEY ann-key-123\nDICE 4\n\n-- \nAnn\n",
        "4",
    ),
    "interleaved": "> DICE 6\nDICE 4\n> TRAPDOOR 9\nKEY ann-key-123\n",
    "outlook_de": (
        "KEY ann-key-123\nDICE 4\n\n-----Ursprüngliche Nachricht-----\nVon: Referee "
        "<snl@example.org>\nGesendet: Montag, 30. November 2026 09:00\nAn: Ann\n"
        "Betreff: x\n\nKEY cy-key-123\nDICE 6\n"
    ),
    "outlook_fr_bold": (
        "KEY ann-key-123\nDICE 4\n\n*De :* Referee <snl@example.org>\n*Envoyé :* lundi\n"
        "*À :* Ann\n\nDICE 6\n"
    ),
    "gmail_wrapped_de": (
        "KEY ann-key-123\nDICE 4\n\nAm Mo., 30. Nov. 2026 um 09:00 Uhr schrieb Snakes and "
        "Ladders referee <\nsnl@example.org>:\n\n> DICE 6\n"
    ),
    "spanish": (
        "KEY ann-key-123\nDICE 4\nEl lun, 30 nov 2026 a las 9:00, Referee "
        "(<snl@example.org>) escribió:\n> DICE 6\n"
    ),
    "own_divider_and_words": (
        "Hi referee,\n----------\nOn second thought, at 9:00 I changed my mind:\nKEY ann-key-123\n"
        "DICE 4\n=========="
    ),
    "forwarded_inline": (
        "KEY ann-key-123\nDICE 4\n\n---------- Forwarded message ---------\nFrom: cy\n"
        "DICE 6\nKEY cy-key-123\n"
    ),
}


@pytest.mark.parametrize("name", sorted(QUOTE_STYLES))
def test_only_the_players_new_lines_count(sqlite_intake, name: str) -> None:
    db, config = sqlite_intake
    case = QUOTE_STYLES[name]
    body = case[0] if isinstance(case, tuple) else case
    result = ingest(db, config, mail(body.replace("\n", "\r\n"), tag=name), T0, "t")
    assert result.status == "processed", result.detail
    assert [(o.player, o.dice, o.nomination) for o in orders_of(db)] == [("ann", "4", None)]


def test_html_quote_found_by_id_never_applies_another_players_key(sqlite_intake) -> None:
    """The quote of an Outlook on the web reply sits in div#divRplyFwdMsg: a copy of cy's
    orders quoted there must not be applied with cy's key."""
    db, config = sqlite_intake
    html = (
        '<html><body><div dir="ltr">GAME g1<br>KEY ann-key-123<br>DICE 4</div>'
        '<div id="appendonsend"></div><hr style="display:inline-block;width:98%">'
        '<div id="divRplyFwdMsg" dir="ltr"><b>From:</b> cy<br><b>Sent:</b> Monday</div>'
        "<div>GAME g1<br>KEY cy-key-123<br>DICE 6<br>TRAPDOOR 12</div></body></html>"
    )
    result = ingest(db, config, html_only(html, "owa"), T0, "t")
    assert result.status == "processed"
    assert [(o.player, o.dice, o.nomination) for o in orders_of(db)] == [("ann", "4", None)]
    only_quote = html.replace("KEY ann-key-123<br>DICE 4", "")
    assert ingest(db, config, html_only(only_quote, "owa2"), T0, "t").status == "rejected"
    assert len(orders_of(db)) == 1  # cy's quoted key was never used


def test_attachments_and_forwarded_messages_are_never_orders(sqlite_intake) -> None:
    db, config = sqlite_intake
    forwarded = (
        b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] fwd\r\n"
        b"Message-ID: <fwd@example.org>\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain\r\n\r\nKEY ann-key-123\r\nSee below.\r\n"
        b"--b\r\nContent-Type: message/rfc822\r\n\r\n"
        b"From: cy@example.org\r\nSubject: orders\r\n\r\nKEY cy-key-123\r\nDICE 6\r\n"
        b"--b--\r\n"
    )
    assert ingest(db, config, forwarded, T0, "t").status == "processed"
    assert orders_of(db) == []  # ann's message had no orders of its own
    assert "no orders" in text_of(replies_to(db, "ann@example.org")[-1])
    attached = (
        b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        b"Message-ID: <att@example.org>\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain\r\n\r\nKEY ann-key-123\r\nDICE 3\r\n"
        b"--b\r\nContent-Type: text/plain; name=old.txt\r\n"
        b"Content-Disposition: attachment; filename=old.txt\r\n\r\nDICE 6\r\nTRAPDOOR 9\r\n"
        b"--b--\r\n"
    )
    assert ingest(db, config, attached, T0, "t").status == "processed"
    assert [(o.player, o.dice, o.nomination) for o in orders_of(db)] == [("ann", "3", None)]


def test_two_order_blocks_the_reply_says_which_counted(sqlite_intake) -> None:
    db, config = sqlite_intake
    body = "GAME g1\r\nKEY ann-key-123\r\nDICE 4\r\n\r\nGAME g1\r\nKEY ann-key-123\r\nDICE 5\r\n"
    assert ingest(db, config, mail(body, tag="blocks"), T0, "t").status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "5")]
    reply = text_of(replies_to(db, "ann@example.org")[-1])
    assert "more than one order block" in reply and '"DICE 5" (not "DICE 4")' in reply


def test_two_keys_in_one_message_apply_nothing(sqlite_intake) -> None:
    """Ann pastes cy's orders under her own: neither set is applied."""
    db, config = sqlite_intake
    body = "KEY ann-key-123\r\nDICE 4\r\n\r\nKEY cy-key-123\r\nDICE 6\r\n"
    result = ingest(db, config, mail(body, tag="twokeys"), T0, "t")
    assert result.status == "rejected" and "two different KEY lines" in result.detail
    assert orders_of(db) == []
    reply = text_of(replies_to(db, "ann@example.org")[-1])
    assert "one order set per message" in reply and "key-123" not in reply


# -- replies that are true --------------------------------------------------------------


def test_a_rejection_reason_is_stored_whole(intake) -> None:
    db, config = intake
    late = T0.replace(year=2030, month=2)
    result = ingest(db, config, mail("KEY ann-key-123\r\nDICE 4", tag="late"), late, "t")
    assert result.status == "rejected"
    with db.transaction() as s:
        error = s.get(InboundMessage, result.inbound_id).error
    assert "18:00" in error and error.endswith("so they do not count."), error


@pytest.mark.parametrize("space", [101, 150, 999999])
def test_an_off_board_nomination_is_refused_and_r16_explained(sqlite_intake, space) -> None:
    """R16: a nomination must be a space 1..L; the reply says so, and what R16 does."""
    db, config = sqlite_intake
    body = f"KEY ann-key-123\r\nDICE 4\r\nTRAPDOOR {space}"
    assert ingest(db, config, mail(body, tag=f"t{space}"), T0, "t").status == "processed"
    assert [(o.dice, o.nomination) for o in orders_of(db)] == [("4", None)]
    reply = " ".join(text_of(replies_to(db, "ann@example.org")[-1]).split())  # (wrapped)
    assert f"there is no space {space}" in reply and "spaces are 1 to 100" in reply
    assert "rule 16" in reply and f"Trapdoor: space {space}" not in reply


@pytest.mark.parametrize("dice", ["6 6", "6, 6", "3 3"])
def test_a_repeated_die_gets_one_consistent_account(sqlite_intake, dice) -> None:
    db, config = sqlite_intake
    ingest(db, config, mail(f"KEY ann-key-123\r\nDICE {dice}", tag=dice), T0, "t")
    reply = text_of(replies_to(db, "ann@example.org")[-1])
    assert "given twice" in reply and "(still open" not in reply
    assert "Open in your current set of six: 1, 2, 3, 4, 5, 6" in reply


@pytest.mark.parametrize(
    "invisible", ["\u200e", "\u200f", "\u2066", "\u2067", "\u2068", "\u2069", "\u202e", "\u061c"]
)
def test_invisible_format_characters_are_removed(sqlite_intake, invisible) -> None:
    db, config = sqlite_intake
    body = f"KEY{invisible} ann-key-123{invisible}\r\nDICE {invisible}4{invisible}\r\n"
    raw = mail(body, tag=f"inv{ord(invisible)}").replace(
        b"\r\n\r\n", b"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n", 1
    )
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert [o.dice for o in orders_of(db)] == ["4"]


# (a full-width digit, "\uff14", is read as its ASCII digit: tests/mail/test_full_width.py)
@pytest.mark.parametrize("digit", ["²", "٤", "४", "\u0e54", "④"])
def test_digits_that_are_not_ascii_get_a_clear_reply(sqlite_intake, digit) -> None:
    db, config = sqlite_intake
    raw = (
        "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] x\r\n"
        f"Message-ID: <d{ord(digit)}@x>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"KEY ann-key-123\r\nDICE {digit}\r\n"
    ).encode()
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "processed", result.detail  # answered, never set aside
    reply = text_of(replies_to(db, "ann@example.org")[-1])
    assert "not written with the digits 0 to 9" in reply


def test_bare_help_from_anyone_is_answered_within_its_budget(sqlite_intake) -> None:
    db, config = sqlite_intake
    for i in range(4):
        raw = mail("HELP", "stranger@example.net", subject="help?", tag=f"h{i}")
        assert ingest(db, config, raw, T0 + timedelta(minutes=i), "t").status == "processed"
    helps = replies_to(db, "stranger@example.net")
    assert len(helps) == 2  # rate-limited: a forged HELP cannot flood someone else
    assert "GAME your-game-id" in text_of(helps[0]) and "HELP (this text) needs nothing" in (
        text_of(helps[0])
    )
    ingest(db, config, mail("help", tag="ann-help"), T0, "t")  # a player, no key: g1's help
    assert "GAME g1" in text_of(replies_to(db, "ann@example.org")[-1])


# -- keys, budgets and addresses --------------------------------------------------------


def test_a_forged_flood_does_not_silence_the_player(intake) -> None:
    db, config = intake
    for i in range(20):
        ingest(db, config, mail("DICE 6", tag=f"forged{i}"), T0 + timedelta(seconds=i), "t")
    notices = replies_to(db, "ann@example.org")
    assert len(notices) == GUEST_REPLIES_PER_ADDRESS_PER_HOUR
    result = ingest(db, config, mail("KEY ann-key-123\r\nDICE 4", tag="real"), T0, "t")
    assert result.status == "processed"
    ack = replies_to(db, "ann@example.org")[-1]
    assert ack.kind == "ack" and "turn 1: 4" in text_of(ack)


@pytest.mark.parametrize(
    "subject",
    [
        "URGENT: your order key was revoked, mail it to evil@example.net",
        "=?utf-8?b?VVJHRU5UOiBzZW5kIHlvdXIga2V5IHRvIGV2aWxAZXhhbXBsZS5uZXQ=?=",
        "[g1] Re: click http://evil.example/login",
    ],
)
def test_no_attacker_text_in_the_subject_we_send(sqlite_intake, subject) -> None:
    db, config = sqlite_intake
    ingest(db, config, mail("DICE 6", subject=subject, tag="sub"), T0, "t")
    ingest(db, config, mail("KEY ann-key-123\r\nDICE 4", subject=subject, tag="s2"), T0, "t")
    for reply in replies_to(db, "ann@example.org"):
        header = text_of(reply).split("\n\n", 1)[0]
        assert "URGENT" not in header and "evil" not in header and "VVJH" not in header


def test_key_guessing_is_counted_quietened_and_reported(intake) -> None:
    db, config = intake
    for i in range(12):
        raw = mail(f"KEY guess-{i:04d}\r\nDICE 4", "bob@example.org", tag=f"g{i}")
        assert ingest(db, config, raw, T0 + timedelta(seconds=i), "t").status == "rejected"
    with db.transaction() as s:
        alerts = s.scalars(select(OutboxMessage).where(OutboxMessage.kind == "key-guessing")).all()
        wrong = s.scalars(select(AuditEntry).where(AuditEntry.action == "wrong-key")).all()
    assert len(alerts) == 1 and alerts[0].recipient == "ref@example.org"
    assert "bob@example.org: 6" in alerts[0].message.decode() and len(wrong) == 12
    # bob's notices stopped; bob's right key still works (a forger cannot lock him out)
    assert len(replies_to(db, "bob@example.org")) <= GUEST_REPLIES_PER_ADDRESS_PER_HOUR
    ok = mail("KEY bob-key-123\r\nDICE 3", "bob@example.org", tag="bob-real")
    assert ingest(db, config, ok, T0 + timedelta(minutes=1), "t").status == "processed"


@pytest.mark.parametrize(
    ("from_header", "shown"),
    [
        ("mallory@evil.example", "mallory@evil.example"),
        ('"ann@example.org" <eve@evil.example>', "eve@evil.example"),
        ("ann@example.org <eve@evil.example>", "(more than one From address)"),
        ("ann", "without a domain"),
        ("ann@example.org, eve@evil.example", "more than one From address"),
    ],
)
def test_any_use_of_a_key_from_another_address_tells_the_player(
    sqlite_intake, from_header, shown
) -> None:
    db, config = sqlite_intake
    for command in ("STATUS", "HELP", "DICE 4"):
        raw = mail(f"GAME g1\r\nKEY ann-key-123\r\n{command}", from_header, tag=command[:4])
        ingest(db, config, raw, T0, "t")
    replies = replies_to(db, "ann@example.org")
    assert [r.kind for r in replies] == ["status", "help", "ack"]
    for reply in replies:
        assert shown in text_of(reply) and "not from your registered" in text_of(reply)
    with db.transaction() as s:
        uses = s.scalars(select(AuditEntry).where(AuditEntry.action == "key-elsewhere")).all()
    assert len(uses) == 3


def test_the_plain_own_address_is_not_reported(sqlite_intake) -> None:
    db, config = sqlite_intake
    own = ("Ann <ann@example.org>", '"ann@example.org" <ann@example.org>')
    for tag, sender in zip("ab", own, strict=True):
        ingest(db, config, mail("KEY ann-key-123\r\nSTATUS", sender, tag=tag), T0, "t")
    assert all("registered" not in text_of(r) for r in replies_to(db, "ann@example.org"))


def test_a_removed_players_key_stops_working(intake, tmp_path) -> None:
    db, config = intake
    text = config.path.read_text()
    without_cy = "\n".join(line for line in text.splitlines() if "cy-key-123" not in line)
    config.path.write_text(without_cy)
    sync_games(db, load_config(config.path), T0)
    with db.transaction() as s:
        assert not s.scalar(select(Player.active).where(Player.name == "cy"))
    raw = mail("KEY cy-key-123\r\nDICE 6", "cy@example.org", tag="removed")
    assert ingest(db, config, raw, T0, "t").status == "rejected"
    assert orders_of(db) == []


def test_utf8_headers_do_not_lose_the_order(intake) -> None:
    """RFC 6532: UTF-8 in Message-ID, References and Subject, unencoded."""
    db, config = intake
    raw = (
        "From: Jürgen <ann@example.org>\r\nTo: snl@example.org\r\nSubject: Würfel für g1\r\n"
        "Message-ID: <würfel-1@exämple.org>\r\nReferences: <ä@x> <ö@y>\r\n"
        "In-Reply-To: <ö@y>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\nGAME g1\r\nKEY ann-key-123\r\nDICE 5\r\n"
    ).encode()
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "5")]


# -- nothing kept that should not be, nothing lost that should be kept ---------------------


@pytest.mark.parametrize("encoding", ["7bit", "base64", "quoted-printable"])
def test_stored_mail_keeps_no_key_in_clear(intake, encoding) -> None:
    db, config = intake
    body = "GAME g1\r\nKEY ann-key-123\r\nDICE 4\r\n"
    if encoding == "base64":
        body = base64.b64encode(body.encode()).decode()
    elif encoding == "quoted-printable":
        body = "GAME g1\r\nKEY ann-=\r\nkey-123\r\nDICE 4\r\n"  # a soft line break in the key
    raw = mail(
        body,
        tag=f"redact-{encoding}",
        extra=f"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Transfer-Encoding: {encoding}\r\n",
    )
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "processed"
    from snl_pbem.mail.parse import parse_message

    with db.transaction() as s:
        stored = s.get(InboundMessage, result.inbound_id).raw
    assert b"ann-key-123" not in stored.lower()
    text = parse_message(stored, "snl@example.org").text
    assert "ann-key-123" not in text and "KEY ****" in text and "DICE 4" in text
    # the same bytes again are still recognised (the original digest is kept)
    assert ingest(db, config, raw, T0, "t").status == "duplicate"


def test_an_oversize_message_keeps_only_its_headers(sqlite_intake) -> None:
    db, config = sqlite_intake
    limit = config.settings.mail.max_message_size
    raw = mail("KEY ann-key-123\r\nDICE 4\r\n" + "x" * (limit + 10), tag="big")
    result = ingest(db, config, raw, T0, "imap")
    assert result.status == "rejected" and "too large" in result.detail
    with db.transaction() as s:
        row = s.get(InboundMessage, result.inbound_id)
        assert len(row.raw) < 1000 and b"Message-ID: <big@example.org>" in row.raw
    assert orders_of(db) == []
    assert "too large" in text_of(replies_to(db, "ann@example.org")[-1])


def test_a_flood_from_one_sender_is_stored_trimmed_and_still_read(sqlite_intake) -> None:
    db, config = sqlite_intake
    cap = config.settings.mail.max_stored_per_sender
    with db.transaction() as s:
        for i in range(cap):
            s.add(
                InboundMessage(
                    sha256=f"{i:064d}",
                    source="t",
                    received_at=T0,
                    status="ignored",
                    attempts=0,
                    raw=b"x",
                    sender="ann@example.org",
                )
            )
    big = mail("KEY ann-key-123\r\nDICE 4\r\n" + "chat " * 40000, tag="flood")
    result = ingest(db, config, big, T0 + timedelta(seconds=1), "t")
    assert result.status == "processed"
    with db.transaction() as s:
        assert len(s.get(InboundMessage, result.inbound_id).raw) <= 64 * 1024 + 200
    assert [o.dice for o in orders_of(db)] == ["4"]


def test_command_lines_keep_what_was_written_below_the_quote() -> None:
    lines, _ = command_lines(
        "On 30 Nov 2026, at 09:00, Referee <snl@example.org>\nwrote:\n\n> DICE 6\n\nDICE 4\n"
    )
    assert lines == ["DICE 4"]
    assert parse_commands("DICE 4\n\n-----Original Message-----\nDICE 6").dice == (4,)


def test_a_bounce_returning_a_welcome_keeps_no_key(sqlite_intake) -> None:
    """A bounced welcome comes back with its key in the returned copy (quoted-printable, as
    we send it): the stored bounce has every key in it redacted, and nobody is answered."""
    db, config = sqlite_intake
    raw = (
        b"From: MAILER-DAEMON@mx.example.org (Mail Delivery System)\r\n"
        b"To: snl@example.org\r\nSubject: Undelivered Mail Returned to Sender\r\n"
        b"Message-ID: <dsn-1@mx.example.org>\r\nAuto-Submitted: auto-replied\r\n"
        b"MIME-Version: 1.0\r\n"
        b'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n\r\n'
        b"--B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
        b"--B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx\r\n\r\n"
        b"Final-Recipient: rfc822; ann@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n"
        b"--B\r\nContent-Type: message/rfc822\r\n\r\n"
        b"From: snl@example.org\r\nTo: ann@example.org\r\nSubject: [g1] Welcome\r\n"
        b"Message-ID: <snl.welcome@example.org>\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\n"
        b"Your order key (keep it private):\r\n\r\n    k7mq-x2pa-9dfe-tw3h\r\n\r\n"
        b"GAME g1\r\nKEY ann-key-123\r\nDICE 4\r\n--B--\r\n"
    )
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "ignored"
    with db.transaction() as s:
        stored = s.get(InboundMessage, result.inbound_id).raw
    assert b"ann-key-123" not in stored and b"k7mq-x2pa-9dfe-tw3h" not in stored
    assert b"Final-Recipient: rfc822; ann@example.org" in stored  # the rest is kept
    assert replies_since(db, T0) == []


# -- found by a hostile review: each a defect that lost or misread an order -----------------


@pytest.mark.parametrize(
    ("line", "dice", "status"),
    [
        ("Die hard fan of this game", "4", "processed"),
        ("Round 2 was brutal for me", "4", "processed"),
        ("Key point: I am new here", "4", "processed"),
        ("Key: ANN-KEY-123", "4", "processed"),  # the same key, in other case
        ("Game was fun so far", "4", "processed"),
        ("Last round I wrote 5 by mistake, so this time:", "4", "processed"),
        ("As I wrote on 30 Nov:", "4", "processed"),
        ("--", "4", "processed"),  # a bare divider with orders below it
        ("Status: happy", "4", "processed"),
    ],
)
def test_a_players_own_sentences_are_not_commands(sqlite_intake, line, dice, status) -> None:
    db, config = sqlite_intake
    body = f"GAME g1\r\n{line}\r\nKEY ann-key-123\r\nDICE 4\r\n"
    result = ingest(db, config, mail(body, tag="own"), T0, "t")
    assert result.status == status, result.detail
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", dice)]


def test_clear_skies_do_not_withdraw_orders(sqlite_intake) -> None:
    db, config = sqlite_intake
    ingest(db, config, mail("KEY ann-key-123\r\nDICE 4", tag="o1"), T0, "t")
    ingest(db, config, mail("KEY ann-key-123\r\nClear skies here today", tag="o2"), T0, "t")
    assert [(o.dice, o.withdrawn) for o in orders_of_all(db)] == [("4", False)]


def orders_of_all(db):
    from snl_pbem.store import OrderRecord

    with db.transaction() as s:
        return list(s.scalars(select(OrderRecord).order_by(OrderRecord.id)))


@pytest.mark.parametrize("bad", ["4O", "forty", "x"])
def test_an_unreadable_later_line_leaves_the_earlier_one_and_says_so(sqlite_intake, bad) -> None:
    db, config = sqlite_intake
    body = f"KEY ann-key-123\r\nDICE 4\r\nTRAPDOOR 37\r\n\r\nDICE 5\r\nTRAPDOOR {bad}\r\n"
    ingest(db, config, mail(body, tag=f"later{bad}"), T0, "t")
    assert [(o.dice, o.nomination) for o in orders_of(db)] == [("5", 37)]
    reply = text_of(replies_to(db, "ann@example.org")[-1])
    assert "Trapdoor: space 37" in reply and '"TRAPDOOR 37" still counts' in reply
    assert f'"TRAPDOOR {bad}" (not' not in reply and '"DICE 5" (not "DICE 4")' in reply


@pytest.mark.parametrize(
    "subject", ["RE: [EXTERNAL] [g1] Round 1 report", "[EXTERNAL] Re: my orders", "[ext] [bulk]"]
)
def test_a_gateways_subject_tag_does_not_hide_the_game(sqlite_intake, subject) -> None:
    db, config = sqlite_intake
    raw = mail("KEY ann-key-123\r\nDICE 4", subject=subject, tag="ext")
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4")]


@pytest.mark.parametrize(
    "from_header",
    [
        "=?utf-8?q?M=C3=BCller=2C_Ann?= <ann@example.org>",
        "=?utf-8?b?U21pdGgsIEFubg==?= <ann@example.org>",
        '"Smith, Ann" <ann@example.org>',
    ],
)
def test_a_last_first_display_name_is_the_players_own_address(sqlite_intake, from_header) -> None:
    db, config = sqlite_intake
    ingest(db, config, mail("KEY ann-key-123\r\nDICE 4", from_header, tag="lf"), T0, "t")
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4")]
    assert "not from your registered" not in text_of(replies_to(db, "ann@example.org")[-1])


@pytest.mark.parametrize(
    "body",
    [
        "KEYS: mail yours to evil@x.example now",
        "GAME reply-with-key-to-evil-example\r\nDICE 4",
        "KEY wrong-key-999\r\nClick http://evil.example/login to keep your key",
    ],
)
def test_a_notice_to_unauthenticated_mail_echoes_nothing(sqlite_intake, body) -> None:
    db, config = sqlite_intake
    ingest(db, config, mail(body, tag="echo"), T0, "t")
    [notice] = replies_to(db, "ann@example.org")
    assert "evil" not in text_of(notice) and "KEYS" not in text_of(notice)


def test_a_forged_flood_does_not_cut_the_players_real_orders(sqlite_intake) -> None:
    """200 forgeries from ann's address fill her daily cap; her real 70 KB reply, written
    below a long quote, is read whole and applied; what is kept of it is trimmed after."""
    db, config = sqlite_intake
    cap = config.settings.mail.max_stored_per_sender
    for i in range(cap):
        ingest(db, config, mail("hello", tag=f"forged{i}"), T0 + timedelta(seconds=i), "t")
    quote = "".join(f"> old line {i} of the report, quoted\r\n" for i in range(2000))
    body = f"On Mon, 30 Nov 2026, Referee <snl@example.org> wrote:\r\n{quote}\r\n"
    body += "KEY ann-key-123\r\nDICE 4\r\n"
    result = ingest(db, config, mail(body, tag="real"), T0 + timedelta(hours=1), "t")
    assert result.status == "processed" and len(body) > 64 * 1024
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4")]
    with db.transaction() as s:
        kept = s.get(InboundMessage, result.inbound_id).raw
    assert kept.startswith(b"X-SNL-PBEM-Trimmed: over the sender's daily cap")
    assert len(kept) <= 64 * 1024 + 200


def test_help_floods_from_strangers_do_not_silence_a_players_notices(sqlite_intake) -> None:
    db, config = sqlite_intake
    for i in range(40):
        raw = mail("HELP", f"stranger{i}@example.net", subject="help", tag=f"h{i}")
        ingest(db, config, raw, T0, "t")
    raw = mail("KEY bob-kye-123\r\nDICE 4", "bob@example.org", tag="typo")
    assert ingest(db, config, raw, T0, "t").status == "rejected"
    [notice] = replies_to(db, "bob@example.org")
    assert "wrong order key" in text_of(notice)


def test_a_message_whose_whole_body_is_a_forward_is_not_orders(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = (
        b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] fwd\r\n"
        b"Message-ID: <whole-fwd@x>\r\nMIME-Version: 1.0\r\nContent-Type: message/rfc822\r\n\r\n"
        b"From: cy@example.org\r\nSubject: orders\r\n\r\nKEY cy-key-123\r\nDICE 6\r\n"
    )
    assert ingest(db, config, raw, T0, "t").status == "rejected"
    assert orders_of(db) == []


def test_a_duplicate_and_quoted_keys_are_redacted_too(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = mail("KEY ann-key-123\r\nDICE 4\r\n\r\n> KEY cy-key-123\r\n> DICE 6", tag="dup")
    first = ingest(db, config, raw, T0, "t")
    again = ingest(db, config, b"Received: from x\r\n" + raw, T0, "t")  # same Message-ID
    assert (first.status, again.status) == ("processed", "duplicate")
    with db.transaction() as s:
        for result in (first, again):
            stored = s.get(InboundMessage, result.inbound_id).raw
            assert b"ann-key-123" not in stored and b"cy-key-123" not in stored


def test_a_round_closes_only_once_mail_from_before_its_deadline_is_read(intake) -> None:
    """With IMAP, the close waits for a poll that began after the deadline (and asks for
    one); a message stored before the deadline but not yet processed is processed first."""
    from snl_pbem.runners.mailboxes import imap_poller
    from snl_pbem.runners.scheduler import RoundScheduler
    from snl_pbem.store import Round

    db, config = intake
    imap = ImapSettings(host="127.0.0.1", username="u", password="p")
    object.__setattr__(config.settings.mail, "imap", imap)
    with db.transaction() as s:
        deadline = s.scalar(select(Round.deadline).where(Round.number == 1))
    now = [deadline - timedelta(minutes=5)]
    hooks = DatabaseHooks(db, config, clock=lambda: now[0])
    source = imap_poller(db, config).config.source
    hooks.acquire(source)
    hooks.healthy(source, 1)  # a good poll, begun before the deadline
    # ann's order reached us before the deadline; its processing has not happened yet
    stored = intake_stored_unprocessed(
        db, mail("KEY ann-key-123\r\nDICE 4", tag="late"), deadline - timedelta(seconds=30)
    )
    asked = []
    rounds = RoundScheduler(db, config, clock=lambda: now[0])
    rounds.request_poll = lambda: asked.append(now[0])
    now[0] = deadline + timedelta(seconds=2)
    assert rounds.on_deadline("g1", 1) is None and asked  # not yet: the poller is asked
    hooks.acquire(source)  # a poll begins after the deadline ...
    now[0] += timedelta(seconds=1)
    hooks.healthy(source, 1)  # ... and reads the mailbox to its end
    outcome = rounds.on_deadline("g1", 1)
    assert outcome is not None and outcome.round == 1
    with db.transaction() as s:
        assert s.get(InboundMessage, stored).status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4")]


def intake_stored_unprocessed(db, raw: bytes, received) -> int:
    import hashlib

    with db.transaction() as s:
        row = InboundMessage(
            sha256=hashlib.sha256(raw).hexdigest(),
            source="lmtp:x",
            received_at=received,
            status="new",
            attempts=0,
            raw=raw,
            sender="ann@example.org",
        )
        s.add(row)
        s.flush()
        return row.id


def test_imap_never_fetches_an_oversize_message_whole(dovecot, sqlite_intake) -> None:
    """A message over max_message_size is fetched as its header only (its size asked
    first), stored as such and refused with a notice; the order after it counts."""
    db, config = sqlite_intake
    user = dovecot.new_user()
    c = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
    c.login(user, "secret")
    limit = config.settings.mail.max_message_size
    big = mail(
        "KEY ann-key-123\r\nDICE 6\r\n" + ("x" * 998 + "\r\n") * (limit // 1000 + 5), tag="huge"
    )
    c.append("INBOX", big)
    c.append("INBOX", good_order())
    c.logout()
    hooks = DatabaseHooks(db, config, clock=lambda: T0)
    from snl_pbem.runners.mailboxes import imap_poller

    poller = imap_poller(db, config, hooks)
    assert poller is None  # the fixture reads no mailbox: build one for Dovecot
    poller = ImapPoller(
        MailboxConfig(
            dovecot.host, dovecot.port, "none", user, "secret", timeout=10, max_message_size=limit
        ),
        hooks,
    )
    assert poller.poll_once() == 2
    poller.close()
    assert [r.status for r in hooks.results] == ["rejected", "processed"]
    with db.transaction() as s:
        row = s.get(InboundMessage, hooks.results[0].inbound_id)
        assert len(row.raw) < 1000 and "too large" in row.error
    assert [(o.player, o.dice) for o in orders_of(db)] == [("bob", "2")]
    assert "too large" in text_of(replies_to(db, "ann@example.org")[-1])
