"""Benchmark: hosting many games -- a deadline storm, the idle scheduler, start-up.

N games of 20 players each (one file per game, ``games_dir``; where the config has no
``games_dir``, every game in the one file), every round 1 due at one deadline, run by
real ``snl-pbem serve`` processes: on SQLite (one server) and on PostgreSQL (a private
server started for the run, as the tests do) with 1, 2 and 4 servers. No intake is
configured (no order arrives: every player is played by the no-orders default, R17);
mail goes to an SMTP sink (aiosmtpd) in its own process, which counts what it is handed.

- The storm: from the deadline until the sink has every message the closes queued,
  against a bare smtplib loop (one connection) sending as many messages of the same mean
  size to the same sink, in the same run. The deadline is set a little after the servers
  are up and idle, so start-up is not in it. Goals: the whole storm within 3x the bare
  send, and the cost per game at the largest size within 1.5x its cost at the smallest.
- The log lines the servers write per storm, per game: in proportion to the games.
- serve idle between deadlines (one server, no deadline near), on SQLite and on
  PostgreSQL: its CPU per minute (and PostgreSQL's), flat across sizes; its start-up time
  and RSS, beside a baseline of Python importing the server and reading the same config.
  Start-up is timed from just before the serve process is launched until it tells
  systemd READY=1 (its notify socket): all of its own work (imports, config, schema
  check, sync, the first plan of every game) is inside it.

Setting up is not timed (it runs in this process). The games are started once per size
(start_game, welcome mail marked sent: about 60 ms a game) into a seed SQLite database;
each configuration gets a copy of it (SQLite: the backup API; PostgreSQL: the rows copied
into a migrated database, which is then the template of a database per run). The copies
hold the same rows start_game writes, so the storm (from the deadline on) and start-up
(from serve's launch on) are what they would be on a database set up game by game.
--seed-dir keeps the seeds between runs (keyed by games, players and schema revision).

Each row is printed (prefixed "> ") as soon as it is measured, so a run stopped part-way
keeps what it measured; the tables come again at the end. Each storm is capped
(--timeout): one that runs longer is reported as not finished.

Run: .venv/bin/python tests/benchmarks/bench_hosting.py [--games 100,1000,5000]
       [--players 20] [--db sqlite,postgresql] [--servers 1,2,4] [--idle-seconds 60]
       [--timeout 1800] [--no-idle | --no-storm] [--seed-dir DIR] [--logs DIR] [--quick]
       [--languages en|mix] [--dkim]

--dkim: every mail is signed with a DKIM key made for the run (as a GM who signs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import smtplib
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from checkout import code_under_test
from dkimkeys import key_file_for_the_run
from pgserver import PostgresServer, PostgresUnavailable
from proccpu import (
    children,
    children_cpu,
    cpu_seconds,
    cpu_since,
    machine_busy,
    postmaster_pid,
    tree_cpu,
)
from smtpsink import free_port
from sqlalchemy import Integer, func, select, text, update

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import Settings, load_config
from snl_pbem.store import Database, OutboxMessage, Round
from snl_pbem.store.migrate import head_revision, upgrade
from snl_pbem.store.models import Base, PlanChange

SNL = str(Path(sys.executable).with_name("snl-pbem"))
SINK = """
import sys, threading, time
from aiosmtpd.controller import Controller
class Count:
    def __init__(self):
        self.lock, self.count, self.bytes, self.last = threading.Lock(), 0, 0, 0.0
    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.count += 1
            self.bytes += len(envelope.original_content or b"")
            self.last = time.time()
        return "250 OK"
handler = Count()
c = Controller(handler, hostname="127.0.0.1", port=int(sys.argv[1]))
c.start()
print("ready", flush=True)
for _ in sys.stdin:  # each line asks: messages, bytes, when the last came (epoch)
    with handler.lock:
        print(handler.count, handler.bytes, repr(handler.last), flush=True)
c.stop()
"""
BASELINE_START = (
    "import resource, sys; import snl_pbem.runners.server; from snl_pbem.config import "
    "load_config; from pathlib import Path; load_config(Path(sys.argv[1])); "
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def say(text: str) -> None:
    """Progress, on stderr (stdout holds the figures)."""
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the parts: sink, config, servers -------------------------------------------------


class Sink:
    """The SMTP sink in its own process (so it does not share a GIL with anyone)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SINK, str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def stat(self) -> tuple[int, int, float]:
        """Messages and bytes handed to it so far, and when the last one came (epoch s)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        count, size, last = self.proc.stdout.readline().split()
        return int(count), int(size), float(last)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def close(self) -> None:
        self.proc.communicate("", timeout=10)


GAMES_DIR = "games_dir" in Settings.model_fields
"""One file per game (``games_dir``) where the config has it, as a host would write them."""
LANGUAGES: tuple[str, ...] = ("en",)
"""The players' languages, in turn (--languages mix: English, Chinese and Thai, a third
each, from their config entries: every report in its reader's language)."""
DKIM_KEY: Path | None = None
"""A DKIM key every mail is signed with (--dkim: a 2048-bit key made for the run)."""


