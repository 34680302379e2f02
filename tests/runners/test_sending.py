"""The outbox sender in a process of its own (``snl_pbem.runners.sending``): on PostgreSQL
``serve`` sends from a child, which it restarts when it dies and when the mail settings
change, and which never outlives it: stopped, or SIGKILLed."""

from __future__ import annotations

import asyncio
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
from smtpsink import free_port
from sqlalchemy import func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import load_config
from snl_pbem.procs import YOUNG_COLLECTED_EVERY
from snl_pbem.runners.sending import STOP_SECONDS, PipeSignals, SenderProcess
from snl_pbem.runners.server import Server
from snl_pbem.store import Database, OutboxMessage
from snl_pbem.store.migrate import upgrade

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

    # a drain asks whether to stop after each part: a kick read then is kept for the wait
    signals.clear()
    os.write(write, b"k")
    assert not signals.stopped()
    began = time.monotonic()
    signals.wait(WAIT, kick=True)
    assert time.monotonic() - began < WAIT / 2

    # a kick does not end a wait for the SMTP server (kick=False); the pipe's end does
    signals.clear()
    threading.Timer(0.2, os.write, (write, b"k")).start()
    threading.Timer(1.0, os.close, (write,)).start()
    began = time.monotonic()
    signals.wait(WAIT, kick=False)
    assert signals.stopped() and 0.9 <= time.monotonic() - began < WAIT / 2
    os.close(read)


def test_a_kick_never_blocks_serve_when_the_sender_is_not_reading(tmp_path: Path) -> None:
    """A sender busy with a long drain reads no kick: the pipe fills, and a close or a reply
    kicking it must not wait (a full pipe holds a kick already)."""
    path = tmp_path / "config.toml"
    _config(path, f"sqlite:///{tmp_path / 'snl.db'}", 25, datetime.now(UTC))
    sender = SenderProcess(load_config(path), 0)
    assert sender.config.games == ()  # what it pickles: no game's table
    read, write = SenderProcess.pipe()  # as start() makes it
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


def _ignored(pid: int) -> set[int]:
    """The signals a process ignores (/proc/PID/status, SigIgn)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


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
        assert _ignored(first) >= {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}  # serve's

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

        # SIGKILLed: its sender ends too, and claims nothing more (stalled mid-send, it is
        # killed with serve: the next test)
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


class StallingSink:
    """An SMTP server that takes a message's DATA and never answers it: a sender stuck
    mid-send, as with a relay that hangs."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.began = threading.Event()
        self.port = free_port()
        self._release: asyncio.Event | None = None
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server, session, envelope):
        self._release = asyncio.Event()
        self.began.set()
        await self._release.wait()  # until the test ends
        return "451 4.3.0 Try again later"

    def __enter__(self) -> StallingSink:
        self.controller.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._release is not None:
            self.controller.loop.call_soon_threadsafe(self._release.set)
        self.controller.stop()


@pytest.mark.slow
def test_the_sender_stuck_mid_send_dies_with_a_killed_serve_and_is_killed_by_a_stopping_one(
    tmp_path: Path, postgres
) -> None:
    """systemd stops the service with SIGTERM to all its processes: the sender ignores it
    (serve tells it over the pipe), and serve kills it once STOP_SECONDS have passed. A
    SIGKILLed serve takes its sender along at once (PR_SET_PDEATHSIG), not after the SMTP
    timeout (60 s) would have freed it to see the pipe's end."""
    url = postgres.url(postgres.create_database())
    config = tmp_path / "config.toml"
    log = tmp_path / "serve.log"
    with StallingSink() as sink, log.open("ab") as out:
        _config(config, url, sink.port, datetime.now(UTC) + timedelta(days=1))
        for command in (["db", "upgrade"], ["start", "g1"]):
            done = subprocess.run(
                [SNL, *command, "--config", str(config)], capture_output=True, check=False
            )
            assert done.returncode == 0, done.stderr
        serve = subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=out,
            stderr=out,
            start_new_session=True,  # its own process group, as systemd's cgroup
        )
        try:
            assert sink.began.wait(WAIT), log.read_text()
            sender = _senders(log)[0]
            os.killpg(serve.pid, signal.SIGTERM)  # to every process, as systemd stops
            assert serve.wait(WAIT) == 0
            assert _gone(sender)
            assert f"the sender did not stop within {STOP_SECONDS:.0f}s: killed" in log.read_text()

            sink.began.clear()
            serve = subprocess.Popen(
                [SNL, "serve", "--config", str(config), "--log-level", "info"],
                stdout=out,
                stderr=out,
            )
            assert sink.began.wait(WAIT), log.read_text()
            sender = _senders(log)[1]
            serve.kill()
            serve.wait(WAIT)
            began = time.monotonic()
            while not _gone(sender) and time.monotonic() - began < 30:
                time.sleep(0.1)
            assert _gone(sender), "the sender outlived its killed serve"
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()


