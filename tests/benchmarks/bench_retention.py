"""Benchmark: the daily purge of old mail, sent and received (``keep_sent_mail``,
``keep_processed_mail``), on SQLite and PostgreSQL.

Sent: the outbox is filled with mail as a host of many games writes it: round reports of a
20-player game in English, Chinese and Thai (quoted-printable, with the order template), and
one in twenty a game's last mail with its replay file attached, all sent long ago; each is
cut to its headers and the fingerprint of its lines. Inbound: players' orders as a phone's
client sends them, replying above the quoted report, handled long ago; each is cut to its
headers. In each table, half as many again, of the last ten days, come after the old ones:
not due, but every batch's search must pass them. The server's purge
(``RoundScheduler.purge_sent``, ``purge_mail``: the rows due found and their new bytes made
in a transaction that only reads, then written in transactions of PURGE_BATCH) is timed,
with its longest writing transaction (on SQLite, the longest a close or the intake can wait
for the write lock) and the bytes before and after. The baseline, in the same run on an
identical table, is the bare writing of the same new bytes: one ``UPDATE ... SET message = ?
WHERE id = ?`` a row, committed every PURGE_BATCH rows, with the new bytes made before the
clock starts. Then the purge of a day with nothing due, on the purged table: what every
later day costs.

Run: .venv/bin/python tests/benchmarks/bench_retention.py [--rows 20000]
     [--db sqlite,postgresql] [--tables sent,inbound]
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from pgserver import PostgresServer
from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from snl_pbem.app.retention import headers_only, sent_headers_only
from snl_pbem.config import Config, load_config
from snl_pbem.mail.compose import compose
from snl_pbem.runners.scheduler import PURGE_BATCH, RoundScheduler
from snl_pbem.store import Database, InboundMessage, OutboxMessage
from snl_pbem.store.migrate import upgrade

NOW = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)
SENT = NOW - timedelta(days=200)
NAMES = [f"player{i:02d}" for i in range(20)]
GREETINGS = {"en": "Hello", "zh": "你好", "th": "สวัสดีคุณ"}
LINES = {
    "en": "Still open in your set of six after these dice",
    "zh": "本组六轮中你还可以使用的骰子点数",
    "th": "แต้มที่เหลือในชุดหกตานี้ของคุณ",
}


def message(i: int) -> bytes:
    """One mail of ours, as the server writes it: a round report, or a game's last mail."""
    language = ("en", "zh", "th")[i % 3]
    who = NAMES[i % 20]
    standings = "\n".join(
        f"  {n + 1:>2}   {name:<10} {100 - 3 * n:>3}" + ("   <- you" if name == who else "")
        for n, name in enumerate(NAMES)
    )
    body = (
        f"{GREETINGS[language]} {who}\n\nGame g{i // 20} - positions after round {i % 40}:\n\n"
        f"{standings}\n\nNext: round {i % 40 + 1}\nDeadline: Fri 4 Jan 2030 18:00 GMT\n\n"
        f"{LINES[language]}: 1, 2, 3, 4, 6\n\nGAME g{i // 20}\nKEY (your order key)\n"
        f"ROUND {i % 40 + 1}\nDICE 1\nTRAPDOOR (a space, or leave this line out)\n"
        f"-- \nThe g{i // 20} referee\n"
    )
    replay = (
        [("replay.txt", "text/plain", ("round 1: " + "4 " * 20 + "\n").encode() * 220)]
        if i % 20 == 0
        else []
    )
    return compose(
        sender="snl@example.org",
        sender_name="Snakes and Ladders referee",
        to=f"{who}@example.org",
        subject=f"[g{i // 20}] Positions after round {i % 40}",
        body=body,
        now=SENT,
        message_id=f"<snl.{i:08d}@example.org>",
        game_name=f"g{i // 20}",
        broadcast=False,
        attachments=replay,
        language=language,
    )


def order(i: int) -> bytes:
    """A player's orders, as a phone's client sends them (the inbound table's usual row)."""
    return (
        f"Return-Path: <{NAMES[i % 20]}@example.org>\r\nFrom: {NAMES[i % 20]} "
        f"<{NAMES[i % 20]}@example.org>\r\nTo: snl@example.org\r\nSubject: Re: [g{i // 20}] "
        f"Positions after round {i % 40}\r\nDate: Mon, 30 Nov 2026 10:00:00 +0000\r\n"
        f"Message-ID: <CAF{i:010d}@mail.gmail.com>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: text/plain; charset="UTF-8"\r\n\r\n'
        f"GAME g{i // 20}\r\nKEY ****\r\nDICE {1 + i % 6}\r\nTRAPDOOR {10 + i % 80}\r\n\r\n"
        f"On Fri, 4 Jan 2030 at 18:00, referee <snl@example.org> wrote:\r\n"
        + "> the report, quoted\r\n"
        * 30
    ).encode()


@dataclass(frozen=True)
class Table:
    """One kind of kept mail: its rows, its column, its new bytes and the server's purge."""

    name: str
    unit: str
    model: Any
    column: Any
    cut: Callable[[bytes, datetime, timedelta], bytes]
    purge: Callable[[RoundScheduler], int]
    setting: str

    def row(self, i: int, old: int) -> dict[str, object]:
        """The ``i``-th row: sent (or received) long ago if ``i < old``, else ten days ago."""
        at = SENT if i < old else NOW - timedelta(days=10)
        if self.model is OutboxMessage:
            return {
                "kind": "game-over" if i % 20 == 0 else "report",
                "recipient": f"{NAMES[i % 20]}@example.org",
                "message_id": f"<snl.{i:08d}@example.org>",
                "message": message(i),
                "status": "sent",
                "attempts": 1,
                "next_attempt_at": at,
                "created_at": at,
                "sent_at": at,
            }
        return {
            "message_id": f"<CAF{i:010d}@mail.gmail.com>",
            "sha256": f"{i:064x}",
            "source": "lmtp",
            "received_at": at,
            "raw": order(i),
            "status": "processed",
            "sender": f"{NAMES[i % 20]}@example.org",
        }