def write_config(
    path: Path, url: str, games: int, players: int, first: datetime, port: int
) -> None:
    """The config at ``path``: with GAMES_DIR, its games in a folder beside it, one file
    each (written whole again on every call); else every game in the one file."""
    lines = [
        'timezone = "UTC"',
        "[database]",
        f'url = "{url}"',
        "[mail]",
        'address = "snl@example.org"',
        'referee = "ref@example.org"',
        "[mail.smtp]",
        'host = "127.0.0.1"',
        f"port = {port}",
        'tls = "none"',
        *([f'[mail.dkim]\nselector = "snl"\nprivate_key_file = "{DKIM_KEY}"'] if DKIM_KEY else []),
    ]
    folder = path.with_name(path.stem + ".games.d")
    if GAMES_DIR:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        lines.insert(1, f'games_dir = "{folder.name}"')
    when = first.isoformat(timespec="seconds")
    for g in range(games):
        game = [
            f'id = "g{g:05d}"',
            'board = "standard"',
            f'first_deadline = "{when}"',
            'round_length = "1d"',
            "players = [",
            *(
                f'  {{ name = "p{p:02d}", email = "g{g:05d}p{p:02d}@example.org"'
                + (f', language = "{LANGUAGES[p % len(LANGUAGES)]}"' if len(LANGUAGES) > 1 else "")
                + " },"
                for p in range(players)
            ),
            "]",
        ]
        if GAMES_DIR:
            (folder / f"g{g:05d}.toml").write_text("\n".join(game) + "\n")
        else:
            lines += ["[[games]]", *game]
    path.write_text("\n".join(lines) + "\n")


