"""Crash test: `serve` killed with SIGKILL again and again while a 20-player game runs.

Orders go in through Dovecot, reports out to an SMTP sink; the server is
killed at random moments from outside, and also kills itself at the named
crash points of ``snl_pbem.crashpoints`` (between a commit and its MOVE, a
message stored and not processed, inside a close's transaction and just after
it, a message sent and not recorded), which random timing would hit only by
luck. Seeded (the seed is printed so a failure replays); restarted each time.
At the end: every order applied exactly once, every round adjudicated once
and equal to offline adjudication of the same orders, every message delivered
at least once (and at most once more per kill), and the database intact.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient
from mailhelpers import server_mail_config

from snl_pbem.replay import Replay, run_replay
from snl_pbem.rounds import game_rules
from snl_pbem.rules import OrderSet
from snl_pbem.store import Database, Game

SNL = str(Path(sys.executable).with_name("snl-pbem"))
SEED = int(os.environ.get("SNL_PBEM_CHAOS_SEED", "4242"))
PLAYERS = [f"p{i:02d}" for i in range(20)]
SILENT = "p19"  # never writes: R17 every round
MIN_KILLS = 30
CRASH_POINTS = {  # the chance of dying each time the server passes the point: high enough
    # that each is hit in every run (a close is passed only once per round and attempt)
    "imap.stored-not-moved": 0.1,
    "ingest.stored-not-processed": 0.1,
    "close.before-commit": 0.6,
    "close.after-commit": 0.6,
    "send.sent-not-recorded": 0.05,
}
ROUND_SECONDS = 10
BOARD = (
    '{ rows = 5, columns = 10, ladders = { "4" = 14, "11" = 19 }, '
    'snakes = { "17" = 3, "26" = 8, "38" = 21, "47" = 30 } }'
)


def config_text(folder: Path, dovecot, user: str, sink, first: datetime) -> str:
    players = "\n".join(
        f'  {{ name = "{p}", email = "{p}@example.org", key = "{p}-key-123" }},' for p in PLAYERS
    )
    return f"""
timezone = "UTC"
[database]
url = "sqlite:///{folder / "chaos.db"}"
backups = 0
{server_mail_config(dovecot, user, sink, 1000)}[[games]]
id = "chaos"
board = {BOARD}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "{ROUND_SECONDS}s"
double_from_round = 3
players = [
{players}
]
"""


def game_state(path: Path) -> tuple[str, int | None]:
    with sqlite3.connect(path, timeout=30) as conn:
        state = conn.execute("select state from games where key = 'chaos'").fetchone()[0]
        row = conn.execute("select number from rounds where state = 'open'").fetchone()
    return state, (row[0] if row else None)


@pytest.mark.slow
def test_kill_nine_again_and_again(tmp_path: Path, dovecot, smtp_sink) -> None:
    print(f"chaos seed {SEED} (replay: SNL_PBEM_CHAOS_SEED={SEED})")
    rng = random.Random(SEED)
    user = dovecot.new_user()
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=12)
    config = tmp_path / "config.toml"
    config.write_text(config_text(tmp_path, dovecot, user, smtp_sink, first))
    for command in (["db", "upgrade"], ["start", "chaos"]):
        done = subprocess.run(
            [SNL, *command, "--config", str(config)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    log = (tmp_path / "serve.log").open("ab")
    crash_log = tmp_path / "crash-points.log"
    launches = 0

    def launch(points: bool = True) -> subprocess.Popen[bytes]:
        nonlocal launches
        launches += 1
        env = dict(os.environ, SNL_PBEM_CRASH_SEED=f"{SEED}.{launches}")
        if points:
            env["SNL_PBEM_CRASH_POINTS"] = ",".join(f"{k}={v}" for k, v in CRASH_POINTS.items())
            env["SNL_PBEM_CRASH_LOG"] = str(crash_log)
        return subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    server = launch()
    sent: dict[tuple[str, int], tuple[int, ...]] = {}
    used: dict[str, list[int]] = {p: [] for p in PLAYERS}
    kills = 0  # from outside
    kill_at = time.monotonic() + rng.uniform(0.5, 2.0)
    deadline = time.monotonic() + 420
    sent_for = 0
    db_path = tmp_path / "chaos.db"
    try:
        while time.monotonic() < deadline:
            state, number = game_state(db_path)
            if state == "over" and kills >= MIN_KILLS:
                break
            if number is not None and number > sent_for and state == "running":
                _learn(tmp_path, used)
                _send_round(dovecot, user, number, rng, used, sent)
                sent_for = number
            if server.poll() is not None:  # died at a crash point
                assert server.returncode == -signal.SIGKILL, f"serve exited {server.returncode}"
                server = launch()
            if time.monotonic() >= kill_at:
                server.send_signal(signal.SIGKILL)
                server.wait(30)
                kills += 1
                server = launch()
                kill_at = time.monotonic() + rng.uniform(0.3, 2.0)
            time.sleep(0.1)
        assert game_state(db_path)[0] == "over", "the game did not finish in time"
        # let a last server (no crash points) deliver everything, then stop it politely
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        ready_before = _count(tmp_path / "serve.log", b"INFO snl_pbem.server: serving")
        server = launch(points=False)
        end = time.monotonic() + 60
        while _count(tmp_path / "serve.log", b"INFO snl_pbem.server: serving") == ready_before:
            assert time.monotonic() < end, "the server did not come up"
            time.sleep(0.2)
        _wait_outbox_empty(db_path, 60)
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.kill()
        log.close()
    at_points = Counter(crash_log.read_text().split()) if crash_log.exists() else Counter()
    print(
        f"{kills} kills from outside, {sum(at_points.values())} at crash points "
        f"{dict(sorted(at_points.items()))}; {len(sent)} order emails; "
        f"{len(smtp_sink.delivered)} deliveries"
    )
    assert kills >= MIN_KILLS
    assert set(at_points) == set(CRASH_POINTS), "a crash point was never hit: raise its chance"
    _check(tmp_path, db_path, sent, smtp_sink, kills + sum(at_points.values()))


def _learn(folder: Path, used: dict[str, list[int]]) -> None:
    """Each player's dice as the referee played them (from the stored results)."""
    with sqlite3.connect(folder / "chaos.db", timeout=30) as conn:
        rows = conn.execute(
            "select p.name, t.die from turn_results t join players p on "
            "p.id = t.player_id order by t.turn"
        ).fetchall()
    for name in used:
        used[name] = []
    for name, die in rows:
        used[name].append(die)