TABLES = {
    "sent": Table(
        "sent",
        "mails",
        OutboxMessage,
        OutboxMessage.message,
        sent_headers_only,
        RoundScheduler.purge_sent,
        "keep_sent_mail",
    ),
    "inbound": Table(
        "inbound",
        "orders",
        InboundMessage,
        InboundMessage.raw,
        headers_only,
        RoundScheduler.purge_mail,
        "keep_processed_mail",
    ),
}


@contextmanager
def filled(table: Table, rows: int, url: str | None) -> Iterator[tuple[Database, Path]]:
    """A fresh database (SQLite file, or ``url``) whose table holds ``rows`` old mails, and
    half as many again of the last ten days after them (not due: every batch's search
    passes them)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(url or f"sqlite:///{Path(tmp) / 'bench.db'}")
        upgrade(db)
        with db.transaction() as session:
            everything = rows + rows // 2
            for start in range(0, everything, 1000):
                session.execute(
                    insert(table.model),
                    [table.row(i, rows) for i in range(start, min(everything, start + 1000))],
                )
        try:
            yield db, Path(tmp)
        finally:
            db.dispose()


def stored_bytes(db: Database, table: Table, rows: int) -> int:
    """The bytes of the old mails (the first ``rows``)."""
    with db.reading() as session:
        return int(
            session.scalar(
                select(func.sum(func.length(table.column))).where(table.model.id <= rows)
            )
            or 0
        )


def config_for(folder: Path, db: Database) -> Config:
    path = folder / "config.toml"
    path.write_text(
        f'[database]\nurl = "{db.url}"\n[mail]\naddress = "snl@example.org"\n'
        'referee = "ref@example.org"\nkeep_sent_mail = "90d"\nkeep_processed_mail = "90d"\n'
    )
    return load_config(path)


def purge(db: Database, folder: Path, table: Table) -> tuple[float, float, int]:
    """The server's purge: seconds, its longest writing transaction's seconds (from its
    BEGIN, on SQLite the write lock, to its commit), rows cut."""
    longest = 0.0
    real = db.transaction

    @contextmanager
    def timed() -> Iterator[Session]:
        nonlocal longest
        started = time.perf_counter()
        with real() as session:
            yield session
        longest = max(longest, time.perf_counter() - started)

    db.transaction = timed  # type: ignore[method-assign]
    try:
        rs = RoundScheduler(db, config_for(folder, db), clock=lambda: NOW)
        started = time.perf_counter()
        cut = table.purge(rs)
        return time.perf_counter() - started, longest, cut
    finally:
        db.transaction = real  # type: ignore[method-assign]


def bare(db: Database, table: Table, old: int) -> float:
    """The baseline: the same new bytes written, one UPDATE a row, a commit a batch."""
    keep = timedelta(days=90)
    with db.reading() as session:
        rows = session.execute(
            select(table.model.id, table.column)
            .where(table.model.id <= old)
            .order_by(table.model.id)
        ).all()
    new = [{"i": row_id, "m": table.cut(raw, NOW, keep)} for row_id, raw in rows]
    statement = (
        update(table.model)
        .where(table.model.id == bindparam("i"))
        .values({table.column: bindparam("m")})
        .execution_options(synchronize_session=False)
    )
    started = time.perf_counter()
    for start in range(0, len(new), PURGE_BATCH):
        with db.engine.begin() as connection:
            for row in new[start : start + PURGE_BATCH]:
                connection.execute(statement, row)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--tables", default="sent,inbound")
    args = parser.parse_args()
    print(
        f"bench_retention: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{args.rows} old messages a table and {args.rows // 2} recent, "
        f"batches of {PURGE_BATCH}"
    )
    postgres = PostgresServer().start() if "postgresql" in args.db else None
    try:
        for kind in args.db.split(","):

            def url(kind: str = kind) -> str | None:
                if kind != "postgresql":
                    return None
                assert postgres is not None
                return postgres.url(postgres.create_database())

            for table in (TABLES[name] for name in args.tables.split(",")):
                with filled(table, args.rows, url()) as (db, _):
                    baseline = bare(db, table, args.rows)
                with filled(table, args.rows, url()) as (db, folder):
                    before = stored_bytes(db, table, args.rows)
                    seconds, longest, cut = purge(db, folder, table)
                    after = stored_bytes(db, table, args.rows)
                    quiet, _, none = purge(db, folder, table)
                assert cut == args.rows and none == 0, (cut, none)
                print(
                    f"  {kind:10s} {table.name:7s} purge: {seconds:6.2f} s = "
                    f"{cut / seconds:6.0f} {table.unit}/s; longest write {longest * 1000:.0f} ms;"
                    f" {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB "
                    f"({100 * after / before:.0f}%)"
                )
                print(
                    f"  {kind:10s} {table.name:7s} baseline, the same bytes written bare: "
                    f"{baseline:6.2f} s ({seconds / baseline:.2f}x); a day with nothing due: "
                    f"{quiet * 1000:.0f} ms"
                )
    finally:
        if postgres is not None:
            postgres.stop()


if __name__ == "__main__":
    main()
