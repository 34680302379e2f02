"""Two `serve` processes on one PostgreSQL with the same config, over a whole game:
each round closed once, each order applied once, each message sent once."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient
from mailhelpers import server_mail_config
from sqlalchemy import func, select

from snl_pbem.store import Database, Game, OrderRecord, OutboxMessage, Player, Round, RoundTally

SNL = str(Path(sys.executable).with_name("snl-pbem"))
PLAYERS = [f"q{i}" for i in range(6)]
# Bounded by progress, not by the game's length: the test fails only if an open round stays
# open STALL_SECONDS past its deadline (it closes a few seconds after it, its intake grace,
# when two servers are up; 300 s is a hang detector, 50x a start-up on a busy machine).
STALL_SECONDS = 300


@pytest.mark.slow
def test_two_servers_share_one_postgresql(tmp_path: Path, postgres, dovecot, smtp_sink) -> None:
    url = postgres.url(postgres.create_database())
    user = dovecot.new_user()
    players = "\n".join(
        f'  {{ name = "{p}", email = "{p}@example.org", key = "{p}-key-123" }},' for p in PLAYERS
    )
    config = tmp_path / "config.toml"

    def write_config(first: datetime) -> None:
        config.write_text(f"""
timezone = "UTC"
[database]
url = "{url}"
{server_mail_config(dovecot, user, smtp_sink, 1000)}connections = 2
[[games]]
id = "duo"
board = {{ rows = 2, columns = 10, ladders = {{ "3" = 9 }}, snakes = {{ "14" = 2 }} }}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "6s"
double_from_round = 3
players = [
{players}
]
""")

    def snl(*command: str) -> None:
        done = subprocess.run(
            [SNL, *command, "--config", str(config)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr

    # The first deadline must still be ahead when `start` runs: its margin is measured on
    # this machine now (a command like `start` is timed), never a fixed guess.
    write_config(datetime.now(UTC) + timedelta(days=1))
    began = time.monotonic()
    snl("db", "upgrade")
    command_seconds = time.monotonic() - began
    margin = max(10.0, 4 * command_seconds)
    write_config(datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=margin))
    snl("start", "duo")
    logs = [(tmp_path / f"serve{i}.log").open("wb") for i in range(2)]
    servers = [
        subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for log in logs
    ]
    db = Database(url)
    rng = random.Random(11)
    appended: dict[tuple[str, int], tuple[datetime, datetime]] = {}  # when each append ran
    sent_for = 0
    try:
        while True:
            with db.transaction() as s:
                state = s.scalar(select(Game.state))
                number, deadline = s.execute(
                    select(Round.number, Round.deadline).where(Round.state == "open")
                ).one_or_none() or (None, None)
            if state == "over":
                break
            if deadline is not None:
                late = datetime.now(UTC) - deadline
                assert late < timedelta(seconds=STALL_SECONDS), f"round {number} stayed open"
            if number is not None and number > sent_for:
                client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=30)
                client.login(user, "secret")
                for name in PLAYERS:
                    dice = " ".join(str(rng.randint(1, 6)) for _ in range(1 if number < 3 else 2))
                    began = datetime.now(UTC)
                    client.append(
                        "INBOX",
                        (
                            f"From: {name}@example.org\r\nSubject: [duo]\r\n"
                            f"Message-ID: <{name}.{number}@duo.test>\r\n\r\n"
                            f"KEY {name}-key-123\r\nROUND {number}\r\n"
                            f"DICE {dice}\r\n"
                        ).encode(),
                    )
                    appended[(name, number)] = (began, datetime.now(UTC))
                client.logout()
                sent_for = number
            time.sleep(0.2)
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
            if waiting != last:
                last, since = waiting, time.monotonic()
            assert time.monotonic() - since < STALL_SECONDS, f"{waiting} messages stuck"
            time.sleep(0.5)
        for server in servers:
            server.send_signal(signal.SIGTERM)
        assert [server.wait(STALL_SECONDS) for server in servers] == [0, 0]
    finally:
        for server in servers:
            if server.poll() is None:
                server.kill()
        for log in logs:
            log.close()
    with db.transaction() as s:
        closed = s.scalar(select(func.count()).select_from(Round).where(Round.state == "closed"))
        tallies = s.scalar(select(func.count()).select_from(RoundTally))
        orders = s.execute(
            select(Player.name, Round.number)
            .select_from(OrderRecord)
            .join(Player, Player.id == OrderRecord.player_id)
            .join(Round, Round.id == OrderRecord.round_id)
        ).all()
        deadlines = dict(s.execute(select(Round.number, Round.deadline)).all())
        outbox = s.scalars(select(OutboxMessage.message_id)).all()
    db.dispose()
    assert closed == tallies > 0  # every round closed once
    # every order applied at most once; each in the mailbox before its round's deadline
    # applied, each appended after it refused (the test appends a round's orders when it sees
    # the round open, at least half a round before its deadline, but a busy machine may make
    # some late; the mailbox's receipt time, in whole seconds, may fall either side of it)
    applied = Counter((name, number) for name, number in orders)
    assert set(applied.values()) <= {1} and set(applied) <= set(appended)
    due = deadlines  # aware, UTC
    in_time = {k for k, (_, end) in appended.items() if end <= due[k[1]]}
    late = {k for k, (began, _) in appended.items() if began > due[k[1]] + timedelta(seconds=1)}
    assert in_time <= set(applied), sorted(in_time - set(applied))
    assert not late & set(applied), sorted(late & set(applied))
    print(
        f"{len(appended) - len(in_time)} of {len(appended)} orders appended near or after "
        "their deadline"
    )
    delivered = Counter(d.message_id for d in smtp_sink.delivered)
    assert set(delivered) == set(outbox) and set(delivered.values()) == {1}  # sent once each
    both = [(tmp_path / f"serve{i}.log").read_text() for i in range(2)]
    assert all("serving 1 game from" in text for text in both)
