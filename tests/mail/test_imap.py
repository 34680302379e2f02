"""The IMAP poller against a real Dovecot: store first, then move; never twice."""

from __future__ import annotations

import logging
import threading
import time

import imapclient.imapclient
import pytest
from imapclient import IMAPClient
from mailhelpers import CORPUS, T0, orders_of

from snl_pbem.app.mailbox_state import last_good_poll
from snl_pbem.mail.imap import IMAPLIB_LOGGER, ImapPoller, MailboxConfig
from snl_pbem.runners.mailboxes import DatabaseHooks


def mailbox(dovecot, user: str) -> MailboxConfig:
    return MailboxConfig(
        host=dovecot.host,
        port=dovecot.port,
        tls="none",
        username=user,
        password="secret",
        poll_interval=1.0,
        timeout=10,
    )


def client(dovecot, user: str) -> IMAPClient:
    c = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
    c.login(user, "secret")
    return c


def order_mail(name: str, key: str, dice: str, tag: str) -> bytes:
    return (
        f"From: {name}@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\nKEY {key}\r\nDICE {dice}\r\n"
    ).encode()


def folder_counts(dovecot, user: str) -> tuple[int, int]:
    c = client(dovecot, user)
    try:
        inbox = len(c.select_folder("INBOX", readonly=True) and c.search("ALL"))
        processed = len(c.select_folder("Processed", readonly=True) and c.search("ALL"))
        return inbox, processed
    finally:
        c.logout()


def test_poll_stores_replies_and_moves(dovecot, intake) -> None:
    db, config = intake
    user = dovecot.new_user()
    c = client(dovecot, user)
    c.append("INBOX", order_mail("ann", "ann-key-123", "4", "m1"))
    c.append("INBOX", order_mail("bob", "bob-key-123", "2", "m2"))
    c.append("INBOX", (CORPUS / "outlook_qp_cp1252.eml").read_bytes())
    c.logout()
    hooks = DatabaseHooks(db, config, clock=lambda: T0)
    poller = ImapPoller(mailbox(dovecot, user), hooks)
    assert poller.poll_once() == 3
    poller.close()
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "4"), ("bob", "2"), ("cy", "4")]
    assert folder_counts(dovecot, user) == (0, 3)
    assert last_good_poll(db, poller.config.source) == T0
    # the messages were only peeked at: nothing marked \\Seen before it was stored
    assert [r.status for r in hooks.results] == ["processed"] * 3


class CrashBeforeMove(ImapPoller):
    def _move(self, client, uids):  # the process dies between the commit and the MOVE
        raise KeyboardInterrupt("killed")


def test_a_kill_between_commit_and_move_applies_nothing_twice(dovecot, sqlite_intake) -> None:
    db, config = sqlite_intake
    user = dovecot.new_user()
    c = client(dovecot, user)
    for i, name in enumerate(("ann", "bob")):
        c.append("INBOX", order_mail(name, f"{name}-key-123", "5", f"k{i}"))
    c.logout()
    crashing = CrashBeforeMove(mailbox(dovecot, user), DatabaseHooks(db, config, lambda: T0))
    with pytest.raises(KeyboardInterrupt):
        crashing.poll_once()
    crashing.close()
    assert folder_counts(dovecot, user) == (2, 0)  # still in the INBOX
    hooks = DatabaseHooks(db, config, lambda: T0)
    restarted = ImapPoller(mailbox(dovecot, user), hooks)  # a fresh process: last_uid = 0
    assert restarted.poll_once() == 2
    restarted.close()
    assert [r.status for r in hooks.results] == ["duplicate", "duplicate"]
    assert len(orders_of(db)) == 2  # each order once
    assert folder_counts(dovecot, user) == (0, 2)


