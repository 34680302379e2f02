"""Outages under a running server: PostgreSQL restarted; nothing lost, nothing twice."""

from __future__ import annotations

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

from snl_pbem.store import Database, OrderRecord

SNL = str(Path(sys.executable).with_name("snl-pbem"))


def wait_for(condition, seconds: float, what: str, log: Path) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_postgresql_restarted_under_a_running_server(
    tmp_path: Path, postgres, dovecot, smtp_sink
) -> None:
    url = postgres.url(postgres.create_database())
    user = dovecot.new_user()
    first = datetime.now(UTC) + timedelta(hours=1)
    config = tmp_path / "config.toml"
    config.write_text(f"""
[database]
url = "{url}"
{server_mail_config(dovecot, user, smtp_sink, 20)}[[games]]
id = "pg"
board = {{ ladders = {{ "4" = 14 }} }}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "1d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
""")
    for command in (["db", "upgrade"], ["start", "pg"]):
        done = subprocess.run(
            [SNL, *command, "--config", str(config)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: len(smtp_sink.delivered) == 2, 60, "the welcomes", log_path)

            def append(name: str, tag: str) -> None:
                client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=30)
                client.login(user, "secret")
                client.append(
                    "INBOX",
                    (
                        f"From: {name}@example.org\r\nSubject: [pg]\r\n"
                        f"Message-ID: <{tag}@pg.test>\r\n\r\n"
                        f"KEY {name}-key-123\r\nDICE 3\r\n"
                    ).encode(),
                )
                client.logout()

            append("ann", "before")
            wait_for(lambda: len(smtp_sink.delivered) == 3, 60, "the first ack", log_path)
            postgres.restart()  # every connection of the server is dropped
            append("bob", "after")
            wait_for(
                lambda: len(smtp_sink.delivered) == 4, 90, "the ack after the restart", log_path
            )
            server.send_signal(signal.SIGTERM)
            assert server.wait(30) == 0
        finally:
            if server.poll() is None:
                server.kill()
    db = Database(url)
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(OrderRecord)) == 2
    db.dispose()
    assert set(Counter(d.message_id for d in smtp_sink.delivered).values()) == {1}