def build_seed(seed: Path, games: int, players: int, port: int) -> None:
    """A SQLite database at ``seed`` with every game started, round 1 due in a day, the
    welcomes marked sent. Built beside ``seed`` and renamed, so a stopped build leaves none."""
    work = Path(tempfile.mkdtemp(prefix="seed-", dir=seed.parent))
    try:
        path, db_path = work / "seed.toml", work / "seed.db"
        url = f"sqlite:///{db_path}"
        write_config(path, url, games, players, datetime.now(UTC) + timedelta(days=1), port)
        config = load_config(path)
        db = Database(url)
        upgrade(db)
        now = datetime.now(UTC)
        sync_games(db, config, now, actor="bench")
        for n, game in enumerate(config.games, 1):
            start_game(db, config, game.id, now, via="bench")
            if n % 500 == 0:
                say(f"{n} of {games} games started")
        with db.transaction() as s:
            s.execute(update(OutboxMessage).values(status="sent", sent_at=now))
        db.dispose()
        copy_sqlite(db_path, seed.with_suffix(".part"))
        seed.with_suffix(".part").rename(seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def seed_for(folder: Path, games: int, players: int, port: int) -> tuple[Path, float | None]:
    """The seed for this size in ``folder``, built unless it is there: its path, and the
    seconds the build took (None: reused)."""
    seed = folder / f"seed-{games}x{players}-{head_revision()}{'-gd' if GAMES_DIR else ''}.db"
    if seed.exists():
        return seed, None
    began = time.monotonic()
    build_seed(seed, games, players, port)
    return seed, time.monotonic() - began


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (the backup API: the WAL included)."""
    target.unlink(missing_ok=True)
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def copy_to_postgres(seed: Path, url: str) -> None:
    """The seed's rows into the empty PostgreSQL database at ``url`` (migrated here), and
    each id sequence moved past them. Not plan_changes' rows: the triggers write their own
    as the rounds go in, as they do under start_game; a new scheduler starts past them."""
    target = Database(url)
    upgrade(target)
    source = Database(f"sqlite:///{seed}")
    try:
        with source.engine.connect() as read, target.engine.begin() as write:
            for table in Base.metadata.sorted_tables:
                if table.name == PlanChange.__tablename__:
                    continue
                rows = read.execute(select(table)).mappings()
                while batch := [dict(row) for row in rows.fetchmany(2000)]:
                    write.execute(table.insert(), batch)
                keys = list(table.primary_key.columns)
                if len(keys) == 1 and isinstance(keys[0].type, Integer):
                    # NULL (nothing done) where the key has no sequence
                    write.execute(
                        text(
                            f"SELECT setval(pg_get_serial_sequence('{table.name}', "
                            f"'{keys[0].name}'), coalesce(max({keys[0].name}), 0) + 1, false) "
                            f"FROM {table.name}"
                        )
                    )
        with target.engine.begin() as write:
            write.execute(text("ANALYZE"))  # as autovacuum would have, game by game
    finally:
        source.dispose()
        target.dispose()


def move_deadline(path: Path, url: str, games: int, players: int, port: int, at: datetime) -> float:
    """Every round 1 due ``at`` (the config's schedule, synced here): seconds it took."""
    began = time.monotonic()
    write_config(path, url, games, players, at, port)
    db = Database(url)
    sync_games(db, load_config(path), datetime.now(UTC), actor="bench")
    db.dispose()
    return time.monotonic() - began


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def children_rss_mib(pid: int) -> float:
    """The RSS of a process's children (serve's parse workers, and its sender on
    PostgreSQL)."""
    total = 0.0
    for child in children(pid):
        with contextlib.suppress(OSError):  # it just ended
            total += rss_mib(child)
    return total


class Serve:
    """One ``snl-pbem serve`` process, its log in a file, its readiness on a notify socket."""

    def __init__(self, config: Path, folder: Path, tag: str) -> None:
        self.log_path = folder / f"serve-{tag}.log"
        notify = folder / f"notify-{tag}"
        notify.unlink(missing_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(notify))
        self.sock.settimeout(0.5)
        self.began = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [SNL, "serve", "--config", str(config), "--log-level", "info"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NOTIFY_SOCKET": str(notify)},
            )

    def wait_ready(self, within: float) -> float | None:
        """Seconds from the launch until READY=1, or None if not within ``within``."""
        while time.monotonic() - self.began < within:
            try:
                if b"READY=1" in self.sock.recv(4096):
                    return time.monotonic() - self.began
            except TimeoutError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"serve exited: {self.log_tail()}") from None
        return None

    def log_lines(self) -> tuple[int, int]:
        """Lines in its log so far, and how many of them are warnings or errors."""
        lines = self.log_path.read_bytes().splitlines()
        return len(lines), sum(line.startswith((b"WARNING", b"ERROR")) for line in lines)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def closes(self) -> int:
        return self.log_path.read_bytes().count(b": round 1 closed")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.sock.close()


# -- the measurements -----------------------------------------------------------------


@dataclass
class Idle:
    database: str
    games: int
    startup_s: float | None
    baseline_s: float
    rss: float
    peak: float
    workers_rss: float
    baseline_rss: float
    cpu_per_min: float | None
    lines_per_min: float
    db_cpu_per_min: float | None = None
    """PostgreSQL's processes (all of them: the server's backends and its own workers)."""


@dataclass
class Storm:
    database: str
    servers: int
    games: int
    finished: bool
    seconds: float
    messages: int
    mean_bytes: float
    bare_s: float
    log_lines: int
    warnings: int
    ready_before: float
    serve_cpu: float
    db_cpu: float | None
    sink_cpu: float
    machine_cpu: float
    window_s: float
    closes: list[int] = field(default_factory=list)
    closed: int = 0
    last_change: float = 0.0
    """Unfinished: seconds after the deadline of the last close or send seen."""


def baseline_start(config: Path) -> tuple[float, float]:
    """Python importing the server and reading the config: seconds and max RSS (MiB)."""
    runs = []
    for _ in range(3):  # the best of three: other work on the machine only adds
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", BASELINE_START, str(config)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the start-up baseline failed: {done.stderr[-2000:]}")
        runs.append((time.monotonic() - began, int(done.stdout.split()[-1]) / 1024))
    return min(runs)


