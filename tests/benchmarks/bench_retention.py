"""Benchmark: cutting old sent mail to its headers and fingerprint (``keep_sent_mail``), on
SQLite and PostgreSQL.

The outbox is filled with mail as a host of many games writes it: round reports of a
20-player game in English, Chinese and Thai (quoted-printable, with the order template),
and one in twenty a game's last mail with its replay file attached, all sent long ago.
The server's daily purge (``RoundScheduler.purge_sent``: the rows due found in a read-only
transaction, then cut in transactions of PURGE_BATCH) is timed, with its longest writing
transaction (on SQLite, the longest a close or the intake can wait for the write lock)
and the bytes before and after. The baseline, in the same run on an identical outbox, is
the bare writing of the same new bytes: one ``UPDATE outbox SET message = ? WHERE id = ?``
a row, committed every PURGE_BATCH rows, with the new bytes made before the clock starts.
Then the purge of a day with nothing due, on the purged outbox: what every later day costs.

Run: .venv/bin/python tests/benchmarks/bench_retention.py [--rows 20000]
     [--db sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from pgserver import PostgresServer
from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from snl_pbem.app.retention import sent_headers_only
from snl_pbem.config import load_config
from snl_pbem.mail.compose import compose
from snl_pbem.runners.scheduler import PURGE_BATCH, RoundScheduler
from snl_pbem.store import Database, OutboxMessage
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


@contextmanager
def outbox(rows: int, url: str | None) -> Iterator[tuple[Database, Path]]:
    """A fresh database (SQLite file, or ``url``) whose outbox holds ``rows`` sent mails."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(url or f"sqlite:///{Path(tmp) / 'bench.db'}")
        upgrade(db)
        with db.transaction() as session:
            for start in range(0, rows, 1000):
                session.execute(
                    insert(OutboxMessage),
                    [
                        {
                            "kind": "game-over" if i % 20 == 0 else "report",
                            "recipient": f"{NAMES[i % 20]}@example.org",
                            "message_id": f"<snl.{i:08d}@example.org>",
                            "message": message(i),
                            "status": "sent",
                            "attempts": 1,
                            "next_attempt_at": SENT,
                            "created_at": SENT,
                            "sent_at": SENT,
                        }
                        for i in range(start, min(rows, start + 1000))
                    ],
                )
        try:
            yield db, Path(tmp)
        finally:
            db.dispose()


def stored_bytes(db: Database) -> int:
    with db.reading() as session:
        return int(session.scalar(select(func.sum(func.length(OutboxMessage.message)))) or 0)


def config_for(folder: Path, db: Database) -> object:
    path = folder / "config.toml"
    path.write_text(
        f'[database]\nurl = "{db.url}"\n[mail]\naddress = "snl@example.org"\n'
        'referee = "ref@example.org"\nkeep_sent_mail = "90d"\n'
    )
    return load_config(path)


def purge(db: Database, folder: Path) -> tuple[float, float, int]:
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
        rs = RoundScheduler(db, config_for(folder, db), clock=lambda: NOW)  # type: ignore[arg-type]
        started = time.perf_counter()
        cut = rs.purge_sent()
        return time.perf_counter() - started, longest, cut
    finally:
        db.transaction = real  # type: ignore[method-assign]


def bare(db: Database) -> float:
    """The baseline: the same new bytes written, one UPDATE a row, a commit a batch."""
    keep = timedelta(days=90)
    with db.reading() as session:
        rows = session.execute(
            select(OutboxMessage.id, OutboxMessage.message).order_by(OutboxMessage.id)
        ).all()
    new = [{"i": row_id, "m": sent_headers_only(raw, NOW, keep)} for row_id, raw in rows]
    statement = (
        update(OutboxMessage)
        .where(OutboxMessage.id == bindparam("i"))
        .values(message=bindparam("m"))
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
    args = parser.parse_args()
    print(
        f"bench_retention: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{args.rows} sent mails, batches of {PURGE_BATCH}"
    )
    postgres = PostgresServer().start() if "postgresql" in args.db else None
    try:
        for kind in args.db.split(","):

            def url(kind: str = kind) -> str | None:
                if kind != "postgresql":
                    return None
                assert postgres is not None
                return postgres.url(postgres.create_database())

            with outbox(args.rows, url()) as (db, _):
                baseline = bare(db)
            with outbox(args.rows, url()) as (db, folder):
                before = stored_bytes(db)
                seconds, longest, cut = purge(db, folder)
                after = stored_bytes(db)
                quiet, _, none = purge(db, folder)
            assert cut == args.rows and none == 0, (cut, none)
            print(
                f"  {kind:10s} purge: {seconds:6.2f} s = {cut / seconds:6.0f} mails/s; "
                f"longest write {longest * 1000:.0f} ms; {before / 2**20:.1f} MiB -> "
                f"{after / 2**20:.1f} MiB ({100 * after / before:.0f}%)"
            )
            print(
                f"  {kind:10s} baseline, the same bytes written bare: {baseline:6.2f} s "
                f"({seconds / baseline:.2f}x); a day with nothing due: {quiet * 1000:.0f} ms"
            )
    finally:
        if postgres is not None:
            postgres.stop()


if __name__ == "__main__":
    main()
