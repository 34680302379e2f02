"""Benchmark: 5,000 reports from the outbox to an SMTP sink on loopback.

The sink is aiosmtpd in its own process (so it does not share our GIL). The
baseline, run in the same process against the same sink, is a bare smtplib
loop sending the same messages over one persistent connection. The outbox is
drained with one connection, then (refilled) with several in parallel.
Goal: at least 0.9x the baseline on one connection, above 1.5x in parallel.
The three runs take turns ``--repeats`` times (a busy machine slows them alike),
and each figure is the best of its runs, beside every pair's own ratio. The outbox is
written anew before each run, outside the clock.

Run: .venv/bin/python tests/benchmarks/bench_send.py [--messages 5000] [--connections 4]
[--repeats 3] [--db sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import platform
import smtplib
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from pgserver import PostgresServer
from smtpsink import free_port
from sqlalchemy import delete, func, select, text

from snl_pbem.app.outbox import drain_parallel, enqueue_mail
from snl_pbem.config import load_config
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.store import Database, OutboxMessage
from snl_pbem.store.migrate import upgrade

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)
SINK = """
import asyncio, sys
from aiosmtpd.controller import Controller
class Count:
    async def handle_DATA(self, server, session, envelope):
        return "250 OK"
c = Controller(Count(), hostname="127.0.0.1", port=int(sys.argv[1]))
c.start()
print("ready", flush=True)
sys.stdin.read()
c.stop()
"""


def fill(db: Database, config, n: int) -> None:
    with db.transaction() as s:
        for i in range(n):
            enqueue_mail(
                s,
                config,
                game=None,
                kind="report",
                to=f"p{i}@example.org",
                now=T0,
                template="player/notice.txt.j2",
                subject=f"Round report {i}",
                player=None,
                message="Positions after round 7: " + "x" * 600,
                line_problems=(),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    postgres = PostgresServer().start() if args.db == "postgresql" else None
    port = free_port()
    sink = subprocess.Popen(
        [sys.executable, "-c", SINK, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "c.toml"
            url = postgres.url(postgres.create_database()) if postgres else f"sqlite:///{tmp}/b.db"
            path.write_text(
                f'[database]\nurl = "{url}"\n[mail]\n'
                'address = "snl@example.org"\nreferee = "ref@example.org"\n'
            )
            config = load_config(path)
            db = Database(config.database_url)
            upgrade(db)
            fill(db, config, args.messages)
            with db.transaction() as s:
                messages = [(r.recipient, r.message) for r in s.scalars(select(OutboxMessage))]

            def bare() -> tuple[float, float]:
                started, cpu = time.perf_counter(), time.process_time()
                client = smtplib.SMTP("127.0.0.1", port)
                for recipient, raw in messages:
                    client.sendmail("snl@example.org", [recipient], raw)
                client.quit()
                return time.perf_counter() - started, time.process_time() - cpu

            def sender() -> SmtpSender:
                return SmtpSender(SmtpConfig("127.0.0.1", port, "none"), "snl@example.org")

            def outbox(connections: int) -> tuple[float, float]:
                # written anew, as a storm's closes write it: rows sent and set back to
                # pending run after run left PostgreSQL's table and indexes full of dead
                # versions that each claim read past (no server ever sets mail back)
                with db.transaction() as s:
                    if postgres is not None:
                        s.execute(text("TRUNCATE outbox"))
                    else:
                        s.execute(delete(OutboxMessage))
                fill(db, config, args.messages)
                started, cpu = time.perf_counter(), time.process_time()
                report = drain_parallel(
                    db, config, sender, lambda: T0, connections=connections, worker="bench"
                )
                elapsed = time.perf_counter() - started, time.process_time() - cpu
                with db.transaction() as s:
                    sent = s.scalar(
                        select(func.count())
                        .select_from(OutboxMessage)
                        .where(OutboxMessage.status == "sent")
                    )
                assert report.sent == sent == args.messages, (report, sent)
                return elapsed

            runs: list[tuple[tuple[float, float], ...]] = []
            for _ in range(args.repeats):
                runs.append((bare(), outbox(1), outbox(args.connections)))
            db.dispose()
    finally:
        sink.communicate("", timeout=10)
        if postgres is not None:
            postgres.stop()
    n = args.messages
    base_s = min(r[0][0] for r in runs)
    base_cpu = min(r[0][1] for r in runs)
    print(
        f"bench_send: Python {platform.python_version()}, {n} messages, aiosmtpd sink in "
        f"its own process, {'PostgreSQL' if postgres else 'SQLite'} outbox, best of "
        f"{args.repeats} runs taking turns"
    )
    print(
        f"  baseline: bare smtplib loop, one connection: {base_s:6.2f} s = {n / base_s:7.0f} msg/s"
        f" (sender's CPU {base_cpu / n * 1e6:5.0f} us/msg)"
    )
    for index, connections in ((1, 1), (2, args.connections)):
        elapsed = min(r[index][0] for r in runs)
        cpu = min(r[index][1] for r in runs)
        pairs = ", ".join(f"{r[0][0] / r[index][0]:.2f}x" for r in runs)
        print(
            f"  outbox, {connections} connection(s):              {elapsed:6.2f} s = "
            f"{n / elapsed:7.0f} msg/s ({base_s / elapsed:.2f}x baseline; each run "
            f"against its own baseline: {pairs}) (sender's CPU {cpu / n * 1e6:5.0f} us/msg, "
            f"{base_cpu / cpu:.2f}x baseline's)"
        )


if __name__ == "__main__":
    main()