def measure_idle(
    database: str,
    config: Path,
    folder: Path,
    games: int,
    seconds: float,
    within: float,
    db_pid: int | None,
) -> Idle:
    """One serve started on ``config`` and left idle; ``db_pid``: PostgreSQL's postmaster,
    whose children's CPU is counted."""
    base_s, base_rss = baseline_start(config)
    serve: Serve | None = None
    try:
        serve = Serve(config, folder, f"idle-{database}-{games}")
        startup = serve.wait_ready(within)
        if startup is None:
            return Idle(database, games, None, base_s, 0, 0, 0, base_rss, None, 0)
        time.sleep(1.0)  # the first moves after READY (the sender's first look) settle
        cpu0, lines0 = tree_cpu(serve.proc.pid), serve.log_lines()[0]
        db0 = children_cpu(db_pid)
        time.sleep(seconds)
        cpu = cpu_since(cpu0, tree_cpu(serve.proc.pid))
        db_cpu = sum(c - db0.get(pid, 0.0) for pid, c in children_cpu(db_pid).items())
        lines = serve.log_lines()[0] - lines0
        rss, peak = rss_mib(serve.proc.pid), rss_mib(serve.proc.pid, "VmHWM")
        workers = children_rss_mib(serve.proc.pid)
    finally:
        if serve is not None:
            serve.stop()
    return Idle(
        database,
        games,
        startup,
        base_s,
        rss,
        peak,
        workers,
        base_rss,
        cpu * 60 / seconds,
        lines * 60 / seconds,
        db_cpu * 60 / seconds if db_pid else None,
    )


def bare_send(port: int, messages: int, size: int) -> float:
    """The best of up to three runs (while they take under 20 s together): other work on
    the machine only slows it."""
    runs = [bare_send_once(port, messages, size)]
    while len(runs) < 3 and sum(runs) < 20:
        runs.append(bare_send_once(port, messages, size))
    return min(runs)