@pytest.mark.slow
def test_the_servers_kicks_reach_its_sender_process(tmp_path: Path, postgres, smtp_sink) -> None:
    """Mail enqueued by a close goes out on serve's kick, not on the sender's idle drain: with
    the idle drain an hour apart, the reports still come (waits end on them, 300 s at most)."""
    url = postgres.url(postgres.create_database())
    config = tmp_path / "config.toml"
    _config(config, url, smtp_sink.port, datetime.now(UTC) + timedelta(days=1))
    db = Database(url)
    upgrade(db)
    loaded = load_config(config)
    sync_games(db, loaded, datetime.now(UTC))
    start_game(db, loaded, "g1", datetime.now(UTC))
    server = Server(config, sender_idle=3600.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"install_signals": False})
    thread.start()
    try:
        assert server.ready.wait(WAIT)
        assert server._sender is not None and server._sender.alive()
        assert server._sender._pipe is not None
        assert not os.get_blocking(server._sender._pipe.fileno())  # a kick never waits
        # the start mails: the sender's first drain, as it starts
        _wait(lambda: _unsent(db) == 0 and len(smtp_sink.delivered) == 3, "start mails", config)
        # round 1 due now (a reload, as SIGHUP): its close kicks the sender
        _config(config, url, smtp_sink.port, datetime.now(UTC) + timedelta(seconds=1))
        server._reload.set()
        _wait(lambda: _outbox(db) > 3 and _unsent(db) == 0, "the reports sent", config)
        sender = server._sender
        assert sender is not None and sender.alive()
    finally:
        server.stop_event.set()
        thread.join(WAIT)
        db.dispose()
    assert not thread.is_alive() and not sender.alive()


def test_a_started_server_keeps_what_start_up_made_out_of_the_collectors_passes(
    tmp_path: Path, smtp_sink, monkeypatch
) -> None:
    """Once started, serve freezes what start-up made (the config, compiled templates and
    queries: they live as long as it) out of the cycle collector's passes, and collects the
    young less often (issue 23: the passes were 59 us of a message's 0.8 ms, 33 after)."""
    import gc

    from snl_pbem.runners import server as server_module

    settled: list[tuple[int, tuple[int, int, int]]] = []
    real = server_module.settle_collector
    threshold = gc.get_threshold()

    def settle() -> None:
        real()
        settled.append((gc.get_freeze_count(), gc.get_threshold()))

    monkeypatch.setattr(server_module, "settle_collector", settle)
    url = f"sqlite:///{tmp_path / 'snl.db'}"
    config = tmp_path / "config.toml"
    _config(config, url, smtp_sink.port, datetime.now(UTC) + timedelta(days=1))
    db = Database(url)
    upgrade(db)
    db.dispose()
    server = Server(config, sender_idle=3600.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"install_signals": False})
    thread.start()
    try:
        assert server.ready.wait(WAIT)
        [(frozen, (young, middle, old))] = settled  # once, before it is ready
        assert frozen > 1000  # the objects start-up made
        assert young == YOUNG_COLLECTED_EVERY and middle >= 20 and old >= 20
    finally:
        server.stop_event.set()
        thread.join(WAIT)
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert not thread.is_alive()
