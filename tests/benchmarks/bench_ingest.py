"""Benchmark: order emails through the intake, end to end, through Dovecot (IMAP) and
through LMTP, on SQLite and on PostgreSQL.

IMAP: the messages are APPENDed to a private Dovecot; the poller fetches them, stores each
fetch in one transaction, MOVEs it, and the readers parse (sandbox), authenticate, store the
orders and enqueue a reply for each, in batches. LMTP: several clients deliver them over
LMTP at once (each message answered 250 once stored), until every one is processed (and how
long each waited from the end of its DATA to its 250 meanwhile); then, apart, the time from
the end of DATA to the 250 at a steady 50 messages/s (goal: p95 at or under 50 ms). The
LMTP clients are other processes, as an MTA is, and send MAIL, RCPT and DATA together when
told PIPELINING, as Postfix does. The baseline, measured in the same run on the same
bytes, is parsing alone (the best of three passes just before the intake's run and three
just after it): ``email.message_from_bytes(raw, policy=email.policy.default)``.
(Until the thirtieth session only the passes before counted: on this shared machine the
bare parse of the same bytes ranged 3,201-3,995 a second from one run to the next, minutes
apart, while the intake's rate stayed within 737-778, so the ratio moved with the
baseline; the best of both sides is the stricter baseline, and less at the mercy of one
slow moment.) Goal: end-to-end ingest at least half the rate of the bare parse (at the
least a quarter). Each run prints too the server process's CPU a message (its sandbox's
workers, Dovecot and the LMTP clients apart), steadier than the rate on a machine shared
with others. The cycle collector is set as serve sets it once started
(``settle_collector``: what start-up made frozen, the young collected less often), for the
bare parse too; until the twenty-fourth session the bench left Python's own, which serve
does not run with (its passes took 26-88 us a message; 11 after).

Run: .venv/bin/python tests/benchmarks/bench_ingest.py [--messages 5000] [--players 500]
     [--db sqlite,postgresql] [--via imap,lmtp] [--rate 50 --seconds 10] [--sent 40]
     [--dkim] [--sessions 8] [--games 1]

``--sent``: each player was sent that many of our messages before (a long game's steady
state: each message is compared with its sender's latest forty). ``--dkim``: every reply
is signed, as a GM with a DKIM key has it (a key made for the run). ``--sessions``: the
LMTP connections delivering at once (8; Postfix opens up to 20 to one destination,
``default_destination_concurrency_limit``, as its queue for it grows). ``--games``: the
players are spread over that many games (player p plays game p % games), as on a server
hosting many games whose players' orders come in together before a shared deadline: each
batch then holds mail for many games (until the twenty-ninth session each game a batch
brought cost about 2.5 ms of the server's CPU: 100 games, 2.8 ms a message against 0.34).
"""

from __future__ import annotations

import argparse
import email
import email.policy
import logging
import multiprocessing
import os
import platform
import re
import smtplib
import socket
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from checkout import code_under_test
from dkimkeys import key_file_for_the_run
from dovecotserver import DovecotServer
from imapclient import IMAPClient
from pgserver import PostgresServer
from proccpu import children_cpu, cpu_seconds, machine_busy, postmaster_pid
from sqlalchemy import func, insert, select

import snl_pbem.runners.mailboxes as mailboxes
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import load_config
from snl_pbem.mail import sandbox
from snl_pbem.mail.imap import ImapPoller, MailboxConfig
from snl_pbem.mail.parse import parse_message
from snl_pbem.runners.applier import Applier
from snl_pbem.runners.mailboxes import DatabaseHooks, Intake, Readers, lmtp_receiver
from snl_pbem.runners.server import settle_collector
from snl_pbem.store import Database, OrderRecord, OutboxMessage
from snl_pbem.store.migrate import upgrade

T0 = datetime.now(UTC) - timedelta(hours=1)  # round 1 opens before the mail arrives


