"""A deadline storm shared by three `serve` processes on one PostgreSQL, with SIGKILLs.

GAMES games of PLAYERS players, every game's deadlines at the same instants (ROUNDS of
them), no orders sent: each round closes on the no-orders defaults (R17, R18). While the
rounds close, one server at a time is killed (SIGKILL) at random points of the storm and
started again, and a few are killed inside a close, before its commit (a crash point).
Checked afterwards:
- each round closed exactly once (the rounds, their tallies, the audit trail, the logs,
  the mail enqueued for it);
- each outbox message delivered at the sink at least once, and at most once more per kill;
- no report lost: every player of every game got every round's report.

Bounded by progress, not by speed: it fails only if a round stays open STALL_SECONDS past
its deadline, or the outbox stops draining for that long.
"""

from __future__ import annotations

import email
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from email.header import decode_header, make_header
from pathlib import Path
from typing import IO

import pytest
from sqlalchemy import func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.config import load_config
from snl_pbem.store import AuditEntry, Database, Game, OutboxMessage, Player, Round, RoundTally
from snl_pbem.store.migrate import upgrade

SNL = str(Path(sys.executable).with_name("snl-pbem"))
GAMES = 200  # as many as the issue names; the smallest storm that is a storm at all
PLAYERS = 3
SERVERS = 3
ROUNDS = 3
"""Deadlines shared by every game: round ROUNDS + 1 is due a day later (out of the test)."""
ROUND_SECONDS = 20
KILLS = 4
"""SIGKILLs from outside, each at a random point of the storm (a number of rounds closed)."""
MID_CLOSE_CHANCE = 0.01
MID_CLOSE_KILLS = 2
"""Kills inside a close, its writes issued and not committed (the crash point
close.before-commit, armed with MID_CLOSE_CHANCE in the servers started before it has fired
this often): another server must close the round."""
CONNECTIONS = 2
STALL_SECONDS = 300
"""A hang detector: a round open this long past its deadline, or an outbox not draining
for this long, fails the test (a storm here takes seconds to a minute)."""

CLOSED_LOG = re.compile(r"snl_pbem\.rounds: (\S+): round (\d+) closed by ")
REPORT_SUBJECT = re.compile(r"^\[(\S+)\] Round (\d+) report")


def game_names() -> list[str]:
    return [f"s{g:03d}" for g in range(GAMES)]


def write_config(path: Path, url: str, sink, first: datetime) -> None:
    def at(when: datetime) -> str:
        return when.isoformat(timespec="seconds")

    later = [at(first + timedelta(seconds=ROUND_SECONDS * k)) for k in range(1, ROUNDS)]
    listed = ", ".join(f'"{d}"' for d in later)
    games = "".join(
        f"""
[[games]]
id = "{name}"
board = {{ rows = 10, columns = 10, ladders = {{ "3" = 9 }}, snakes = {{ "14" = 2 }} }}
first_deadline = "{at(first)}"
deadlines = [{listed}]
round_length = "1d"
players = [
"""
        + "".join(
            f'  {{ name = "p{i}", email = "p{i}.{name}@example.org" }},\n' for i in range(PLAYERS)
        )
        + "]\n"
        for name in game_names()
    )
    path.write_text(f"""
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[mail.smtp]
host = "{sink.host}"
port = {sink.port}
tls = "none"
connections = {CONNECTIONS}
{games}""")


