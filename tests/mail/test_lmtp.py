"""The LMTP/SMTP receiver driven by smtplib: 250 only after the commit; 550, 552, 451."""

from __future__ import annotations

import smtplib
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from mailhelpers import CORPUS, T0, orders_of

from snl_pbem.app.intake import ingest
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.store import Database


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def receiver(intake) -> Iterator[tuple[int, Database, object]]:
    db, config = intake
    port = free_port()

    def deliver(raw: bytes, source: str) -> None:
        if not ingest(db, config, raw, T0, source).stored:
            raise RuntimeError("not stored")

    controller = ReceiverController(
        GameAddressHandler("snl@example.org", deliver),
        "127.0.0.1",
        port,
        max_size=config.settings.mail.max_message_size,
    )
    controller.start()
    yield port, db, config
    controller.stop()


def lmtp(port: int) -> smtplib.LMTP:
    client = smtplib.LMTP("127.0.0.1", port, timeout=10)
    return client


def test_a_message_is_stored_before_250(receiver) -> None:
    port, db, _ = receiver
    raw = (CORPUS / "gmail_alternative.eml").read_bytes()
    with lmtp(port) as client:
        refused = client.sendmail("ann@example.org", ["snl@example.org"], raw)
    assert refused == {}
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "3")]


def test_other_recipients_are_refused_with_550(receiver) -> None:
    port, db, _ = receiver
    with lmtp(port) as client:
        client.ehlo_or_helo_if_needed()
        client.mail("x@example.org")
        code, message = client.rcpt("someone-else@example.org")
    assert code == 550 and b"not the game address" in message
    assert orders_of(db) == []


def test_too_large_is_refused_with_552(receiver) -> None:
    port, db, config = receiver
    size = config.settings.mail.max_message_size
    big = b"Subject: big\r\n\r\n" + (b"x" * 70 + b"\r\n") * (size // 72 + 10)
    with lmtp(port) as client, pytest.raises(smtplib.SMTPSenderRefused) as caught:
        client.sendmail("ann@example.org", ["snl@example.org"], big)  # SIZE= declared
    assert caught.value.smtp_code == 552
    with lmtp(port) as client:  # a client that does not declare the size
        client.ehlo_or_helo_if_needed()
        client.mail("ann@example.org")
        client.rcpt("snl@example.org")
        code, _ = client.data(big)
    assert code == 552
    assert orders_of(db) == []


def test_database_busy_is_a_temporary_451(tmp_path: Path) -> None:
    """SQLite locked by another process: the MTA is told to retry, and nothing is lost."""
    from mailhelpers import game_config

    from snl_pbem.app.games import start_game, sync_games
    from snl_pbem.store.migrate import upgrade

    db = Database(f"sqlite:///{tmp_path / 'snl.db'}", sqlite_busy_ms=200)
    upgrade(db)
    config = game_config(tmp_path / "config.toml", db.url)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    port = free_port()

    def deliver(raw: bytes, source: str) -> None:
        if not ingest(db, config, raw, T0, source).stored:
            raise RuntimeError("not stored")

    controller = ReceiverController(
        GameAddressHandler("snl@example.org", deliver), "127.0.0.1", port, max_size=1 << 20
    )
    controller.start()
    blocker = sqlite3.connect(tmp_path / "snl.db", isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        raw = (CORPUS / "gmail_alternative.eml").read_bytes()
        with lmtp(port) as client, pytest.raises(smtplib.SMTPDataError) as caught:
            client.sendmail("ann@example.org", ["snl@example.org"], raw)
        assert caught.value.smtp_code == 451
        blocker.execute("ROLLBACK")
        with lmtp(port) as client:  # the MTA retries later
            assert client.sendmail("ann@example.org", ["snl@example.org"], raw) == {}
        assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "3")]
    finally:
        blocker.close()
        controller.stop()
        db.dispose()


def test_lmtp_answers_once_per_recipient(receiver) -> None:
    port, db, _ = receiver
    raw = (CORPUS / "apple_mail_reply.eml").read_bytes()
    with lmtp(port) as client:
        client.ehlo_or_helo_if_needed()
        client.mail("bob@example.org")
        assert client.rcpt("snl@example.org")[0] == 250
        assert client.rcpt("SNL@example.org")[0] == 250
        code, _ = client.data(raw)
        assert code == 250
        # RFC 2033: a second reply follows for the second recipient
        assert client.getreply()[0] == 250
    assert len(orders_of(db)) == 1
