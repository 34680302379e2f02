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

from snl_pbem.store import Database, Game, OrderRecord, OutboxMessage, Round, RoundTally

SNL = str(Path(sys.executable).with_name("snl-pbem"))
PLAYERS = [f"q{i}" for i in range(6)]


@pytest.mark.slow
def test_two_servers_share_one_postgresql(tmp_path: Path, postgres, dovecot, smtp_sink) -> None:
    url = postgres.url(postgres.create_database())
    user = dovecot.new_user()
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
    players = "\n".join(
        f'  {{ name = "{p}", email = "{p}@example.org", key = "{p}-key-123" }},' for p in PLAYERS
    )
    config = tmp_path / "config.toml"
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
    for command in (["db", "upgrade"], ["start", "duo"]):
        done = subprocess.run(
            [SNL, *command, "--config", str(config)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
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
    sent = 0
    sent_for = 0
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            with db.transaction() as s:
                state = s.scalar(select(Game.state))
                number = s.scalar(select(Round.number).where(Round.state == "open"))
            if state == "over":
                break
            if number is not None and number > sent_for:
                client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=30)
                client.login(user, "secret")
                for name in PLAYERS:
                    dice = " ".join(str(rng.randint(1, 6)) for _ in range(1 if number < 3 else 2))
                    client.append(
                        "INBOX",
                        (
                            f"From: {name}@example.org\r\nSubject: [duo]\r\n"
                            f"Message-ID: <{name}.{number}@duo.test>\r\n\r\n"
                            f"KEY {name}-key-123\r\nROUND {number}\r\n"
                            f"DICE {dice}\r\n"
                        ).encode(),
                    )
                    sent += 1
                client.logout()
                sent_for = number
            time.sleep(0.2)
        assert state == "over", "the game did not finish in time"
        end = time.monotonic() + 60
        while time.monotonic() < end:
            with db.transaction() as s:
                waiting = s.scalar(
                    select(func.count())
                    .select_from(OutboxMessage)
                    .where(OutboxMessage.status != "sent")
                )
            if waiting == 0:
                break
            time.sleep(0.5)
        for server in servers:
            server.send_signal(signal.SIGTERM)
        assert [server.wait(30) for server in servers] == [0, 0]
    finally:
        for server in servers:
            if server.poll() is None:
                server.kill()
        for log in logs:
            log.close()
    with db.transaction() as s:
        closed = s.scalar(select(func.count()).select_from(Round).where(Round.state == "closed"))
        tallies = s.scalar(select(func.count()).select_from(RoundTally))
        orders = s.scalar(select(func.count()).select_from(OrderRecord))
        outbox = s.scalars(select(OutboxMessage.message_id)).all()
    db.dispose()
    assert closed == tallies > 0  # every round closed once
    assert orders == sent  # every order applied once
    delivered = Counter(d.message_id for d in smtp_sink.delivered)
    assert set(delivered) == set(outbox) and set(delivered.values()) == {1}  # sent once each
    both = [(tmp_path / f"serve{i}.log").read_text() for i in range(2)]
    assert all("serving 1 game(s)" in text for text in both)
