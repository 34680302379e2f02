"""Benchmark: 5,000 order emails through the IMAP poller, end to end.

The messages are APPENDed to a private Dovecot; the poller fetches them,
parses, authenticates, stores the orders, enqueues a reply for each, and
moves them to the processed folder (SQLite database). The baseline, measured
in the same run on the same bytes, is parsing alone:
``email.message_from_bytes(raw, policy=email.policy.default)``.
Goal: end-to-end ingest at least half the rate of the bare parse.

Run: .venv/bin/python tests/benchmarks/bench_ingest.py [--messages 5000] [--players 500]
"""

from __future__ import annotations

import argparse
import email
import email.policy
import platform
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from dovecotserver import DovecotServer
from imapclient import IMAPClient
from sqlalchemy import func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import load_config
from snl_pbem.mail.imap import ImapPoller, MailboxConfig
from snl_pbem.runners.mailboxes import DatabaseHooks
from snl_pbem.store import Database, OrderRecord, OutboxMessage
from snl_pbem.store.migrate import upgrade

T0 = datetime.now(UTC) - timedelta(hours=1)  # round 1 opens before the mail arrives


def make_config(folder: Path, players: int) -> Path:
    lines = [
        'timezone = "UTC"',
        "[database]",
        f'url = "sqlite:///{folder / "bench.db"}"',
        "backups = 0",
        "[mail]",
        'address = "snl@example.org"',
        'referee = "ref@example.org"',
        "replies_per_hour = 1000",
        "[[games]]",
        'id = "bench"',
        'board = { snakes = { "47" = 26 }, ladders = { "4" = 14 } }',
        'first_deadline = "2030-01-04T18:00"',
        'round_length = "3d"',
        "players = [",
        *(
            f'  {{ name = "p{i}", email = "p{i}@example.org", key = "key-p{i}-0123" }},'
            for i in range(players)
        ),
        "]",
    ]
    path = folder / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def order_mail(i: int, players: int) -> bytes:
    p = i % players
    return (
        f"Return-Path: <p{p}@example.org>\r\nFrom: Player {p} <p{p}@example.org>\r\n"
        f"To: snl@example.org\r\nSubject: [bench] orders\r\n"
        f"Date: Mon, 30 Nov 2026 10:00:00 +0000\r\nMessage-ID: <bench-{i}@example.org>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"Hello referee,\r\n\r\nGAME bench\r\nKEY key-p{p}-0123\r\nDICE {1 + i % 6}\r\n"
        f"TRAPDOOR {10 + i % 80}\r\n\r\nThanks!\r\n-- \r\nPlayer {p}\r\n"
    ).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--players", type=int, default=500)
    args = parser.parse_args()
    raws = [order_mail(i, args.players) for i in range(args.messages)]

    started = time.perf_counter()
    for raw in raws:
        email.message_from_bytes(raw, policy=email.policy.default)
    parse_s = time.perf_counter() - started

    dovecot = DovecotServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            config = load_config(make_config(folder, args.players))
            db = Database(config.database_url)
            upgrade(db)
            sync_games(db, config, T0)
            start_game(db, config, "bench", T0)
            user = dovecot.new_user()
            client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=60)
            client.login(user, "secret")
            for raw in raws:
                client.append("INBOX", raw)
            client.logout()
            mailbox = MailboxConfig(
                host=dovecot.host,
                port=dovecot.port,
                tls="none",
                username=user,
                password="secret",
                timeout=60,
            )
            poller = ImapPoller(mailbox, DatabaseHooks(db, config, clock=lambda: datetime.now(UTC)))
            started = time.perf_counter()
            stored = poller.poll_once()
            ingest_s = time.perf_counter() - started
            poller.close()
            with db.transaction() as s:
                orders = s.scalar(select(func.count()).select_from(OrderRecord))
                replies = s.scalar(
                    select(func.count())
                    .select_from(OutboxMessage)
                    .where(OutboxMessage.kind == "ack")
                )
            db.dispose()
    finally:
        dovecot.remove()
    assert stored == orders == replies == args.messages, (stored, orders, replies)
    n = args.messages
    print(
        f"bench_ingest: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{n} messages from {args.players} players"
    )
    print(
        f"  end to end (IMAP fetch, parse, auth, store, reply, MOVE): {ingest_s:7.2f} s "
        f"= {n / ingest_s:8.0f} orders/s"
    )
    print(
        f"  baseline email.message_from_bytes(policy=default):      {parse_s:7.2f} s "
        f"= {n / parse_s:8.0f} messages/s"
    )
    print(f"  ratio: {(n / ingest_s) / (n / parse_s):.2f} of the bare parse rate (goal >= 0.5)")


if __name__ == "__main__":
    main()
