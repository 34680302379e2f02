"""Outages under a running `serve`: the SMTP server down for several round closes, Dovecot
down over a deadline (the circuit breaker), PostgreSQL restarted. Nothing lost, nothing twice,
and the outage costs only time."""

from __future__ import annotations

import email
import re
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
from sqlalchemy import func, select

from snl_pbem.store import Database, OrderRecord

SNL = str(Path(sys.executable).with_name("snl-pbem"))
# Waits end on an event; their limit only detects a hang: what they wait for takes a few
# seconds (a command or the server's start-up: about 1 s on an idle 2-core machine, 3 to 6 s
# beside a CPU hog and other test runs), so WAIT is 50x that.
WAIT = 300.0


def one_command() -> float:
    """How long one snl-pbem command takes on this machine now (mostly its start-up)."""
    began = time.monotonic()
    subprocess.run([SNL, "--help"], capture_output=True, check=True, timeout=WAIT)
    return time.monotonic() - began


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
    log_path = tmp_path / "serve.log"
    server = _start(config, log_path, game="pg")
    try:
        wait_for(lambda: len(smtp_sink.delivered) == 2, WAIT, "the welcomes", log_path)

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
        wait_for(lambda: len(smtp_sink.delivered) == 3, WAIT, "the first ack", log_path)
        postgres.restart()  # every connection of the server is dropped
        append("bob", "after")
        wait_for(lambda: len(smtp_sink.delivered) == 4, WAIT, "the ack after the restart", log_path)
        server.send_signal(signal.SIGTERM)
        assert server.wait(WAIT) == 0
    finally:
        if server.poll() is None:
            server.kill()
    db = Database(url)
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(OrderRecord)) == 2
    db.dispose()
    assert set(Counter(d.message_id for d in smtp_sink.delivered).values()) == {1}


