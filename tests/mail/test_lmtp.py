"""The LMTP/SMTP receiver driven by smtplib: 250 only after the commit; 550, 552, 451; and
its ETRN at start-up, answered by an aiosmtpd server that takes ETRN as Postfix does."""

from __future__ import annotations

import logging
import re
import smtplib
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP
from mailhelpers import CORPUS, T0, orders_of

from snl_pbem.app.intake import ingest
from snl_pbem.mail.etrn import EtrnRefused, ask_to_deliver
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.store import Database

WAIT = 120  # waits end on their event; the limit only detects a hang


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


@pytest.mark.parametrize("path", ["a handler's deliver", "the server's receiver"])
def test_database_busy_is_a_temporary_451(tmp_path: Path, path: str) -> None:
    """SQLite locked by another process: the MTA is told to retry, and nothing is lost;
    through a handler's own ``deliver`` (in the loop's executor) and through the server's
    receiver (``lmtp_receiver``: a store's writer thread, read after the 250)."""
    from mailhelpers import game_config

    from snl_pbem.app.games import start_game, sync_games
    from snl_pbem.config import load_config
    from snl_pbem.runners.mailboxes import lmtp_receiver
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

    if path == "a handler's deliver":
        controller: ReceiverController | None = ReceiverController(
            GameAddressHandler("snl@example.org", deliver), "127.0.0.1", port, max_size=1 << 20
        )
    else:
        text = (tmp_path / "config.toml").read_text()
        (tmp_path / "config.toml").write_text(f"{text}\n[mail.lmtp]\nport = {port}\n")
        controller = lmtp_receiver(db, load_config(tmp_path / "config.toml"), clock=lambda: T0)
    assert controller is not None
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
        deadline = time.monotonic() + WAIT  # (the server's receiver reads it after the 250)
        while not orders_of(db) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "3")]
    finally:
        blocker.close()
        controller.stop()
        db.dispose()


@pytest.mark.parametrize("way", ["deliver", "submit"])
def test_as_many_sessions_as_an_mta_opens_are_stored_at_once(way: str) -> None:
    """Twenty sessions (Postfix's limit to one destination) each deliver a message while
    the stores are held: all twenty are in the store at once, and each gets its 250 once
    let go. A handler's ``deliver`` runs in the loop's executor (``STORE_THREADS``;
    asyncio's default is ``min(32, cores + 4)`` threads, six on two cores: without them
    this fails on fewer than 16 cores); the server's receiver ``submit``s each message to
    its store's writer and holds no thread while it waits."""
    inside: list[bytes] = []
    told: list = []
    lock, release = threading.Lock(), threading.Event()

    def deliver(raw: bytes, source: str) -> None:
        with lock:
            inside.append(raw)
        assert release.wait(60)

    def submit(raw: bytes, source: str, done) -> None:
        with lock:
            inside.append(raw)
            told.append(done)

    if way == "deliver":
        controller, port = plain_receiver(deliver)
    else:
        port = free_port()
        controller = ReceiverController(
            GameAddressHandler("snl@example.org", submit=submit), "127.0.0.1", port, max_size=1024
        )
        controller.start()
    codes: list[int] = []

    def session(n: int) -> None:
        with lmtp(port) as client:
            client.timeout = 60
            client.ehlo("mta.example.org")
            client.mail(f"p{n}@example.org")
            client.rcpt("snl@example.org")
            code, _ = client.data(f"From: p{n}@example.org\r\n\r\nDICE 3\r\n".encode())
            codes.append(code)

    threads = [threading.Thread(target=session, args=(n,)) for n in range(20)]
    try:
        for thread in threads:
            thread.start()
        until = time.monotonic() + 60  # a hang detector: with six threads it never comes
        while len(inside) < 20 and time.monotonic() < until:
            time.sleep(0.01)
        assert len(inside) == 20
        assert codes == []  # none is answered before it is stored
    finally:
        release.set()
        with lock:
            for done in told:
                done("stored")  # (as the writer thread tells them)
        for thread in threads:
            thread.join(60)
        controller.stop()
    assert codes == [250] * 20


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