class Stages:
    """Where the server's CPU goes, stage by stage: each call of the intake's three stages
    (``store_many``: a fetch or a group committed; ``read_batch``: a batch read in the
    sandbox; ``apply_batch``: a batch's transaction) timed in its own thread (CPU) and on the
    clock (wall), by wrapping the names ``snl_pbem.runners.mailboxes`` calls them by. What
    the process spent besides (the IMAP client, the LMTP sessions' loop,
    a message's envelope read before its store, the threads' hand-offs) is the rest. Two
    clock reads a call: a few microseconds a batch."""

    NAMES = ("store_many", "read_batch", "apply_batch")

    def __init__(self) -> None:
        self.applier: int | None = None  # its process: its CPU is apply's (``watch``)
        self._applier_at = self._applier_last = 0.0
        self.cpu = dict.fromkeys(self.NAMES, 0.0)
        self.wall = dict.fromkeys(self.NAMES, 0.0)
        self.calls = dict.fromkeys(self.NAMES, 0)
        self._lock = threading.Lock()
        self._inside = threading.local()  # a stage is being timed in this thread
        for name in self.NAMES:
            setattr(mailboxes, name, self._timed(name, getattr(mailboxes, name)))

    def _timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._inside, "stage", False):  # counted by the stage around it
                return function(*args, **kwargs)
            self._inside.stage = True
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                self._inside.stage = False
                with self._lock:
                    self.cpu[name] += cpu
                    self.wall[name] += wall
                    self.calls[name] += 1

        return timed

    def watch(self, applier: Applier | None) -> None:
        """The readers' batches are written by ``applier`` (PostgreSQL, as serve writes
        them): apply's calls and wall are its round trips, its CPU the process's."""
        self.applier = applier.pid if applier is not None else None
        if applier is not None:
            applier.apply = self._timed("apply_batch", applier.apply)  # type: ignore[method-assign]

    def reset(self) -> None:
        with self._lock:
            for name in self.NAMES:
                self.cpu[name] = self.wall[name] = 0.0
                self.calls[name] = 0
            self._applier_at = cpu_seconds(self.applier) if self.applier else 0.0

    def server_cpu(self) -> float:
        """The server's CPU so far: this process's, and its applier's (kept: the run's
        last reading is its end, ``line``'s, taken before the process is stopped)."""
        self._applier_last = cpu_seconds(self.applier) if self.applier else 0.0
        return time.process_time() + self._applier_last

    def line(self, n: int, cpu: float) -> str:
        """The server's CPU a message by stage, for ``n`` messages and ``cpu`` seconds."""
        if self.applier:  # (its round trips' own CPU is this process's: a few us a batch)
            self.cpu["apply_batch"] = self._applier_last - self._applier_at
        ms = {name: 1000 * self.cpu[name] / n for name in self.NAMES}
        each = {name: n / max(self.calls[name], 1) for name in self.NAMES}
        return (
            f"stages, ms of CPU a message: store {ms['store_many']:.2f} (groups of "
            f"{each['store_many']:.1f}; its wall {1000 * self.wall['store_many'] / n:.2f}), "
            f"read {ms['read_batch']:.2f}, apply{' (its process)' * bool(self.applier)} "
            f"{ms['apply_batch']:.2f} (batches of {each['apply_batch']:.1f}; its wall "
            f"{1000 * self.wall['apply_batch'] / n:.2f}), the rest "
            f"{1000 * cpu / n - sum(ms.values()):.2f}"
        )


def server_cpu() -> float:
    """The server's CPU so far (its applier's too: ``Stages.server_cpu``)."""
    return STAGES.server_cpu() if STAGES is not None else time.process_time()


STAGES: Stages | None = None
POSTMASTER: int | None = None
"""PostgreSQL's postmaster, when the run has one (its backends' CPU: ``Cores``)."""
"""The stages timed in each run (``Stages``; made by ``main``, so that importing this module
to find ``deliver_all``, as the MTA's processes do, wraps nothing)."""


