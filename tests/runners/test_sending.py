"""The outbox sender in a process of its own (``snl_pbem.runners.sending``): on PostgreSQL
``serve`` sends from a child, which it restarts when it dies and when the mail settings
change, and which never outlives it: stopped, or SIGKILLed."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from snl_pbem.runners.sending import PipeSignals, SenderProcess
from snl_pbem.store import Database, OutboxMessage

SNL = str(Path(sys.executable).with_name("snl-pbem"))
WAIT = 300.0
"""A hang detector: every wait below ends on an event (a log line, a row, a process gone)
that takes a second or a few on a busy machine."""
SENDING = re.compile(r"outbox: sending from process (\d+)")


# -- the pipe: kicks, and its end ------------------------------------------------------------


def test_a_kick_ends_the_wait_and_the_pipes_end_stops_the_loop() -> None:
    read, write = os.pipe()
    signals = PipeSignals(read)
    os.write(write, b"kkk")
    began = time.monotonic()
    signals.wait(WAIT, kick=True)  # kicked already: returns at once
    assert time.monotonic() - began < WAIT / 2 and not signals.stopped()

    os.write(write, b"k")
    signals.clear()  # the drain about to start sends what the kick was for
    threading.Timer(0.5, os.write, (write, b"k")).start()
    signals.wait(WAIT, kick=True)  # ends on the kick written later, not on the one cleared
    assert not signals.stopped()

    # a kick does not end a wait for the SMTP server (kick=False); the pipe's end does
    threading.Timer(0.2, os.write, (write, b"k")).start()
    threading.Timer(1.0, os.close, (write,)).start()
    began = time.monotonic()
    signals.wait(WAIT, kick=False)
    assert signals.stopped() and 0.9 <= time.monotonic() - began < WAIT / 2
    os.close(read)


def test_a_kick_never_blocks_serve_when_the_sender_is_not_reading() -> None:
    """A sender busy with a long drain reads no kick: the pipe fills, and a close or a reply
    kicking it must not wait (a full pipe holds a kick already)."""
    sender = SenderProcess(config=None, log_level=0)  # type: ignore[arg-type]
    read, write = multiprocessing.Pipe(duplex=False)
    os.set_blocking(write.fileno(), False)
    sender._pipe = write
    for _ in range(200_000):  # about three pipes' worth
        sender.kick()
    assert os.read(read.fileno(), 1) == b"k"
    sender.finish()
    read.close()


# -- serve on PostgreSQL ---------------------------------------------------------------------


def _config(path: Path, url: str, port: int, first: datetime, connections: int = 1) -> None:
    path.write_text(f"""
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[mail.smtp]
host = "127.0.0.1"
port = {port}
tls = "none"
connections = {connections}
[[games]]
id = "g1"
board = "standard"
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "1d"
players = [
  {{ name = "ann", email = "ann@example.org" }},
  {{ name = "bob", email = "bob@example.org" }},
  {{ name = "cy", email = "cy@example.org" }},
]
""")


def _wait(condition, what: str, log: Path) -> None:
    until = time.monotonic() + WAIT
    while time.monotonic() < until:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text()[-3000:]}")


def _senders(log: Path) -> list[int]:
    return [int(pid) for pid in SENDING.findall(log.read_text())]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return None if fields[0] in "ZX" else int(fields[1])  # a zombie is gone for us


def _gone(pid: int) -> bool:
    return _parent(pid) is None


def _unsent(db: Database) -> int:
    with db.transaction() as s:
        return s.scalar(
            select(func.count()).select_from(OutboxMessage).where(OutboxMessage.status != "sent")
        )


def _outbox(db: Database) -> int:
    with db.transaction() as s:
        return s.scalar(select(func.count()).select_from(OutboxMessage))


@pytest.mark.slow
def test_serve_on_postgresql_sends_from_a_child_it_restarts_and_never_leaves_behind(
    tmp_path: Path, postgres, smtp_sink
) -> None:
    url = postgres.url(postgres.create_database())
    config = tmp_path / "config.toml"
    _config(config, url, smtp_sink.port, datetime.now(UTC) + timedelta(days=1))
    for command in (["db", "upgrade"], ["start", "g1"]):  # the start mails: enqueued
        done = subprocess.run(
            [SNL, *command, "--config", str(config)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    db = Database(url)
    log = tmp_path / "serve.log"
    out = log.open("ab")
    serve = subprocess.Popen(
        [SNL, "serve", "--config", str(config), "--log-level", "info"], stdout=out, stderr=out
    )
    try:
        # it sends from a child of its own, which sends what is queued
        _wait(lambda: _senders(log) and _unsent(db) == 0, "the start mails sent", log)
        first = _senders(log)[0]
        assert _parent(first) == serve.pid

        # the child killed: serve starts another, which sends the next mail (a round's
        # close: its deadline moved to now by a reload that leaves the mail settings alone)
        os.kill(first, signal.SIGKILL)
        _wait(lambda: len(_senders(log)) == 2, "a second sender", log)
        second = _senders(log)[1]
        assert second != first and _parent(second) == serve.pid
        assert "the sender process was killed by SIGKILL; restarting it" in log.read_text()
        before = _outbox(db)
        _config(config, url, smtp_sink.port, datetime.now(UTC) + timedelta(seconds=2))
        serve.send_signal(signal.SIGHUP)
        _wait(lambda: "round 1 closed" in log.read_text(), "round 1 closed", log)
        _wait(lambda: _outbox(db) > before and _unsent(db) == 0, "the reports sent", log)
        assert _senders(log) == [first, second]  # the same mail settings: the same sender

        # the mail settings changed: a new sender, the old one gone
        later = datetime.now(UTC) + timedelta(days=1)
        _config(config, url, smtp_sink.port, later, connections=2)
        serve.send_signal(signal.SIGHUP)
        _wait(lambda: len(_senders(log)) == 3, "a sender for the new settings", log)
        third = _senders(log)[2]
        _wait(lambda: _gone(second), "the old sender gone", log)
        assert _parent(third) == serve.pid

        # stopped: serve exits 0, and its sender with it
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(WAIT) == 0
        assert _gone(third)

        # SIGKILLed: its sender dies with it (PR_SET_PDEATHSIG), and claims nothing more
        serve = subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"], stdout=out, stderr=out
        )
        _wait(lambda: len(_senders(log)) == 4, "the restarted server's sender", log)
        fourth = _senders(log)[3]
        serve.kill()
        serve.wait(WAIT)
        _wait(lambda: _gone(fourth), "the sender of a killed server gone", log)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        out.close()
        db.dispose()
    db = Database(url)
    with db.transaction() as s:
        queued = set(s.scalars(select(OutboxMessage.message_id)))
    db.dispose()
    delivered = Counter(m.message_id for m in smtp_sink.delivered)
    assert set(delivered) == queued and len(queued) > before > 0
    assert max(delivered.values()) == 1  # every kill came with nothing in flight
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text.replace(
        "ERROR snl_pbem.server: the sender process was killed", ""
    )