def bare_send_once(port: int, messages: int, size: int) -> float:
    """A bare smtplib loop on one connection: ``messages`` messages of ``size`` bytes."""
    head = (
        "From: snl@example.org\r\nTo: p@example.org\r\nSubject: [g00001] Round 1 report\r\n"
        "Date: Sat, 01 Dec 2029 12:00:00 +0000\r\nMessage-ID: <{n}@bench.test>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    )
    began = time.perf_counter()
    client = smtplib.SMTP("127.0.0.1", port)
    for n in range(messages):
        text = head.format(n=n)
        body = ("x" * 75 + "\r\n") * max(0, (size - len(text)) // 77)
        client.sendmail("snl@example.org", ["p@example.org"], (text + body).encode())
    client.quit()
    return time.perf_counter() - began


def progress(db: Database) -> tuple[int, int]:
    """Round 1s still open, and messages not yet sent."""
    with db.transaction() as s:
        still_open = s.scalar(
            select(func.count()).select_from(Round).where(Round.number == 1, Round.state == "open")
        )
        unsent = s.scalar(
            select(func.count()).select_from(OutboxMessage).where(OutboxMessage.status == "pending")
        )
    return int(still_open or 0), int(unsent or 0)


def run_storm(
    database: str,
    url: str,
    servers: int,
    games: int,
    players: int,
    folder: Path,
    sink: Sink,
    startup_guess: float,
    sync_guess: float,
    timeout: float,
    db_pid: int | None,
) -> Storm:
    """One storm; ``db_pid``: PostgreSQL's postmaster, whose children's CPU is counted."""
    path = folder / f"storm-{database}-{servers}.toml"
    # the deadline: after the deadlines are moved and every server is up, with room to spare
    margin = 5 + 3 * (sync_guess + startup_guess * max(1.0, servers / 2))
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=round(margin))
    move_deadline(path, url, games, players, sink.port, deadline)
    count0, bytes0, _ = sink.stat()
    procs: list[Serve] = []
    db = Database(url)
    try:
        for i in range(servers):  # one by one: each is stopped below if the run is stopped
            procs.append(Serve(path, folder, f"{database}-{servers}-{i}"))
        for serve in procs:
            if serve.wait_ready(margin + 600) is None:
                raise RuntimeError(f"serve not ready: {serve.log_tail()}")
        ready_before = (deadline - datetime.now(UTC)).total_seconds()
        time.sleep(max(0.0, ready_before - 0.2))
        lines0 = [serve.log_lines() for serve in procs]
        cpu0 = [tree_cpu(serve.proc.pid) for serve in procs]
        sink0, busy0, db0 = sink.cpu(), machine_busy(), children_cpu(db_pid)
        window0 = time.monotonic()
        finished, seen, last_change, told = False, (games, 0), 0.0, time.monotonic()
        stopped, since = False, 0.0
        while (since := (datetime.now(UTC) - deadline).total_seconds()) < timeout:
            try:
                time.sleep(0.5)
            except (KeyboardInterrupt, Stopped):  # the row so far, then stop
                stopped = True
                break
            still_open, unsent = progress(db)
            if not still_open and not unsent:
                finished = True
                break
            if (still_open, unsent) != seen:
                seen, last_change = (still_open, unsent), since
            if time.monotonic() - told >= 30:
                say(f"+{since:.0f} s: {games - still_open} of {games} closed, {unsent} unsent")
                told = time.monotonic()
            if any(serve.proc.poll() is not None for serve in procs):
                raise RuntimeError(f"a serve exited: {procs[0].log_tail()}")
        count, size, last = sink.stat()
        lines1 = [serve.log_lines() for serve in procs]
        serve_cpu = sum(
            cpu_since(c, tree_cpu(s.proc.pid)) for s, c in zip(procs, cpu0, strict=True)
        )
        busy1, window = machine_busy(), time.monotonic() - window0
        sink_cpu = sink.cpu() - sink0
        db_cpu = sum(cpu - db0.get(pid, 0.0) for pid, cpu in children_cpu(db_pid).items())
        still_open, _ = progress(db)
    finally:
        for serve in procs:
            serve.stop()
        db.dispose()
    messages = count - count0
    mean = (size - bytes0) / messages if messages else 0.0
    seconds = last - deadline.timestamp() if finished else since
    storm = Storm(
        database=database,
        servers=servers,
        games=games,
        finished=finished,
        seconds=seconds,
        messages=messages,
        mean_bytes=mean,
        bare_s=bare_send(sink.port, messages, int(mean)) if messages and not stopped else 0.0,
        log_lines=sum(b[0] - a[0] for a, b in zip(lines0, lines1, strict=True)),
        warnings=sum(b[1] - a[1] for a, b in zip(lines0, lines1, strict=True)),
        ready_before=ready_before,
        serve_cpu=serve_cpu,
        db_cpu=db_cpu if db_pid else None,
        sink_cpu=sink_cpu,
        machine_cpu=busy1[0] - busy0[0],
        window_s=window,
        closes=[serve.closes() for serve in procs],
        closed=games - still_open,
        last_change=last_change,
    )
    if stopped:
        raise Stopped(storm)
    return storm


# -- the report -----------------------------------------------------------------------

STORM_HEAD = (
    f"{'database':<10} {'servers':>7} {'games':>6} {'messages':>8} {'storm s':>8} "
    f"{'ms/game':>8} {'bare s':>7} {'ratio':>6} {'log/game':>8} {'warn':>6} "
    f"{'ready s':>7}  closes by server"
)
CPU_HEAD = (
    f"{'database':<10} {'servers':>7} {'games':>6} {'window s':>8} {'serve':>7} "
    f"{'postgres':>8} {'sink':>6} {'machine':>8} {'of':>7} {'other':>7}"
)
IDLE_HEAD = (
    f"{'database':<10} {'games':>6} {'start s':>8} {'base s':>7} {'ratio':>6} {'RSS MiB':>8} "
    f"{'peak MiB':>8} {'workers':>8} {'base MiB':>8} {'CPU s/min':>9} {'vs first':>8} "
    f"{'pg s/min':>8} {'log/min':>8}"
)

HEADS = {"storm": STORM_HEAD, "cpu": CPU_HEAD, "idle": IDLE_HEAD}


def storm_row(s: Storm, timeout: float) -> str:
    head = f"{s.database:<10} {s.servers:>7} {s.games:>6} {s.messages:>8} "
    if not s.finished:
        return (
            f"{head}did not finish within {s.seconds:.0f} s"
            + (" (stopped)" if s.seconds < timeout else "")
            + f" ({s.closed} of {s.games} "
            f"rounds closed, the last change seen at +{s.last_change:.0f} s; "
            f"{s.log_lines} log lines, {s.warnings} warnings)"
        )
    return (
        f"{head}{s.seconds:8.2f} {s.seconds / s.games * 1000:8.1f} {s.bare_s:7.2f} "
        f"{s.seconds / s.bare_s:5.1f}x {s.log_lines / s.games:8.1f} {s.warnings:>6} "
        f"{s.ready_before:7.1f}  {'+'.join(str(c) for c in s.closes)}"
        + ("  (LATE: a server was not up at the deadline)" if s.ready_before < 0 else "")
    )


def cpu_row(s: Storm) -> str:
    other = s.machine_cpu - s.serve_cpu - (s.db_cpu or 0) - s.sink_cpu
    db_cpu = "-" if s.db_cpu is None else f"{s.db_cpu:.1f}"
    return (
        f"{s.database:<10} {s.servers:>7} {s.games:>6} {s.window_s:8.1f} "
        f"{s.serve_cpu:7.1f} {db_cpu:>8} {s.sink_cpu:6.1f} {s.machine_cpu:8.1f} "
        f"{s.window_s * (os.cpu_count() or 1):7.1f} {other:7.1f}"
    )


def idle_row(i: Idle, first: float | None) -> str:
    """``first``: the CPU per minute of the smallest size on the same database."""
    if i.startup_s is None or i.cpu_per_min is None:
        return f"{i.database:<10} {i.games:>6} did not start within the cap"
    versus = f"{i.cpu_per_min / first:7.2f}x" if first else "      -"
    db_cpu = "-" if i.db_cpu_per_min is None else f"{i.db_cpu_per_min:.2f}"
    return (
        f"{i.database:<10} {i.games:>6} {i.startup_s:8.2f} {i.baseline_s:7.2f} "
        f"{i.startup_s / i.baseline_s:5.1f}x {i.rss:8.0f} {i.peak:8.0f} {i.workers_rss:8.0f} "
        f"{i.baseline_rss:8.0f} {i.cpu_per_min:9.2f} {versus} {db_cpu:>8} "
        f"{i.lines_per_min:8.1f}"
    )


def first_idle(idles: list[Idle], database: str) -> float | None:
    return next(
        (i.cpu_per_min for i in idles if i.database == database and i.cpu_per_min is not None),
        None,
    )


class Stream:
    """Each row on stdout as soon as it is measured, prefixed "> ", under its kind's
    header the first time: a run stopped part-way keeps what it measured."""

    def __init__(self) -> None:
        self.headed: set[str] = set()

    def row(self, kind: str, text: str) -> None:
        if kind not in self.headed and kind in HEADS:
            self.headed.add(kind)
            print(f"> {kind:<5} {HEADS[kind]}", flush=True)
        print(f"> {kind:<5} {text}", flush=True)


def print_storms(storms: list[Storm], timeout: float) -> None:
    print(
        "\ndeadline storm: from the deadline until the sink has every message; baseline: a "
        "bare smtplib\nloop on one connection sending as many messages of the same mean size "
        "to the same sink, same run"
    )
    print(STORM_HEAD)
    for s in storms:
        print(storm_row(s, timeout))
    print(
        "  ms/game = storm s / games; ratio = storm s / bare s (goal <= 3x); log/game = lines "
        "the servers\n  logged from the deadline to the end, per game (goal: flat across "
        "sizes); warn = warnings and\n  errors among them; ready s = every server was up this "
        "long before the deadline"
    )
    print(
        "\nCPU seconds in each storm: the servers (with their children: on PostgreSQL, the "
        "sender), PostgreSQL's\nprocesses, the sink, and the whole machine (busy of the "
        "window's 2 x wall seconds; other = what\nnone of these used: other work here)"
    )
    print(CPU_HEAD)
    for s in storms:
        print(cpu_row(s))
    by_setup: dict[tuple[str, int], list[Storm]] = {}
    for s in storms:
        by_setup.setdefault((s.database, s.servers), []).append(s)
    for (database, servers), runs in by_setup.items():
        small, large = runs[0], runs[-1]
        if small is large:
            continue
        if not (small.finished and large.finished):
            print(f"  {database}, {servers} server(s): per-game cost not compared (unfinished)")
            continue
        growth = (large.seconds / large.games) / (small.seconds / small.games)
        lines = (large.log_lines / large.games) / max(small.log_lines / small.games, 1e-9)
        print(
            f"  {database}, {servers} server(s): cost per game at {large.games} games is "
            f"{growth:.2f}x its cost at {small.games} (goal <= 1.5x: "
            f"{'met' if growth <= 1.5 else 'missed'}); log lines per game {lines:.2f}x"
        )
    ones = {(s.database, s.games): s for s in storms if s.servers == 1 and s.finished}
    for s in storms:
        one = ones.get(("postgresql", s.games))
        if s.database == "postgresql" and s.servers > 1 and s.finished and one is not None:
            print(
                f"  postgresql, {s.servers} servers, {s.games} games: "
                f"{one.seconds / s.seconds:.2f}x the speed of one server"
            )


def print_idle(idles: list[Idle]) -> None:
    print(
        "\nserve idle between deadlines (one server, round 1 due in 20 h): start-up from its "
        "launch until\nREADY=1, RSS, CPU over the idle minute; baseline: Python importing the "
        "server and reading the\nsame config"
    )
    print(IDLE_HEAD)
    for i in idles:
        print(idle_row(i, first_idle(idles, i.database)))
    print(
        "  goal: CPU per minute flat across sizes (vs first = this size's over the smallest's "
        "on the\n  same database); start-up quick with thousands of games; RSS after the idle "
        "minute, peak =\n  its highest; workers = its children's RSS together (the parse "
        "workers, and on PostgreSQL\n  the sender); CPU s/min counts its children too; base MiB = "
        "the baseline's peak;\n  pg s/min = PostgreSQL's CPU per minute meanwhile"
    )


def keep_logs(folder: Path, into: Path | None) -> None:
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
        for log in folder.rglob("serve-*.log"):
            shutil.copy(log, into / f"{log.parent.name}-{log.name}")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default="100,1000,5000", help="sizes, comma-separated")
    parser.add_argument("--players", type=int, default=20)
    parser.add_argument("--db", default="sqlite,postgresql", help="sqlite, postgresql or both")
    parser.add_argument(
        "--servers",
        default="1,2,4",
        help="serve processes in each PostgreSQL storm, comma-separated (SQLite: always one)",
    )
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="cap on each storm, s")
    part = parser.add_mutually_exclusive_group()
    part.add_argument("--no-idle", action="store_true", help="storms only")
    part.add_argument("--no-storm", action="store_true", help="idle and start-up only")
    parser.add_argument(
        "--seed-dir",
        type=Path,
        help="keep each size's started games here and reuse them on later runs",
    )
    parser.add_argument("--logs", type=Path, help="keep the servers' logs in this folder")
    parser.add_argument(
        "--languages",
        choices=("en", "mix"),
        default="en",
        help="the players' languages: all English, or a third each English, Chinese, Thai",
    )
    parser.add_argument(
        "--dkim", action="store_true", help="every mail signed (a DKIM key made for the run)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check it runs")
    args = parser.parse_args()
    if args.dkim:
        global DKIM_KEY
        DKIM_KEY = key_file_for_the_run()
    if args.quick:
        args.games, args.players, args.db, args.servers = "3,6", 5, "sqlite,postgresql", "2"
        args.idle_seconds, args.timeout = 2.0, 300.0
    if args.languages == "mix":
        global LANGUAGES
        LANGUAGES = ("en", "zh-Hans", "th")
    args.sizes = [int(n) for n in args.games.split(",")]
    args.dbs = [d.strip() for d in args.db.split(",") if d.strip()]
    if unknown := set(args.dbs) - {"sqlite", "postgresql"}:
        parser.error(f"--db: not sqlite or postgresql: {', '.join(sorted(unknown))}")
    args.pg_counts = [int(n) for n in args.servers.split(",") if n.strip()]
    return args