def _send_round(
    dovecot,
    user: str,
    number: int,
    rng: random.Random,
    used: dict[str, list[int]],
    sent: dict[tuple[str, int], tuple[int, ...]],
) -> None:
    turns = 1 if number < 3 else 2
    client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=30)
    client.login(user, "secret")
    try:
        for name in PLAYERS:
            if name == SILENT:
                continue
            history = list(used[name])
            dice = []
            for _ in range(turns):
                in_set = history[len(history) - len(history) % 6 :]
                open_values = [v for v in range(1, 7) if v not in in_set]
                if rng.random() < 0.1:  # now and then a repeated die: R18
                    dice.append(in_set[0] if in_set else 1)
                else:
                    dice.append(rng.choice(open_values))
                history.append(dice[-1])
            trapdoor = rng.choice([None, 7, 13, 22])
            body = (
                f"GAME chaos\r\nKEY {name}-key-123\r\nROUND {number}\r\n"
                f"DICE {' '.join(map(str, dice))}\r\n"
            )
            if trapdoor:
                body += f"TRAPDOOR {trapdoor}\r\n"
            client.append(
                "INBOX",
                (
                    f"From: {name}@example.org\r\nSubject: [chaos]\r\n"
                    f"Message-ID: <{name}.{number}@chaos.test>\r\n\r\n" + body
                ).encode(),
            )
            sent[(name, number)] = tuple(dice) + ((trapdoor,) if trapdoor else ())
    finally:
        client.logout()


def _count(path: Path, needle: bytes) -> int:
    return path.read_bytes().count(needle) if path.exists() else 0


def _wait_outbox_empty(db_path: Path, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with sqlite3.connect(db_path, timeout=30) as conn:
            waiting = conn.execute(
                "select count(*) from outbox where status = 'pending'"
            ).fetchone()[0]
        if waiting == 0:
            return
        time.sleep(0.5)
    raise AssertionError("the outbox did not empty")


def _check(folder: Path, db_path: Path, sent, sink, kills: int) -> None:
    with sqlite3.connect(db_path, timeout=30) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        assert conn.execute("pragma foreign_key_check").fetchall() == []
        orders = conn.execute(
            "select p.name, r.number, o.dice, o.trapdoor, i.message_id from order_sets o "
            "join players p on p.id = o.player_id join rounds r on r.id = o.round_id "
            "join inbound_messages i on i.id = o.inbound_id"
        ).fetchall()
        stored = conn.execute(
            "select count(*), count(distinct message_id) from inbound_messages"
        ).fetchone()
        tallies = conn.execute("select count(*) from round_tallies").fetchone()[0]
        closed = conn.execute("select count(*) from rounds where state = 'closed'").fetchone()[0]
        outbox = conn.execute("select message_id, status from outbox").fetchall()
    # every order email stored once and applied exactly once, to the round it named
    assert stored[0] == stored[1] == len(sent)
    applied = Counter((name, number) for name, number, *_ in orders)
    assert set(applied) == set(sent) and set(applied.values()) == {1}
    # every round adjudicated exactly once, and as offline adjudication has it
    assert tallies == closed
    db = Database(f"sqlite:///{db_path}")
    with db.transaction() as s:
        from sqlalchemy import select

        game = s.scalar(select(Game))
        rules = game_rules(game)
        result = game.result
    db.dispose()
    rounds = []
    for number in range(1, closed + 1):
        round_orders: dict[str, OrderSet | None] = {}
        for name, n, dice, trapdoor, _ in orders:
            if n == number:
                round_orders[name] = OrderSet(tuple(int(d) for d in dice.split()), trapdoor)
        rounds.append(round_orders)
    offline = run_replay(Replay(rules, tuple(PLAYERS), tuple(rounds)))
    winners = list(offline.state.result.winners) if offline.state.result else None
    expected = (
        {"draw": winners}
        if winners and len(winners) > 1
        else {"winner": winners[0]}
        if winners
        else None
    )
    assert result == expected
    # every message delivered at least once, at most once more per kill; a kill while
    # sending repeats at most one batch, and a batch holds one message per recipient
    delivered = Counter(d.message_id for d in sink.delivered)
    assert all(status == "sent" for _, status in outbox)
    assert {mid for mid, _ in outbox} <= set(delivered)
    assert max(delivered.values()) - 1 <= kills
    recipients = len({d.recipient for d in sink.delivered})
    extra = sum(n - 1 for n in delivered.values())
    print(f"{extra} repeated deliveries ({recipients} recipients)")
    assert extra <= kills * recipients