def test_uidvalidity_change_does_not_reapply(dovecot, sqlite_intake) -> None:
    db, config = sqlite_intake
    user = dovecot.new_user()
    raw = order_mail("ann", "ann-key-123", "6", "uv1")
    c = client(dovecot, user)
    c.append("INBOX", raw)
    c.logout()
    hooks = DatabaseHooks(db, config, lambda: T0)
    changes = []
    hooks.uidvalidity_changed = lambda source, old, new: changes.append((old, new))
    poller = ImapPoller(mailbox(dovecot, user), hooks)
    poller.poll_once()
    poller.close()
    dovecot.delete_mailbox(user)  # the mailbox is recreated: a new UIDVALIDITY, UIDs restart
    time.sleep(1.1)  # UIDVALIDITY is a timestamp
    c = client(dovecot, user)
    c.append("INBOX", raw)
    c.logout()
    assert poller.poll_once() == 1  # stored (recognised) and moved
    poller.close()
    assert len(changes) == 1 and changes[0][0] != changes[0][1]
    assert [r.status for r in hooks.results] == ["processed", "duplicate"]
    assert len(orders_of(db)) == 1


def test_two_pollers_one_mailbox(dovecot, intake) -> None:
    db, config = intake
    user = dovecot.new_user()
    c = client(dovecot, user)
    c.append("INBOX", order_mail("ann", "ann-key-123", "1", "two1"))
    c.logout()
    first = ImapPoller(mailbox(dovecot, user), DatabaseHooks(db, config, lambda: T0, owner="a"))
    second = ImapPoller(mailbox(dovecot, user), DatabaseHooks(db, config, lambda: T0, owner="b"))
    assert first.poll_once() == 1
    assert second.poll_once() == 0  # the lease is held by the first process
    first.close()
    second.close()
    assert len(orders_of(db)) == 1


def test_idle_survives_a_dropped_connection(dovecot, sqlite_intake) -> None:
    db, config = sqlite_intake
    user = dovecot.new_user()
    hooks = DatabaseHooks(db, config, lambda: T0)
    failures = []
    original_failed = hooks.failed
    hooks.failed = lambda source, error: (failures.append(error), original_failed(source, error))
    poller = ImapPoller(mailbox(dovecot, user), hooks)
    stop = threading.Event()
    runner = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    runner.start()
    try:
        c = client(dovecot, user)
        c.append("INBOX", order_mail("ann", "ann-key-123", "3", "idle1"))
        c.logout()
        # each wait ends on its event (about a second); the limit is a hang detector
        wait_for(lambda: len(orders_of(db)) == 1, 120)  # IDLE woke the poller
        dovecot.drop_connections()  # the server side of every connection dies
        c = client(dovecot, user)
        c.append("INBOX", order_mail("bob", "bob-key-123", "3", "idle2"))
        c.logout()
        wait_for(lambda: len(orders_of(db)) == 2, 120)  # reconnected with backoff
    finally:
        stop.set()
        runner.join(120)
    assert failures, "the dropped connection was noticed and recorded"
    assert folder_counts(dovecot, user) == (0, 2)


def wait_for(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_imaplibs_trace_is_written_only_when_it_is_logged(
    dovecot, sqlite_intake, caplog, monkeypatch, level
) -> None:
    """imapclient turns imaplib's protocol trace on for every connection; imaplib then
    writes every line (each fetched message's bytes in full) before its logger drops them.
    Below DEBUG imaplib writes no entry at all; at DEBUG, the trace is logged as before
    (the messages too)."""
    written: list[str] = []
    adapter = imapclient.imapclient.IMAPlibLoggerAdapter
    original = adapter.debug

    def counted(self: logging.LoggerAdapter, msg: str, *args: object, **kwargs: object) -> None:
        written.append(msg)
        original(self, msg, *args, **kwargs)  # type: ignore[arg-type]

    db, config = sqlite_intake
    user = dovecot.new_user()
    c = client(dovecot, user)  # (imapclient's own connection: traced)
    c.append("INBOX", order_mail("ann", "ann-key-123", "4", "trace-1"))
    c.logout()
    monkeypatch.setattr(adapter, "debug", counted)
    caplog.set_level(level, logger=IMAPLIB_LOGGER)
    poller = ImapPoller(mailbox(dovecot, user), DatabaseHooks(db, config, clock=lambda: T0))
    try:
        assert poller.poll_once() == 1
        traced = [r.getMessage() for r in caplog.records if r.name == IMAPLIB_LOGGER]
        if level == logging.DEBUG:
            assert any("trace-1@example.org" in entry for entry in written), written[-5:]
            assert any("trace-1@example.org" in line for line in traced), traced[-5:]
        else:
            assert written == [], written
    finally:
        poller.close()