class Cores:
    """Where the machine's two cores went over a run's clock, in ms a message: the whole
    machine's busy time (/proc/stat) and, of it, this process (the server), its other
    children (the sandbox's workers), the MTA's processes, PostgreSQL's backends, and the
    rest (Dovecot, the kernel's own work, and whatever else runs on the machine). The
    machine's idle share says whether the cores were the limit."""

    def __init__(self, mta: MTA | None = None, postgres: int | None = None) -> None:
        self.mta = {p.pid for p in mta.pool._pool} if mta is not None else set()  # type: ignore[attr-defined]
        self.postgres = postgres
        self.applier = STAGES.applier if STAGES is not None else None  # (the server's own)
        self.start = self._now()

    def _now(self) -> tuple[float, float, float, dict[int, float], dict[int, float]]:
        busy, total = machine_busy()
        server, others = time.process_time(), children_cpu(os.getpid())
        server += others.pop(self.applier, 0.0) if self.applier else 0.0
        return busy, total, server, others, children_cpu(self.postgres)

    def line(self, n: int) -> str:
        """The ms a message since this was made, for ``n`` messages."""
        end = self._now()
        busy, total, server = (b - a for a, b in zip(self.start[:3], end[:3], strict=True))
        spent = {pid: cpu - self.start[3].get(pid, 0.0) for pid, cpu in end[3].items()}
        mta = sum(cpu for pid, cpu in spent.items() if pid in self.mta)
        sandbox = sum(cpu for pid, cpu in spent.items() if pid not in self.mta)
        pg = sum(cpu - self.start[4].get(pid, 0.0) for pid, cpu in end[4].items())
        ms = 1000 / n
        rest = busy - server - sandbox - mta - pg
        return (
            f"cores, ms of CPU a message: machine {busy * ms:.2f} (idle {1 - busy / total:.0%}"
            f" of {total:.1f} s), server {server * ms:.2f}, sandbox {sandbox * ms:.2f}, MTA"
            f" {mta * ms:.2f}, PostgreSQL {pg * ms:.2f}, the rest {rest * ms:.2f}"
        )


def make_config(folder: Path, players: int, url: str | None = None, lmtp_port: int = 0) -> Path:
    lines = [
        'timezone = "UTC"',
        "[database]",
        f'url = "{url or "sqlite:///" + str(folder / "bench.db")}"',
        "backups = 0",
        "[mail]",
        'address = "snl@example.org"',
        'referee = "ref@example.org"',
        "replies_per_hour = 1000",
        *([f'[mail.dkim]\nselector = "snl"\nprivate_key_file = "{DKIM_KEY}"'] if DKIM_KEY else []),
        *([f"[mail.lmtp]\nport = {lmtp_port}"] if lmtp_port else []),
    ]
    for g in range(GAMES):
        lines += [
            "[[games]]",
            f'id = "{game_name(g)}"',
            'board = { snakes = { "47" = 26 }, ladders = { "4" = 14 } }',
            'first_deadline = "2030-01-04T18:00"',
            'round_length = "3d"',
            "players = [",
            *(
                f'  {{ name = "p{i}", email = "p{i}@example.org", key = "key-p{i}-0123" }},'
                for i in range(g, players, GAMES)
            ),
            "]",
        ]
    path = folder / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


GAMES = 1
"""Games the players are spread over (``--games``): player p plays game p % GAMES."""


def game_name(g: int) -> str:
    return "bench" if GAMES == 1 else f"bench{g}"


def order_mail(i: int, players: int) -> bytes:
    p = i % players
    name = game_name(p % GAMES)
    return (
        f"Return-Path: <p{p}@example.org>\r\nFrom: Player {p} <p{p}@example.org>\r\n"
        f"To: snl@example.org\r\nSubject: [{name}] orders\r\n"
        f"Date: Mon, 30 Nov 2026 10:00:00 +0000\r\nMessage-ID: <bench-{i}@example.org>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"Hello referee,\r\n\r\nGAME {name}\r\nKEY key-p{p}-0123\r\nDICE {1 + i % 6}\r\n"
        f"TRAPDOOR {10 + i % 80}\r\n\r\nThanks!\r\n-- \r\nPlayer {p}\r\n"
    ).encode()


CLIENTS = Path(__file__).parent.parent / "data" / "mail" / "clients"
"""The mail the clients write (``tests/data/mail/clients``: Gmail, Outlook, Apple Mail,
Thunderbird, mutt, Yahoo and the rest, each a reply or forward as that client writes it),
for ``--mail clients``."""