def test_commands_sent_together_are_answered_in_order(receiver) -> None:
    """LHLO names PIPELINING (RFC 2920): an MTA may send MAIL, RCPT and DATA at once, as
    Postfix's LMTP client does when told so, and have each answered in order; a group whose
    recipient is refused stores nothing and leaves the session usable."""
    port, db, _ = receiver
    raw = (CORPUS / "gmail_alternative.eml").read_bytes()
    with lmtp(port) as client:
        code, features = client.ehlo("mta.example.org")
        assert code == 250 and client.has_extn("pipelining"), features
        client.send(b"MAIL FROM:<ann@example.org>\r\nRCPT TO:<someone@example.org>\r\nDATA\r\n")
        replies = [client.getreply()[0] for _ in range(3)]
        assert replies == [250, 550, 503]  # no recipient: DATA refused, no body sent
        client.send(b"RSET\r\nMAIL FROM:<ann@example.org>\r\nRCPT TO:<snl@example.org>\r\nDATA\r\n")
        assert [client.getreply()[0] for _ in range(4)] == [250, 250, 250, 354]
        assert orders_of(db) == []
        data = re.sub(rb"(?m)^\.", b"..", re.sub(rb"\r\n|\r|\n", b"\r\n", raw))  # as smtplib
        client.send(data + b"\r\n" * (not data.endswith(b"\r\n")) + b".\r\n")
        assert client.getreply()[0] == 250
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "3")]