class Servers:
    """SERVERS `serve` processes, each logging (appending, across restarts) to its file."""

    def __init__(self, config: Path, folder: Path) -> None:
        self.config = config
        self.logs = [folder / f"serve{i}.log" for i in range(SERVERS)]
        self.files: list[IO[bytes]] = [log.open("ab") for log in self.logs]
        self.crash_log = folder / "crashes.log"
        self.launches = 0
        self.procs = [self._launch(i) for i in range(SERVERS)]

    def _launch(self, index: int) -> subprocess.Popen[bytes]:
        self.launches += 1
        env = dict(os.environ, SNL_PBEM_CRASH_SEED=f"23.{self.launches}")
        if len(self.mid_close()) < MID_CLOSE_KILLS:
            env["SNL_PBEM_CRASH_POINTS"] = f"close.before-commit={MID_CLOSE_CHANCE}"
            env["SNL_PBEM_CRASH_LOG"] = str(self.crash_log)
        return subprocess.Popen(
            [SNL, "serve", "--config", str(self.config), "--log-level", "info"],
            stdout=self.files[index],
            stderr=subprocess.STDOUT,
            env=env,
        )

    def mid_close(self) -> list[str]:
        """The kills at the crash point so far."""
        return self.crash_log.read_text().split() if self.crash_log.exists() else []

    def kill_and_restart(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait()  # reaped: its outbox claims are seen as a dead process's
        self.procs[index] = self._launch(index)

    def restart_dead(self) -> None:
        """Start again a server killed at the crash point."""
        for index, proc in enumerate(self.procs):
            if proc.poll() is not None:  # reaped by poll
                assert proc.returncode == -signal.SIGKILL, f"serve{index} exited {proc.returncode}"
                self.procs[index] = self._launch(index)

    def stop(self) -> list[int]:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        return [proc.wait(STALL_SECONDS) for proc in self.procs]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for file in self.files:
            file.close()

    def text(self) -> str:
        return "".join(log.read_text(errors="replace") for log in self.logs)


def progress(db: Database) -> tuple[int, datetime | None]:
    """Rounds of the storm closed so far, and the oldest deadline still open among them."""
    with db.transaction() as s:
        closed = s.scalar(
            select(func.count())
            .select_from(Round)
            .where(Round.state == "closed", Round.number <= ROUNDS)
        )
        oldest = s.scalar(
            select(func.min(Round.deadline)).where(Round.state == "open", Round.number <= ROUNDS)
        )
    return closed or 0, oldest


@pytest.mark.slow
def test_storm_across_servers_with_kills(tmp_path: Path, postgres, smtp_sink) -> None:
    url = postgres.url(postgres.create_database())
    config = tmp_path / "config.toml"
    db = Database(url)
    rng = random.Random(23)
    # The games are started with their first deadline far off; the storm's deadlines are
    # then set in the config the servers read (each moves the open round's deadline when it
    # syncs, as a GM's edit would). Its margin is measured here: several times this setup.
    write_config(config, url, smtp_sink, datetime.now(UTC) + timedelta(days=1))
    began = time.monotonic()
    upgrade(db)
    loaded = load_config(config)
    sync_games(db, loaded, datetime.now(UTC))
    for name in game_names():
        start_game(db, loaded, name, datetime.now(UTC))
    setup = time.monotonic() - began
    first_in = max(10.0, 1.5 * setup)
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=first_in)
    write_config(config, url, smtp_sink, first)
    print(f"setup of {GAMES} games: {setup:.1f} s")

    total = GAMES * ROUNDS
    kill_at = sorted(rng.sample(range(1, total), KILLS))  # rounds closed when each kill comes
    kills: list[tuple[int, int]] = []  # (server, rounds closed then)
    servers = Servers(config, tmp_path)
    launched, ready = time.monotonic(), None
    try:
        while True:
            if ready is None and servers.text().count("serving ") >= SERVERS:
                ready = time.monotonic() - launched
            closed, oldest = progress(db)
            if closed == total:
                break
            if oldest is not None:
                late = datetime.now(UTC) - oldest
                assert late < timedelta(seconds=STALL_SECONDS), f"a round open since {oldest}"
            servers.restart_dead()
            while kill_at and closed >= kill_at[0]:
                kill_at.pop(0)
                index = rng.randrange(SERVERS)
                servers.kill_and_restart(index)
                kills.append((index, closed))
            time.sleep(0.1)
        storm_over = datetime.now(UTC)
        last, since = None, time.monotonic()
        while True:  # until everything is sent; fails only if nothing is for STALL_SECONDS
            with db.transaction() as s:
                waiting = s.scalar(
                    select(func.count())
                    .select_from(OutboxMessage)
                    .where(OutboxMessage.status != "sent")
                )
            if waiting == 0:
                break
            servers.restart_dead()
            if waiting != last:
                last, since = waiting, time.monotonic()
            assert time.monotonic() - since < STALL_SECONDS, f"{waiting} messages stuck"
            time.sleep(0.2)
        drained = datetime.now(UTC)
        assert servers.stop() == [0] * SERVERS
    finally:
        servers.close()
    print(
        f"all serving {ready or 0:.1f} s after launch (first deadline {first_in:.0f} s after); "
        f"{total} rounds closed by {(storm_over - first).total_seconds():.1f} s after the first "
        f"deadline, all mail sent by {(drained - first).total_seconds():.1f} s; kills (server, "
        f"rounds closed then): {kills}, and {len(servers.mid_close())} in a close"
    )
    assert len(kills) == KILLS
    killed = KILLS + len(servers.mid_close())

    with db.transaction() as s:
        rounds = s.execute(
            select(Game.name, Round.number, Round.state, Round.id).join(
                Round, Round.game_id == Game.id
            )
        ).all()
        for number, deadline, first_closed, last_closed in s.execute(
            select(
                Round.number,
                func.min(Round.deadline),
                func.min(Round.closed_at),
                func.max(Round.closed_at),
            )
            .where(Round.state == "closed")
            .group_by(Round.number)
            .order_by(Round.number)
        ):
            print(
                f"round {number}: closed from {(first_closed - deadline).total_seconds():.1f} "
                f"to {(last_closed - deadline).total_seconds():.1f} s after its first deadline"
            )
        tallied = set(s.scalars(select(RoundTally.round_id)))
        audited = Counter(
            (name, detail["round"])
            for name, detail in s.execute(
                select(Game.name, AuditEntry.detail)
                .join(Game, Game.id == AuditEntry.game_id)
                .where(AuditEntry.action == "close-round")
            )
        )
        outbox = s.execute(
            select(OutboxMessage.message_id, OutboxMessage.kind, OutboxMessage.recipient)
        ).all()
        reports_enqueued = Counter(
            REPORT_SUBJECT.match(_subject(raw)).groups()  # type: ignore[union-attr]
            for (raw,) in s.execute(
                select(OutboxMessage.message).where(OutboxMessage.kind == "report")
            )
        )
        players = s.execute(
            select(Game.name, Player.email).join(Player, Player.game_id == Game.id)
        ).all()
    db.dispose()

    # each round closed exactly once: ROUNDS per game closed, the next one open, one tally
    # and one audit entry each, at most one log line each (a kill may fall between the
    # commit and the line), one report per player enqueued for each
    names = game_names()
    closed_rounds = {(name, number) for name, number, state, _ in rounds if state == "closed"}
    assert closed_rounds == {(name, n) for name in names for n in range(1, ROUNDS + 1)}
    assert {(name, n) for name, n, state, _ in rounds if state == "open"} == {
        (name, ROUNDS + 1) for name in names
    }
    assert tallied == {rid for _, _, state, rid in rounds if state == "closed"}
    assert set(audited) == closed_rounds and set(audited.values()) == {1}
    logged = Counter((m[1], int(m[2])) for m in CLOSED_LOG.finditer(servers.text()))
    assert set(logged) <= closed_rounds and set(logged.values()) <= {1}, logged.most_common(3)
    assert reports_enqueued == {(name, str(n)): PLAYERS for name, n in closed_rounds}

    # each message delivered, and at most once more per kill
    delivered = Counter(d.message_id for d in smtp_sink.delivered)
    assert set(delivered) == {message_id for message_id, _, _ in outbox}
    extra = sum(delivered.values()) - len(delivered)
    assert max(delivered.values()) <= 1 + killed, delivered.most_common(3)
    print(f"{len(delivered)} messages, {extra} deliveries more than once after {killed} kills")

    # no report lost: every player of every game got every round's report
    got = {
        (d.recipient, *REPORT_SUBJECT.match(_subject(d.raw)).groups())  # type: ignore[union-attr]
        for d in smtp_sink.delivered
        if REPORT_SUBJECT.match(_subject(d.raw))
    }
    wanted = {
        (address.lower(), name, str(n)) for name, address in players for n in range(1, ROUNDS + 1)
    }
    assert wanted <= got, sorted(wanted - got)[:5]


def _subject(raw: bytes) -> str:
    return str(make_header(decode_header(email.message_from_bytes(raw)["Subject"] or "")))
