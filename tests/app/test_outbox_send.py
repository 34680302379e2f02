"""The outbox sender against a real SMTP peer (aiosmtpd): 250 marks sent; 4xx waits; 5xx fails."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

from mailhelpers import OPENED as T0  # the fixtures' game opened then: mail is that old
from sqlalchemy import select

from snl_pbem.app.outbox import drain_outbox, enqueue_mail
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.store import Database, Game, OutboxMessage


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


def sender_for(sink) -> SmtpSender:
    return SmtpSender(SmtpConfig(sink.host, sink.port, "none", timeout=10), "snl@example.org")


def drain_once(db: Database, config, sink) -> None:
    """Send what is due now over a connection of its own (closed after)."""
    sender = sender_for(sink)
    drain_outbox(db, config, sender, Clock(), worker="w")
    sender.close()


def queue(db: Database, config, to: str, n: int = 1, secret: bool = False) -> None:
    with db.transaction() as s:
        game = s.scalar(select(Game))
        for i in range(n):
            enqueue_mail(
                s,
                config,
                game=game,
                kind="notice",
                to=to,
                now=T0,
                template="player/notice.txt.j2",
                subject=f"note {i}",
                player=None,
                message=f"message number {i}",
                line_problems=(),
                secret=secret,
            )


def rows(db: Database) -> list[OutboxMessage]:
    with db.transaction() as s:
        return list(s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)))


def test_everything_pending_is_sent_once_and_secrets_scrubbed(intake, smtp_sink) -> None:
    db, config = intake  # the three welcome mails (with keys) are pending
    sender = sender_for(smtp_sink)
    report = drain_outbox(db, config, sender, Clock(), worker="w1")
    assert report.sent == 3 and report.deferred == report.failed == 0
    assert drain_outbox(db, config, sender, Clock(), worker="w1").handled == 0
    sender.close()
    sent = rows(db)
    assert {d.message_id for d in smtp_sink.delivered} == {r.message_id for r in sent}
    assert all(r.status == "sent" and r.attempts == 1 for r in sent)
    assert b"ann-key-123" in smtp_sink.delivered[0].raw  # the player got the key...
    assert all(b"-key-123" not in r.message for r in sent)  # ...and the database forgot it


def test_temporary_failures_wait_and_permanent_ones_are_reported(intake, smtp_sink) -> None:
    db, config = intake
    drain_once(db, config, smtp_sink)  # the welcomes
    smtp_sink.handler.script = {"slow@example.org": ["451", "421"], "gone@example.org": ["550"]}
    queue(db, config, "slow@example.org", 2)
    queue(db, config, "gone@example.org")
    clock = Clock()
    sender = sender_for(smtp_sink)
    first = drain_outbox(db, config, sender, clock, worker="w")
    assert (first.sent, first.deferred, first.failed) == (1, 1, 1)  # the 1 sent: the alert
    by_to = {}
    for r in rows(db):
        by_to.setdefault(r.recipient, []).append(r)
    assert by_to["gone@example.org"][0].status == "failed"
    assert "550" in by_to["gone@example.org"][0].last_error
    alert = by_to["ref@example.org"][0]
    assert alert.kind == "delivery-failure" and alert.status == "sent"
    slow = by_to["slow@example.org"]
    assert slow[0].status == "pending" and slow[0].next_attempt_at == T0 + timedelta(minutes=1)
    assert slow[1].attempts == 0  # waits behind the older message to the same player
    clock.advance(minutes=1)
    closing = drain_outbox(db, config, sender, clock, worker="w")  # 421: the server going away
    assert closing.deferred == 1 and closing.unreachable and closing.unreachable.startswith("421")
    # not held against the message: it goes as soon as the server answers again
    assert drain_outbox(db, config, sender, clock, worker="w").sent == 2
    delivered = [d for d in smtp_sink.delivered if d.recipient == "slow@example.org"]
    assert [d.message_id for d in delivered] == [r.message_id for r in slow]  # in order
    sender.close()


def test_smtp_down_then_back(intake, smtp_sink) -> None:
    """The server unreachable: the drain stops at once, holds nothing against the messages,
    and everything goes, in order, as soon as the server is back (no per-message backoff)."""
    db, config = intake
    queue(db, config, "ann@example.org", 2)  # ann: welcome, note 0, note 1
    smtp_sink.stop()
    clock = Clock()
    sender = sender_for(smtp_sink)
    down = drain_outbox(db, config, sender, clock, worker="w")
    assert down.unreachable and "cannot open an SMTP session" in down.unreachable
    assert (down.sent, down.deferred, down.failed) == (0, 1, 0)  # one try, not one per message
    waiting = rows(db)
    assert all(r.status == "pending" and r.claimed_by is None for r in waiting)
    assert [r.attempts for r in waiting] == [1, 0, 0, 0, 0]
    assert all(r.next_attempt_at == T0 for r in waiting)  # due again at once
    assert drain_outbox(db, config, sender, clock, worker="w").unreachable  # still down
    smtp_sink.start()
    back = drain_outbox(db, config, sender, clock, worker="w")  # same clock: no waiting
    assert back.sent == 5 and back.unreachable is None
    assert all(r.status == "sent" for r in rows(db))
    to_ann = [d.message_id for d in smtp_sink.delivered if d.recipient == "ann@example.org"]
    assert to_ann == [r.message_id for r in waiting if r.recipient == "ann@example.org"]
    sender.close()


def test_give_up_while_the_server_is_down(intake, smtp_sink) -> None:
    """Mail that has waited past give_up_after fails when the server is still down: all of
    it at once, not one message per try, and the referee gets one alert listing it."""
    db, config = intake
    smtp_sink.stop()
    clock = Clock()
    clock.advance(days=3, minutes=1)
    sender = sender_for(smtp_sink)
    report = drain_outbox(db, config, sender, clock, worker="w", give_up_after=timedelta(days=3))
    sender.close()
    assert report.unreachable and report.failed == 3
    by_kind = {}
    for r in rows(db):
        by_kind.setdefault(r.kind, []).append(r.status)
    assert by_kind == {"welcome": ["failed"] * 3, "delivery-failure": ["pending"]}  # one alert
    [alert] = [r for r in rows(db) if r.kind == "delivery-failure"]
    text = alert.message.decode()
    assert "3 messages could not be delivered" in text and "cannot open an SMTP session" in text
    assert all(f"{p}@example.org (welcome, " in text for p in ("ann", "bob", "cy"))


def test_a_session_refused_at_the_greeting_is_unreachable_not_permanent(intake) -> None:
    """A 554 greeting (or a failed AUTH) is about the server, not the message: nothing is
    marked failed, and nothing is sent."""
    db, config = intake
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def refuse() -> None:  # one session: the drain must not try again per message
        conn, _ = listener.accept()
        conn.sendall(b"554 5.7.1 No SMTP service here\r\n")
        conn.close()

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    sender = SmtpSender(SmtpConfig("127.0.0.1", port, "none", timeout=5), "snl@example.org")
    report = drain_outbox(db, config, sender, Clock(), worker="w")
    sender.close()
    listener.close()
    assert report.unreachable and "554" in report.unreachable
    assert report.failed == 0 and all(r.status == "pending" for r in rows(db))


def test_give_up_after_the_configured_time(intake, smtp_sink) -> None:
    db, config = intake
    drain_once(db, config, smtp_sink)
    smtp_sink.handler.script = {"far@example.org": ["451"] * 100}
    queue(db, config, "far@example.org")
    clock = Clock()
    sender = sender_for(smtp_sink)
    for _ in range(40):
        drain_outbox(db, config, sender, clock, worker="w", give_up_after=timedelta(days=3))
        clock.advance(hours=6)
    far = next(r for r in rows(db) if r.recipient == "far@example.org")
    assert far.status == "failed" and far.attempts >= 10
    sender.close()


def test_two_senders_send_each_message_once(intake, smtp_sink) -> None:
    db, config = intake
    for i in range(40):
        queue(db, config, f"p{i}@example.org", 3)
    clock = Clock()
    reports = []

    def work(name: str) -> None:
        mine = Database(db.url)
        sender = sender_for(smtp_sink)
        try:
            reports.append(drain_outbox(mine, config, sender, clock, worker=name, batch=7))
        finally:
            sender.close()
            mine.dispose()

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [d.message_id for d in smtp_sink.delivered]
    assert len(ids) == len(set(ids)) == 123  # 3 welcomes + 120
    assert all(r.status == "sent" for r in rows(db))
    assert sum(r.sent for r in reports) == 123


def test_starttls_and_auth(intake, tmp_path) -> None:
    """A sink that insists on STARTTLS and AUTH, as a real submission server does."""
    import shutil
    import ssl
    import subprocess

    import pytest
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult
    from smtpsink import SinkHandler, free_port

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"snl" and auth_data.password == b"s3cret"
        return AuthResult(success=ok)

    handler = SinkHandler()
    port = free_port()
    controller = Controller(
        handler,
        hostname="127.0.0.1",
        port=port,
        tls_context=server_tls,
        require_starttls=True,
        authenticator=authenticate,
        auth_require_tls=True,
        auth_required=True,
    )
    controller.start()
    try:
        db, config = intake
        client_tls = ssl.create_default_context(cafile=str(cert))
        client_tls.check_hostname = False
        good = SmtpSender(
            SmtpConfig("127.0.0.1", port, "starttls", "snl", "s3cret", ssl_context=client_tls),
            "snl@example.org",
        )
        report = drain_outbox(db, config, good, Clock(), worker="tls")
        good.close()
        assert report.sent == 3 and len(handler.delivered) == 3
    finally:
        controller.stop()