def test_outcomes_that_come_together_wake_the_loop_once() -> None:
    """The server's receiver learns that a group is stored from the store's writer thread:
    the outcomes that come before the loop has run are set in one call of the loop (one
    wake-up, not one a message); a future cancelled meanwhile (its session gone) is
    passed over, and a failure is set as its exception (the MTA is answered 451)."""
    import asyncio

    from snl_pbem.mail.lmtp import _Settler

    loop = asyncio.new_event_loop()
    calls: list[object] = []
    real = loop.call_soon_threadsafe

    def counted(callback, *args, **kwargs):
        calls.append(callback)
        return real(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        settler = _Settler(loop)
        futures = [loop.create_future() for _ in range(4)]
        futures[1].cancel()
        failure = RuntimeError("not stored")
        outcomes = ["a", "b", failure, "d"]
        writer = threading.Thread(
            target=lambda: [settler.settle(f, o) for f, o in zip(futures, outcomes, strict=True)]
        )
        writer.start()
        writer.join(WAIT)
        assert len(calls) == 1  # one wake-up for the four
        loop.run_until_complete(asyncio.sleep(0))
        assert futures[0].result() == "a" and futures[3].result() == "d"
        assert futures[1].cancelled() and futures[2].exception() is failure
        later = loop.create_future()
        settler.settle(later, "e")  # after the loop has run: asked again
        loop.run_until_complete(later)
        assert len(calls) == 2 and later.result() == "e"
    finally:
        loop.close()
    settler.settle(loop.create_future(), "f")  # a closed loop: nothing waits, nothing raised


# -- asking the MTA for what it queued at start-up (ETRN, issue 21) -------------------------


class EtrnSMTP(SMTP):
    """An MTA's SMTP server that takes ETRN (RFC 1985) as Postfix does: 250 for the domain
    it flushes (a relay domain), 459 for any other, and only after EHLO."""

    async def smtp_ETRN(self, arg: str) -> None:
        if not self.session.host_name:
            await self.push("503 5.5.1 Error: send HELO/EHLO first")
        elif arg.lower() == "example.org":
            await self.push("250 Queuing started")
        else:
            await self.push(f"459 4.3.0 <{arg}>: service unavailable")


class EtrnMTA(Controller):
    def factory(self) -> SMTP:
        return EtrnSMTP(self.handler)


@pytest.fixture
def mta() -> Iterator[tuple[str, int]]:
    port = free_port()
    controller = EtrnMTA(object(), hostname="127.0.0.1", port=port)
    controller.start()
    yield "127.0.0.1", port
    controller.stop()


class Then:
    """The receiver's word that the MTA's queue is delivered, and when it came."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.at: float | None = None

    def __call__(self) -> None:
        self.at = time.monotonic()
        self.event.set()


def plain_receiver(deliver) -> tuple[ReceiverController, int]:
    port = free_port()
    controller = ReceiverController(
        GameAddressHandler("snl@example.org", deliver), "127.0.0.1", port, max_size=1 << 20
    )
    controller.start()
    return controller, port


def etrn_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "snl_pbem.lmtp" and r.levelno == logging.WARNING
    ]


def test_an_mta_that_cannot_be_asked_is_one_warning_naming_the_fix(caplog) -> None:
    """Nothing listens at etrn_server: one warning, which says what to set, and the
    receiver never says the queue is delivered (the grace runs to its limit)."""
    controller, _ = plain_receiver(lambda raw, source: None)
    then = Then()
    try:
        closed_port = free_port()
        controller.redeliver(("127.0.0.1", closed_port), ["example.org"], 0.1, then).result(WAIT)
    finally:
        controller.stop()
    (warning,) = etrn_warnings(caplog)
    assert f"127.0.0.1:{closed_port}" in warning and "ConnectionRefusedError" in warning
    assert "etrn_server" in warning and "fast_flush_domains" in warning
    assert not then.event.is_set()


def test_a_message_under_way_holds_the_word_until_it_is_stored(mta, caplog) -> None:
    """The MTA took the ETRN; a delivery has begun (MAIL accepted) and pauses for longer
    than the settle time: the queue is not delivered until that message is stored and
    nothing more has come for the settle time."""
    stored: list[bytes] = []
    controller, port = plain_receiver(lambda raw, source: stored.append(raw))
    then = Then()
    settle = 0.3
    try:
        with lmtp(port) as client:
            client.ehlo_or_helo_if_needed()
            assert client.mail("ann@example.org")[0] == 250  # a message under way
            done = controller.redeliver(mta, ["example.org"], settle, then)
            time.sleep(10 * settle)  # the MTA is slow to send the rest
            assert not then.event.is_set()
            assert client.rcpt("snl@example.org")[0] == 250
            assert client.data(b"Subject: x\r\n\r\nDICE 3\r\n")[0] == 250
            stored_at = time.monotonic()
        assert then.event.wait(WAIT)
        done.result(WAIT)
    finally:
        controller.stop()
    assert len(stored) == 1
    assert then.at is not None and then.at - stored_at >= settle
    assert etrn_warnings(caplog) == []


def test_a_message_not_stored_meanwhile_keeps_the_grace(mta, caplog) -> None:
    """A redelivered message answered 451 (the database busy) stays in the MTA's queue
    until its next retry: the queue is not delivered, and the warning says so."""

    def busy(raw: bytes, source: str) -> None:
        raise RuntimeError("database is locked")

    controller, port = plain_receiver(busy)
    then = Then()
    try:
        done = controller.redeliver(mta, ["example.org"], 0.3, then)
        with lmtp(port) as client, pytest.raises(smtplib.SMTPDataError):
            client.sendmail("ann@example.org", ["snl@example.org"], b"Subject: x\r\n\r\nhi\r\n")
        done.result(WAIT)
    finally:
        controller.stop()
    (warning,) = etrn_warnings(caplog)
    assert "could not be stored" in warning
    assert not then.event.is_set()


class SlowMTA:
    """An SMTP server on a raw socket that answers each line ``delay`` seconds late and,
    once ``hold`` is set, holds its answer to EHLO until ``release`` is set: an MTA that
    hangs."""

    def __init__(self, delay: float, hold: bool = False) -> None:
        self.delay = delay
        self.ehlo_came, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = ("127.0.0.1", int(self.sock.getsockname()[1]))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn, conn.makefile("rwb") as stream:
            for reply in (b"220 slow ESMTP", b"250 slow", b"250 Queuing started", b"221 bye"):
                time.sleep(self.delay)
                stream.write(reply + b"\r\n")
                stream.flush()
                line = stream.readline()
                if not line:
                    return
                if line.upper().startswith(b"EHLO"):
                    self.ehlo_came.set()
                    self.release.wait(WAIT)

    def close(self) -> None:
        self.release.set()
        self.sock.close()


def test_a_slow_mta_costs_one_timeout_in_all() -> None:
    """Each reply comes within the timeout, but all three do not: the ETRN gives up at the
    timeout for the whole exchange (each reply had its own, so an MTA that drips its
    answers took up to three times as long)."""
    mta = SlowMTA(0.4)
    try:
        with pytest.raises(EtrnRefused, match=r"timed out|within"):
            ask_to_deliver(mta.address, ["example.org"], "snl.example.org", timeout=1.0)
    finally:
        mta.close()


HUNG_ETRN = """
import sys
from snl_pbem.mail import etrn
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController

etrn.ask_to_deliver.__defaults__ = (3600.0,)  # the MTA hangs for longer than any timeout
mta_port, port = int(sys.argv[1]), int(sys.argv[2])
handler = GameAddressHandler("snl@example.org", lambda raw, source: None)
controller = ReceiverController(handler, "127.0.0.1", port, max_size=1 << 20)
controller.start()
controller.redeliver(("127.0.0.1", mta_port), ["example.org"], 0.1, lambda: None)
sys.stdin.readline()  # serve is told to stop
controller.stop()
"""


def test_the_etrn_on_a_hung_mta_never_delays_the_exit() -> None:
    """serve stops while its ETRN waits on an MTA that does not answer: the process ends at
    once. The ETRN ran on the loop's executor, whose threads Python joins at exit, so the
    stop waited for the MTA (up to three 30 s timeouts); now it is a thread of its own."""
    mta = SlowMTA(0.0, hold=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HUNG_ETRN, str(mta.address[1]), str(free_port())],
        stdin=subprocess.PIPE,
    )
    try:
        assert mta.ehlo_came.wait(WAIT)  # the ETRN waits on the MTA's answer
        proc.communicate(b"stop\n", timeout=WAIT / 2)  # the MTA holds for WAIT
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.wait()
        mta.close()