def _start(config: Path, log_path: Path, game: str = "out") -> subprocess.Popen[bytes]:
    """Migrate, start the game, and launch `serve` logging to ``log_path``."""
    for command in (["db", "upgrade"], ["start", game]):
        done = subprocess.run(
            [SNL, *command, "--config", str(config)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(WAIT)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def _query(db_path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db_path, timeout=30) as conn:
        return conn.execute(sql).fetchall()


PLAYERS = ("ann", "bob", "cy")


def _config(folder: Path, mail: str, first: datetime, round_length: str) -> Path:
    """A SQLite server with these [mail] sections and one game "out" of three players."""
    players = "\n".join(
        f'  {{ name = "{p}", email = "{p}@example.org", key = "{p}-key-123" }},' for p in PLAYERS
    )
    path = folder / "config.toml"
    path.write_text(f"""
timezone = "UTC"
[database]
url = "sqlite:///{folder / "out.db"}"
backups = 0
{mail}[[games]]
id = "out"
board = {{ rows = 10, columns = 10 }}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "{round_length}"
players = [
{players}
]
""")
    return path


@pytest.mark.slow
def test_smtp_server_down_for_several_round_closes(tmp_path: Path, smtp_sink) -> None:
    """Rounds close every 3 s while the SMTP server is down; when it is back, every report
    goes out once, in the order written, per player, without waiting out per-message backoff."""
    db_path = tmp_path / "out.db"
    # 8 s after the server is up; `db upgrade`, `start` and its start-up come first
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8 + 4 * one_command())
    config = _config(
        tmp_path,
        f"""[mail]
address = "snl@example.org"
referee = "ref@example.org"
[mail.smtp]
host = "{smtp_sink.host}"
port = {smtp_sink.port}
tls = "none"
""",
        first,
        "3s",
    )
    log_path = tmp_path / "serve.log"
    server = _start(config, log_path)
    try:
        welcomes = lambda: sum(b"Welcome" in d.raw for d in smtp_sink.delivered)  # noqa: E731
        wait_for(lambda: welcomes() == 3, WAIT, "the welcomes", log_path)
        smtp_sink.stop()
        delivered = len(smtp_sink.delivered)  # the welcomes (a slow machine: a report too)
        closed = "select count(*) from rounds where state = 'closed'"
        before = _query(db_path, closed)[0][0]
        wait_for(lambda: _query(db_path, closed)[0][0] >= before + 4, WAIT, "4 closes", log_path)
        waiting = _query(db_path, "select count(*) from outbox where status = 'pending'")[0][0]
        assert waiting >= 4 * (len(PLAYERS) + 1)  # reports and referee summaries, all held
        assert len(smtp_sink.delivered) == delivered
        shown = subprocess.run(
            [SNL, "status", "out", "--config", str(config)], capture_output=True, text=True
        )
        assert shown.returncode == 0, shown.stderr
        assert "waiting to be sent" in shown.stdout and "the oldest mail waiting" in shown.stdout
        assert "last sending error: cannot open an SMTP session" in shown.stdout, shown.stdout
        back = time.monotonic()
        smtp_sink.start()
        # pause the game so that the rounds stop closing, then wait for the outbox to drain
        done = subprocess.run(
            [SNL, "pause", "out", "--config", str(config)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        pending = "select count(*) from outbox where status != 'sent'"
        wait_for(lambda: _query(db_path, pending)[0][0] == 0, WAIT, "the outbox to drain", log_path)
        print(
            f"{waiting}+ messages held by the outage; all sent {time.monotonic() - back:.1f}s "
            "after the SMTP server came back"
        )
    finally:
        _stop(server)
    assert server.returncode == 0
    written = _query(db_path, "select message_id, recipient from outbox order by id")
    delivered = [d.message_id for d in smtp_sink.delivered]
    assert Counter(delivered) == Counter(mid for mid, _ in written)  # each exactly once
    for player in (*PLAYERS, "ref"):
        to = f"{player}@example.org"
        got = [d.message_id for d in smtp_sink.delivered if d.recipient == to]
        assert got == [mid for mid, rcpt in written if rcpt == to]  # in the order written
        subjects = [
            str(email.message_from_bytes(d.raw)["Subject"])
            for d in smtp_sink.delivered
            if d.recipient == to
        ]
        rounds = [int(m.group(1)) for s in subjects if (m := re.search(r"[Rr]ound (\d+)", s))]
        assert rounds == sorted(rounds) and len(rounds) >= 4
    text = log_path.read_text()
    assert "SMTP server unreachable" in text and "SMTP server reachable again" in text
    attempts = _query(db_path, "select max(attempts) from outbox")[0][0]
    assert attempts <= text.count("SMTP server unreachable") + 1  # tries per outage, not per mail


@pytest.mark.slow
def test_dovecot_down_over_a_deadline(tmp_path: Path, dovecot, smtp_sink) -> None:
    """IMAP down across a deadline: the round is held (the referee is told), an order the MTA
    delivered to the mailbox before the deadline still counts, and the round closes once the
    mailbox has been read again for `healthy_within`."""
    user = dovecot.new_user()
    db_path = tmp_path / "out.db"
    # 20 s after the server is up and has read the mailbox once; before that come `db
    # upgrade`, `start`, its start-up and the welcomes: a busy machine moves it later
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=20 + 5 * one_command())
    mail = server_mail_config(dovecot, user, smtp_sink, 20).replace(
        'poll_interval = "1s"', 'poll_interval = "1s"\nhealthy_within = "3s"'
    )
    config = _config(tmp_path, mail, first, "1h")
    log_path = tmp_path / "serve.log"
    server = _start(config, log_path)
    try:
        wait_for(lambda: len(smtp_sink.delivered) == 3, WAIT, "the welcomes", log_path)
        polled = "select count(*) from mailbox_state where last_ok_at is not null"
        wait_for(lambda: _query(db_path, polled)[0][0] == 1, WAIT, "a good poll", log_path)
        time.sleep(max(0.0, (first - datetime.now(UTC)).total_seconds() - 10))
        dovecot.stop(sessions_too=True)
        # the MTA still delivers into the Maildir while IMAP is down: before the deadline
        dovecot.deliver_to_maildir(
            user,
            b"From: ann@example.org\r\nSubject: [out]\r\nMessage-ID: <ann.1@out.test>\r\n"
            b"\r\nKEY ann-key-123\r\nDICE 5\r\n",
        )
        assert datetime.now(UTC) < first, f"the set-up ended {datetime.now(UTC) - first} late"
        held = "select held_at, state from rounds where number = 1"
        wait_for(lambda: _query(db_path, held)[0][0] is not None, WAIT, "the hold", log_path)
        wait_for(
            lambda: any(d.recipient == "ref@example.org" for d in smtp_sink.delivered),
            WAIT,
            "the referee's alert",
            log_path,
        )
        alert = next(d for d in smtp_sink.delivered if d.recipient == "ref@example.org")
        assert b"HELD" in alert.raw
        time.sleep(4)  # well past the deadline and its grace: the breaker keeps it open
        assert _query(db_path, held)[0][1] == "open"
        back = time.monotonic()
        dovecot.start_again()
        wait_for(lambda: _query(db_path, held)[0][1] == "closed", WAIT, "the release", log_path)
        print(f"round 1 closed {time.monotonic() - back:.1f}s after Dovecot came back")
        results = dict(
            _query(
                db_path,
                "select p.name, t.die from turn_results t join players p on p.id = t.player_id",
            )
        )
        assert results == {"ann": 5, "bob": 1, "cy": 1}  # ann's order counted; R17 for others
        [(closed_at, healthy_since)] = _query(
            db_path,
            "select r.closed_at, m.healthy_since from rounds r, mailbox_state m where r.number = 1",
        )
        waited = datetime.fromisoformat(closed_at) - datetime.fromisoformat(healthy_since)
        assert waited >= timedelta(seconds=3), waited  # healthy for healthy_within first
        assert "round 1 held" in log_path.read_text()
    finally:
        _stop(server)
        if not dovecot.running():
            dovecot.start_again()
    assert server.returncode == 0
