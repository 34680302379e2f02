"""Benchmark: how late a round closes when 100 slow messages reached us before its deadline.

Each slow message runs to the sandbox's time limit, as a 1 MiB message of nested <div>s did
before issue 20. The limit is lowered for the run (``--limit``, 0.5 s instead of 10 s) and
the close's wait with it (``CLOSE_WAIT_SECONDS`` scaled by the same factor), so the slow
part of each figure scales back to the real limit by that factor (printed; the ordinary
work in it, milliseconds a message, does not scale, so the scaled figure is an upper
bound). A slow message is simulated where the intake calls the sandbox: it holds its
reader for the limit, then fails as the real limit makes it fail (``ParseTimeout``);
every other message is read by the real sandbox.

Three players' honest orders are stored after the slow ones. Measured on SQLite, each on a
fresh game, the close delay (from the close job's start to the round closed):

- baseline: the same close with 100 ordinary order messages stored unread (its wait
  unscaled: nothing in it is slow);
- before: the close as it was, reading each stored message one after another;
- after: the close as it is, reading them in parallel, small first, at most its budget.

Run: .venv/bin/python tests/benchmarks/bench_slow_close.py [--messages 100] [--limit 0.5]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).parents[1]))

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest, process_now
from snl_pbem.config import Config, load_config
from snl_pbem.mail import sandbox
from snl_pbem.mail.parse import ParseTimeout
from snl_pbem.runners.mailboxes import IN_ORDER_SECONDS, Readers
from snl_pbem.runners.scheduler import CLOSE_WAIT_SECONDS, RoundScheduler
from snl_pbem.store import Database, OrderRecord, Round
from snl_pbem.store.migrate import upgrade

T0 = datetime.now(UTC) - timedelta(hours=1)
HONEST = 3
MARK = b"<div><div><div><div>"


def make_config(folder: Path, players: int) -> Config:
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
    return load_config(path)


def order_mail(p: int, tag: str) -> bytes:
    return (
        f"From: Player {p} <p{p}@example.org>\r\nTo: snl@example.org\r\n"
        f"Subject: [bench] orders\r\nDate: Mon, 30 Nov 2026 10:00:00 +0000\r\n"
        f"Message-ID: <{tag}@example.org>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\n"
        f"GAME bench\r\nKEY key-p{p}-0123\r\nDICE {1 + p % 6}\r\n"
    ).encode()


def slow_mail(n: int) -> bytes:
    """The shape that ran to the limit: an HTML message of nested <div>s (320 KiB here, in
    lines of 15 tags, as clients keep lines short; over ALWAYS_AWAITED_BYTES, since a close
    waits for any smaller message however long it takes)."""
    lines = 320 * 1024 // 11 // 15
    html = "\r\n".join(["<div>" * 15] * lines + ["DICE 6"] + ["</div>" * 15] * lines)
    return (
        f"From: x{n}@evil.example\r\nTo: snl@example.org\r\nSubject: [bench] orders\r\n"
        f"Message-ID: <slow-{n}@evil.example>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/html; charset=utf-8\r\n\r\n"
        f"<html><body>\r\n{html}\r\n</body></html>\r\n"
    ).encode()


class Serial(RoundScheduler):
    """The close as it was before issue 20: every stored message read one after another."""

    def _process_stragglers(self, game_name: str, number: int, ids: Collection[int]) -> None:
        for inbound_id in sorted(ids):  # those the close's decision found unread, in order
            process_now(self.db, self.config, inbound_id)


def run(kind: str, messages: int, limit: float, scale: float) -> tuple[float, int]:
    """(close delay in seconds, honest players whose orders counted)."""
    with tempfile.TemporaryDirectory() as tmp:
        players = messages if kind == "baseline" else HONEST
        config = make_config(Path(tmp), players)
        db = Database(config.database_url)
        upgrade(db)
        sync_games(db, config, T0)
        start_game(db, config, "bench", T0)
        with db.transaction() as s:
            deadline = s.scalar(select(Round.deadline).where(Round.number == 1))
        at = deadline - timedelta(minutes=1)
        if kind == "baseline":
            raws = [order_mail(p, f"o{p}") for p in range(messages)]
        else:
            raws = [slow_mail(n) for n in range(messages)]
            raws += [order_mail(p, f"h{p}") for p in range(HONEST)]
        for raw in raws:
            ingest(db, config, raw, at, "bench", process=False)
        cls = Serial if kind == "before" else RoundScheduler
        factor = 1.0 if kind == "baseline" else scale  # nothing slow: the real figures
        readers = Readers(in_order=IN_ORDER_SECONDS * factor)
        rounds = cls(
            db,
            config,
            clock=lambda: deadline + timedelta(seconds=1),
            readers=readers,
            close_wait=CLOSE_WAIT_SECONDS * factor,
        )
        started = time.perf_counter()
        outcome = rounds.on_deadline("bench", 1)
        delay = time.perf_counter() - started
        assert outcome is not None, rounds.failures
        with db.transaction() as s:
            counted = s.scalar(
                select(func.count(OrderRecord.player_id.distinct())).where(
                    OrderRecord.valid.is_(True)
                )
            )
        while not readers.idle():  # what the close left is read before the next run
            time.sleep(limit)
        db.dispose()
        return delay, int(counted or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--limit", type=float, default=0.5)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    scale = args.limit / sandbox.PARSE_SECONDS
    real = sandbox.parse

    def parse(raw: bytes, *rest: object, **kw: object) -> object:
        if MARK in raw:  # held for the limit, then stopped, as the sandbox stops it
            time.sleep(args.limit)
            raise ParseTimeout(f"reading it took longer than {args.limit:g} s (stopped)")
        return real(raw, *rest, **kw)

    sandbox.default_sandbox().warm()
    sandbox.parse = parse  # type: ignore[assignment]
    n = args.messages
    print(
        f"{n} messages stored before the deadline; a slow one holds a reader {args.limit:g} s "
        f"(the real limit {sandbox.PARSE_SECONDS:g} s: figures x{1 / scale:g} below); "
        f"{sandbox.MAX_WORKERS} readers; the close waits {CLOSE_WAIT_SECONDS * scale:g} s at "
        f"most ({CLOSE_WAIT_SECONDS:g} s real)"
    )
    print(f"{'close':<44} {'delay':>8} {'at 10 s limit':>14} {'honest orders':>14}")
    rows = [
        ("baseline", f"{n} ordinary orders"),
        ("before", f"{n} slow + {HONEST} honest, read one by one"),
        ("after", f"{n} slow + {HONEST} honest, parallel, bounded"),
    ]
    results = {}
    for kind, label in rows:
        delay, counted = run(kind, n, args.limit, scale)
        results[kind] = delay
        honest = f"{counted}/{n if kind == 'baseline' else HONEST}"
        scaled = "-" if kind == "baseline" else f"{delay / scale:.0f}s"
        print(f"{kind + ': ' + label:<44} {delay:>7.2f}s {scaled:>14} {honest:>14}")
    print(
        f"after / before: {results['after'] / results['before']:.3f}x; the close's budget for "
        f"slow messages is {CLOSE_WAIT_SECONDS:g} s ({CLOSE_WAIT_SECONDS * scale:g} s here)"
    )


if __name__ == "__main__":
    main()