def client_mails(players: int, count: int) -> tuple[list[bytes], int]:
    """``count`` orders as the players' clients write them (``--mail clients``): message
    ``i`` is player ``i % players``'s, each player's in turn in the shape of the next
    client file, with that file's sender, key, game and Message-ID made the player's and
    the bench's; and how many files were used. A file whose orders do not read as the
    player's then is not used (its orders only in an attachment, which is never read:
    no DICE, or not even a KEY, is read), nor one with a line longer than SMTP allows
    (998 bytes: refused over LMTP, and an MTA would not send it); every other one is."""
    shapes = []
    for path in sorted(CLIENTS.glob("*.eml")):
        raw = path.read_bytes()
        if _reads_as_player(_as_player(raw, 0, game_name(0), 0), 0):  # (read once a file)
            shapes.append(raw)
    mails = []
    for i in range(count):
        p = i % players
        mail = _as_player(shapes[(p + i // players) % len(shapes)], p, game_name(p % GAMES), i)
        mails.append(mail)
    return mails, len(shapes)


def _as_player(raw: bytes, p: int, name: str, i: int) -> bytes:
    """A client file's message as player ``p``'s orders for game ``name``, its sender, key,
    game and Message-ID replaced (b"" for a file with a line too long for SMTP, or no
    sender of ours)."""
    text = raw.decode("latin-1")  # (byte for byte: only ASCII is replaced)
    sender = re.search(r"^From:.*?(\w+)@example\.org", text, re.M | re.I)
    if sender is None or any(len(line) > 998 for line in text.splitlines()):
        return b""
    who = sender.group(1).lower()
    text = re.sub(rf"\b{who}@example\.org", f"p{p}@example.org", text, flags=re.I)
    text = re.sub(rf"\b{who}-key-123\b", f"key-p{p}-0123", text, flags=re.I)
    text = re.sub(r"\bg1\b", name, text)
    text = re.sub(
        r"^Message-ID:.*$", f"Message-ID: <bench-{i}@example.org>", text, count=1, flags=re.M | re.I
    )
    if not re.match(r"Return-Path:", text, re.I):  # (the envelope's sender, as delivered)
        text = f"Return-Path: <p{p}@example.org>\r\n{text}"
    return text.encode("latin-1")


def _reads_as_player(mail: bytes, p: int) -> bool:
    """Whether ``mail`` (``_as_player``'s) reads as player ``p``'s orders: their sender,
    their key, and dice."""
    if not mail:
        return False
    read = parse_message(mail, "snl@example.org")
    orders = read.commands
    keys = [key.lower() for key in orders.order_keys] if orders else []
    mine = read.sender == f"p{p}@example.org" and f"key-p{p}-0123" in keys
    return mine and orders is not None and bool(orders.dice)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def game(players: int, url: str | None, lmtp_port: int = 0) -> Iterator[tuple[Database, object]]:
    """A started game of ``players`` on a fresh database (SQLite file, or ``url``)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(make_config(Path(tmp), players, url, lmtp_port))
        db = Database(config.database_url)
        upgrade(db)
        sync_games(db, config, T0)
        for g in range(GAMES):
            start_game(db, config, game_name(g), T0)
        given_before(db, SENT_BEFORE)
        try:
            yield db, config
        finally:
            db.dispose()


DKIM_KEY: Path | None = None
"""A DKIM key every reply is signed with (``--dkim``: a 2048-bit key made for the run)."""

SENT_BEFORE = 0
"""Mail of ours each player was sent before the run (``--sent``): what every order they
write is compared with (the intake reads the latest SENT_COMPARED)."""


def given_before(db: Database, sent: int) -> None:
    """Give each player ``sent`` more of our mail, sent, as a long game has (its reports
    and answers): here copies of their welcome, its bytes (not scrubbed) and fingerprint,
    for the size and the lines of our mail; none of them holds a key."""
    if not sent:
        return
    with db.transaction() as s:
        welcomes = s.execute(
            select(OutboxMessage.recipient, OutboxMessage.message, OutboxMessage.fingerprint).where(
                OutboxMessage.kind == "welcome"
            )
        ).all()
        rows = [
            {
                "kind": "report",
                "recipient": recipient,
                "message_id": f"<before.{k}.{i}@bench>",
                "message": message,
                "fingerprint": kept,
                "status": "sent",
                "attempts": 0,
                "next_attempt_at": T0,
                "created_at": T0,
                "secret": False,
            }
            for k in range(sent)
            for i, (recipient, message, kept) in enumerate(welcomes)
        ]
        s.execute(insert(OutboxMessage), rows)


def counts(db: Database) -> tuple[int, int]:
    with db.transaction() as s:
        orders = s.scalar(select(func.count()).select_from(OrderRecord)) or 0
        replies = s.scalar(
            select(func.count()).select_from(OutboxMessage).where(OutboxMessage.kind == "ack")
        )
    return orders, replies or 0


def via_imap(
    dovecot: DovecotServer, raws: list[bytes], players: int, url: str | None
) -> tuple[float, float, str]:
    """Seconds from the poll's start until every message is processed and answered, the
    server process's CPU seconds meanwhile (its sandbox's workers apart), and where the
    cores went (``Cores``)."""
    with game(players, url) as (db, config):
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
        readers = Readers()
        applier = with_applier(readers, url)
        hooks = DatabaseHooks(db, config, clock=lambda: datetime.now(UTC), readers=readers)
        poller = ImapPoller(mailbox, hooks)
        settle_collector()  # as serve does once started
        if STAGES is not None:
            STAGES.reset()
        cores = Cores(postgres=POSTMASTER if url else None)
        started, cpu = time.perf_counter(), server_cpu()
        stored = poller.poll_once()
        wait_processed(db, readers, len(raws))
        seconds, cpu = time.perf_counter() - started, server_cpu() - cpu
        where = cores.line(len(raws))
        poller.close()
        if applier is not None:
            applier.stop()
        assert stored == len(raws) and counts(db) == (len(raws), len(raws)), counts(db)
    return seconds, cpu, where


def with_applier(readers: Readers, url: str | None) -> Applier | None:
    """On PostgreSQL the readers' batches are written in a process of their own, as serve
    writes them (``snl_pbem.runners.applier``); its CPU counts as the server's."""
    applier = Applier(logging.WARNING) if url is not None else None
    if applier is not None:
        applier.start()
        assert applier.wait_ready(300)  # (its interpreter's start-up is not the intake's)
        readers.applier = applier
    if STAGES is not None:
        STAGES.watch(applier)
    return applier


def wait_processed(db: Database, readers: Readers, n: int) -> None:
    """Until every message is answered: the readers idle first (no lock taken), then
    counted (a transaction: on SQLite it takes the write lock, so not often)."""
    while True:
        while not readers.idle():
            time.sleep(0.005)
        if counts(db)[1] >= n:
            return
        time.sleep(0.05)


def via_lmtp(
    raws: list[bytes], players: int, url: str | None, clients: int = 8
) -> tuple[float, float, str, list[float]]:
    """Seconds from the first delivery until every message is processed and answered,
    ``clients`` LMTP connections delivering at once (as an MTA does), the server
    process's CPU seconds meanwhile (its sandbox's workers and the clients apart), where
    the cores went (``Cores``), and each message's wait from the end of its DATA to its 250,
    sorted: under a flood the sessions deliver one message each at a time, so the rate is
    at most the sessions over the mean of these and what the MTA does between them."""
    port = free_port()
    with game(players, url, port) as (db, config):
        readers = Readers()
        applier = with_applier(readers, url)
        receiver = lmtp_receiver(db, config, intake=Intake(db, config, readers=readers))
        assert receiver is not None
        receiver.start()
        try:
            shares = [raws[i::clients] for i in range(clients)]
            with MTA(clients) as mta:
                settle_collector()  # as serve does once started
                if STAGES is not None:
                    STAGES.reset()
                cores = Cores(mta, postgres=POSTMASTER if url else None)
                started, cpu = time.perf_counter(), server_cpu()
                waits = sorted(mta.deliver(port, shares))
                wait_processed(db, readers, len(raws))
                seconds, cpu = time.perf_counter() - started, server_cpu() - cpu
                where = cores.line(len(raws))
                # (the clock stops before the MTA's processes end: their ending is not the
                # intake's time, and it took 1-3.5 s of the clock at 8 to 20 sessions)
        finally:
            receiver.stop()
            if applier is not None:
                applier.stop()
        assert counts(db) == (len(raws), len(raws)), counts(db)
    return seconds, cpu, where, waits


class MTA:
    """The delivering side, as an MTA is: other processes (their CPU is not the server's),
    one LMTP connection each, started before the clock starts."""

    def __init__(self, clients: int) -> None:
        # every process up before the clock, with this module imported (``deliver_all``
        # is found by importing it: 8 processes importing the server's code on 2 cores
        # took seconds of the clock's time, the MTA's start-up counted as the intake's).
        # Each waits for the others as it starts, and this one for all of them: a task
        # each could be taken by the first process up, the others still importing.
        context = multiprocessing.get_context("spawn")
        everyone = context.Barrier(clients + 1)
        self.pool = context.Pool(clients, initializer=_up, initargs=(everyone,))
        everyone.wait(timeout=300)

    def __enter__(self) -> MTA:
        return self

    def __exit__(self, *_: object) -> None:
        self.pool.close()
        self.pool.join()

    def deliver(self, port: int, shares: list[list[bytes]], pace: float = 0.0) -> list[float]:
        """Each share over its own connection at once; every wait (end of DATA to 250)."""
        args = [(port, share, pace) for share in shares]
        return [w for waits in self.pool.starmap(deliver_all, args) for w in waits]


def _up(everyone: Any) -> None:
    """An MTA process is up, with this module imported (``MTA``)."""
    everyone.wait(timeout=300)


def deliver_all(port: int, raws: list[bytes], pace: float = 0.0) -> list[float]:
    """Deliver over one LMTP connection; the seconds from the end of DATA to each 250.
    As Postfix's LMTP client does, MAIL, RCPT and DATA go together when the server's LHLO
    reply names PIPELINING (two round trips a message), one by one otherwise. Nothing to
    deliver: nothing done."""
    waits: list[float] = []
    if not raws:
        return waits
    client = smtplib.LMTP("127.0.0.1", port)
    try:
        client.ehlo("bench.example.org")
        together = client.has_extn("pipelining")
        start = time.perf_counter()
        for i, raw in enumerate(raws):
            if pace:
                time.sleep(max(0.0, start + i * pace - time.perf_counter()))
            sender = raw.split(b"Return-Path: <", 1)[1].split(b">", 1)[0]
            if together:
                client.send(b"MAIL FROM:<%s>\r\nRCPT TO:<snl@example.org>\r\nDATA\r\n" % sender)
                codes = [client.getreply()[0] for _ in range(3)]
            else:
                codes = [
                    client.mail(sender.decode())[0],
                    client.rcpt("snl@example.org")[0],
                    client.docmd("DATA")[0],
                ]
            assert codes == [250, 250, 354], codes
            # the data as smtplib's data() sends it (CRLF line ends, dot-stuffed), timed from
            # its end to the 250, whichever way the commands went
            data = re.sub(rb"(?m)^\.", b"..", re.sub(rb"\r\n|\r|\n", b"\r\n", raw))
            client.send(data + b"\r\n" * (not data.endswith(b"\r\n")) + b".\r\n")
            sent = time.perf_counter()
            code = client.getreply()[0]
            waits.append(time.perf_counter() - sent)
            assert code == 250, code
    finally:
        client.quit()
    return waits


def flood_line(waits: list[float]) -> str:
    """The line saying how long the flood's messages waited for their 250 (``waits``
    sorted, in seconds)."""

    def at(share: float) -> float:
        return 1000 * waits[max(0, int(len(waits) * share) - 1)]

    return (
        f"the flood's waits, end of DATA to 250: median {1000 * statistics.median(waits):.1f}"
        f" ms, p90 {at(0.9):.1f}, p99 {at(0.99):.1f}, mean {1000 * statistics.fmean(waits):.1f}"
    )


def lmtp_latency(
    raws: list[bytes], players: int, url: str | None, rate: float, seconds: float
) -> list[float]:
    """End of DATA to 250 at ``rate`` messages/s for ``seconds`` (4 connections)."""
    port = free_port()
    n = int(rate * seconds)
    with game(players, url, port) as (db, config):
        receiver = lmtp_receiver(db, config, intake=Intake(db, config, readers=Readers()))
        assert receiver is not None
        receiver.start()
        try:
            with MTA(4) as mta:
                settle_collector()  # as serve does once started
                waits = mta.deliver(port, [raws[k:n:4] for k in range(4)], pace=4 / rate)
        finally:
            receiver.stop()
    return sorted(waits)


def bare_parse(raws: list[bytes], passes: int = 3) -> float:
    """Seconds the bare parse of ``raws`` takes: the best of ``passes`` (one pass alone
    ranged over a third between runs on this shared machine, and the ratio with it)."""
    best = float("inf")
    for _ in range(passes):
        started = time.perf_counter()
        for raw in raws:
            email.message_from_bytes(raw, policy=email.policy.default)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--players", type=int, default=500)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--via", default="imap,lmtp")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--sent", type=int, default=0, help="our mail each player had before (a long game: 40)"
    )
    parser.add_argument("--dkim", action="store_true", help="every reply signed (DKIM)")
    parser.add_argument(
        "--sessions", type=int, default=8, help="LMTP connections at once (Postfix: up to 20)"
    )
    parser.add_argument(
        "--games", type=int, default=1, help="games the players are spread over (hosting)"
    )
    parser.add_argument(
        "--mail",
        default="plain",
        choices=("plain", "clients"),
        help="the orders: a few plain lines (plain), or as the clients write them (clients)",
    )
    args = parser.parse_args()
    if args.sessions < 1:
        parser.error("--sessions: at least 1")
    if not 1 <= args.games <= args.players:
        parser.error("--games: at least 1, at most --players")
    global SENT_BEFORE, DKIM_KEY, STAGES, POSTMASTER, GAMES
    SENT_BEFORE = args.sent
    GAMES = args.games
    STAGES = stages = Stages()
    if args.dkim:
        DKIM_KEY = key_file_for_the_run()
    shapes = 0
    if args.mail == "clients":
        raws, shapes = client_mails(args.players, args.messages)
    else:
        raws = [order_mail(i, args.players) for i in range(args.messages)]
    n = args.messages
    sandbox.default_sandbox().warm()  # as serve does, before its threads (forked: quick)
    settle_collector()  # serve's cycle collector, the bare parse's too (and again once set up)
    print(
        f"bench_ingest: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{n} messages from {args.players} players"
        + (f" of {args.games} games" if args.games > 1 else "")
        + f", each sent {args.sent} of our mail before"
        + (", every reply signed (DKIM, 2048 bits)" if DKIM_KEY else "")
        + (f"; {args.sessions} LMTP sessions at once" if "lmtp" in args.via else "")
        + (
            f"; the orders as {shapes} client files write them,"
            f" {sum(map(len, raws)) // n} bytes on average"
            if args.mail == "clients"
            else ""
        )
        + f"\n{code_under_test(__file__)}"
    )
    dovecot = DovecotServer().start() if "imap" in args.via else None
    postgres = PostgresServer().start() if "postgresql" in args.db else None
    POSTMASTER = postmaster_pid(postgres.data) if postgres is not None else None
    try:
        for kind in args.db.split(","):
            for via in args.via.split(","):
                url = postgres.url(postgres.create_database()) if kind == "postgresql" else None
                before = bare_parse(raws)  # the same-run baseline, just before and after
                if via == "imap":
                    assert dovecot is not None
                    seconds, cpu, cores = via_imap(dovecot, raws, args.players, url)
                else:
                    seconds, cpu, cores, waits = via_lmtp(raws, args.players, url, args.sessions)
                    cores += "\n    " + flood_line(waits)
                after = bare_parse(raws)
                parse_s = min(before, after)
                ratio = (n / seconds) / (n / parse_s)
                print(
                    f"  {kind:10s} {via:4s}: {seconds:7.2f} s = {n / seconds:6.0f} orders/s;"
                    f" bare parse {n / parse_s:6.0f}/s (before {n / before:.0f}, after"
                    f" {n / after:.0f}); ratio {ratio:.3f} (goal >= 0.5);"
                    f" server CPU {1000 * cpu / n:.2f} ms a message (bare parse"
                    f" {1000 * parse_s / n:.2f})\n    {stages.line(n, cpu)}\n    {cores}"
                )
            if "lmtp" in args.via:
                url = postgres.url(postgres.create_database()) if kind == "postgresql" else None
                waits = lmtp_latency(raws, args.players, url, args.rate, args.seconds)
                p50 = statistics.median(waits) * 1000
                p95 = waits[int(len(waits) * 0.95) - 1] * 1000
                print(
                    f"  {kind:10s} LMTP at {args.rate:g}/s, {len(waits)} messages: end of DATA "
                    f"to 250 median {p50:.1f} ms, p95 {p95:.1f} ms (goal p95 <= 50 ms)"
                )
    finally:
        if dovecot is not None:
            dovecot.remove()
        if postgres is not None:
            postgres.stop()


if __name__ == "__main__":
    main()