class Stopped(Exception):
    """SIGTERM: stop like Ctrl-C, printing what was measured (a storm stopped part-way
    passes its row so far as the argument)."""


def stop(_signum: int, _frame: object) -> None:
    raise Stopped


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, stop)
    began = time.monotonic()
    spent: dict[str, float] = {"set-up": 0.0, "idle": 0.0, "storms": 0.0}
    sink = Sink()
    postgres: PostgresServer | None = None
    postmaster: int | None = None
    pg_note = ""
    if "postgresql" in args.dbs:
        try:
            postgres = PostgresServer().start()
            pg_note = f"PostgreSQL from {postgres.bin}"
            postmaster = postmaster_pid(postgres.data)
        except PostgresUnavailable as exc:
            pg_note = f"PostgreSQL not available ({exc}): its runs are left out"
    print(
        f"bench_hosting: Python {platform.python_version()}, {os.cpu_count()} cores, SQLite "
        f"{sqlite3.sqlite_version}, {pg_note or 'no PostgreSQL'}\n{code_under_test(__file__)}\n"
        f"{args.players} players a game ({', '.join(LANGUAGES)}), "
        f"{'one file per game (games_dir)' if GAMES_DIR else 'every game in one config file'}; "
        "SMTP sink (aiosmtpd) in its own process\nno intake (no orders: R17 plays every "
        "player); one SMTP connection per server; SQLite backups at\ntheir default\n"
        + ("every mail DKIM-signed (a 2048-bit key made for the run)\n" if DKIM_KEY else "")
        + f"at the start: {load()}",
        flush=True,
    )
    idles: list[Idle] = []
    storms: list[Storm] = []
    stream = Stream()
    folder = Path(tempfile.mkdtemp(prefix="snl-hosting-"))
    seeds = args.seed_dir or folder
    seeds.mkdir(parents=True, exist_ok=True)
    stopped = False

    def idle(database: str, config: Path, size_dir: Path, games: int, pid: int | None) -> Idle:
        say(f"{games} games: serve idle on {database} for {args.idle_seconds:.0f} s")
        t = time.monotonic()
        found = measure_idle(
            database, config, size_dir, games, args.idle_seconds, args.timeout, pid
        )
        spent["idle"] += time.monotonic() - t
        idles.append(found)
        stream.row("idle", idle_row(found, first_idle(idles, database)))
        return found

    def storm(
        database: str,
        url: str,
        servers: int,
        games: int,
        size_dir: Path,
        startup_guess: float,
        sync_guess: float,
        pid: int | None,
    ) -> None:
        say(f"{games} games: storm on {database}, {servers} server(s)")
        t = time.monotonic()
        try:
            found = run_storm(
                database,
                url,
                servers,
                games,
                args.players,
                size_dir,
                sink,
                startup_guess,
                sync_guess,
                args.timeout,
                pid,
            )
        except (KeyboardInterrupt, Stopped) as exc:
            if exc.args:
                storms.append(exc.args[0])
                stream.row("storm", storm_row(exc.args[0], args.timeout))
                stream.row("cpu", cpu_row(exc.args[0]))
            raise
        spent["storms"] += time.monotonic() - t
        storms.append(found)
        stream.row("storm", storm_row(found, args.timeout))
        stream.row("cpu", cpu_row(found))

    try:
        for games in args.sizes:
            size_dir = folder / f"g{games}"
            size_dir.mkdir()
            startup_guess = 10.0
            say(f"{games} games: the seed database")
            t = time.monotonic()
            seed, built = seed_for(seeds, games, args.players, sink.port)
            spent["set-up"] += time.monotonic() - t
            stream.row(
                "setup",
                f"{games} games: "
                + ("seed reused" if built is None else f"seed built in {built:.0f} s"),
            )
            at = datetime.now(UTC) + timedelta(hours=20)  # round 1's deadline while idle
            if "sqlite" in args.dbs:
                t = time.monotonic()
                url = f"sqlite:///{size_dir / 'snl.db'}"
                config = size_dir / "config.toml"
                copy_sqlite(seed, size_dir / "snl.db")
                sync_guess = move_deadline(config, url, games, args.players, sink.port, at)
                spent["set-up"] += time.monotonic() - t
                stream.row(
                    "setup", f"{games} games: SQLite copy ready in {time.monotonic() - t:.0f} s"
                )
                if not args.no_idle:
                    startup_guess = idle("sqlite", config, size_dir, games, None).startup_s or 10.0
                if not args.no_storm:
                    storm("sqlite", url, 1, games, size_dir, startup_guess, sync_guess, None)
            if postgres is not None and (args.pg_counts or not args.no_idle):
                t = time.monotonic()
                template = postgres.create_database()
                copy_to_postgres(seed, postgres.url(template))
                config = size_dir / "pg.toml"
                sync_guess = move_deadline(
                    config, postgres.url(template), games, args.players, sink.port, at
                )
                spent["set-up"] += time.monotonic() - t
                stream.row(
                    "setup",
                    f"{games} games: PostgreSQL copy ready in {time.monotonic() - t:.0f} s",
                )
                runs = [] if args.no_storm else args.pg_counts
                if not args.no_idle:
                    runs = [0, *runs]  # 0: the idle run
                for servers in runs:
                    name = f"s{servers}_{template}"
                    postgres._admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                    if servers == 0:
                        write_config(config, postgres.url(name), games, args.players, at, sink.port)
                        found = idle("postgresql", config, size_dir, games, postmaster)
                        startup_guess = found.startup_s or startup_guess
                    else:
                        storm(
                            "postgresql",
                            postgres.url(name),
                            servers,
                            games,
                            size_dir,
                            startup_guess,
                            sync_guess,
                            postmaster,
                        )
                    postgres.drop_database(name)
                postgres.drop_database(template)
            keep_logs(size_dir, args.logs)
            shutil.rmtree(size_dir, ignore_errors=True)
    except (KeyboardInterrupt, Stopped):
        stopped = True
        say("stopped: printing what was measured")
    finally:
        keep_logs(folder, args.logs)
        sink.close()
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)
    if stopped:
        print("\nSTOPPED part-way: the tables hold only what was measured before")
    if storms:
        print_storms(storms, args.timeout)
    if idles:
        print_idle(idles)
    print(
        f"\ntime spent: set-up {spent['set-up']:.0f} s, idle runs {spent['idle']:.0f} s, "
        f"storms with their bare sends {spent['storms']:.0f} s, "
        f"all {time.monotonic() - began:.0f} s\nat the end: {load()}"
    )
    if stopped:
        sys.exit(130)


if __name__ == "__main__":
    main()
