"""The GM's guide's restore from a backup (deploy/README.md, "Backups and restore"), run
as written on SQLite with the real server (issue 21): round 1 closed by the server (a
backup first), bob's orders for round 2 in, then the guide's steps, read from the guide
itself: stop, copy the backup over the database, notify-restored, start. Each player's
first mail after the restore says what happened and what now counts, before the round 1
report the restored server sends again; bob is told to send his round 2 orders again."""

from __future__ import annotations

import email
import email.policy
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import update

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.config import load_config
from snl_pbem.store import Database, Round
from snl_pbem.store.migrate import upgrade

ROOT = Path(__file__).parents[2]
GUIDE = ROOT / "deploy" / "README.md"
BIN = Path(sys.executable).parent
SNL = str(BIN / "snl-pbem")
WAIT = 300.0
"""A hang detector, far above what each wait takes (a server's start-up and a close take
a few seconds on a busy machine): every wait ends on the event it waits for."""
PLAYERS = ("ann@example.org", "bob@example.org")

CONFIG = """
timezone = "UTC"
[database]
url = "sqlite:///{data}/snl.db"
backups = 3
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[mail.smtp]
host = "{host}"
port = {port}
tls = "none"

[[games]]
id = "g1"
title = "Restore game"
board = "standard"
first_deadline = "{first}"
round_length = "1d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""


def restore_steps() -> list[str]:
    """The shell lines of the guide's restore block, as a GM copies them."""
    section = GUIDE.read_text().split("\n## Backups and restore\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


class Service:
    """``snl-pbem serve`` as systemd runs it: started, and stopped with SIGTERM."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log, self.process = env, log, None

    def start(self) -> None:
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                [SNL, "serve", "--log-level", "info"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=WAIT)
        self.process = None


def wait_for(condition, what: str, log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text()[-3000:]}")


def unsent_in(backup: Path) -> dict[str, list[str]]:
    """The subjects of the mail a backup holds unsent, by recipient, oldest first."""
    con = sqlite3.connect(f"file:{backup}?immutable=1", uri=True)  # leaves no -wal or -shm
    try:
        rows = con.execute(
            "SELECT recipient, message FROM outbox WHERE status = 'pending' ORDER BY id"
        ).fetchall()
    finally:
        con.close()
    found: dict[str, list[str]] = {}
    for recipient, raw in rows:
        subject = email.message_from_bytes(raw, policy=email.policy.default)["Subject"]
        found.setdefault(recipient, []).append(str(subject))
    return found


def received(sink, who: str, since: int = 0) -> list[tuple[str, str]]:
    """(subject, text with its lines joined) of each message ``who`` got, in order."""
    out = []
    for item in sink.delivered[since:]:
        if item.recipient == who:
            msg = email.message_from_bytes(item.raw, policy=email.policy.default)
            text = " ".join(msg.get_content().split())  # type: ignore[attr-defined]
            out.append((str(msg["Subject"]), text))
    return out


def test_the_guides_restore_steps_tell_every_player_what_counts(tmp_path: Path, smtp_sink) -> None:
    data = tmp_path / "var" / "lib" / "snl-pbem"
    data.mkdir(parents=True)
    first = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    config = tmp_path / "config.toml"
    config.write_text(
        CONFIG.format(data=data, host=smtp_sink.host, port=smtp_sink.port, first=first)
    )
    env = {**os.environ, "SNL_PBEM_CONFIG": str(config), "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)

    def snl(*args: str) -> str:
        done = subprocess.run(
            [SNL, *args], env=env, capture_output=True, text=True, timeout=WAIT, check=False
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    # the game started and both players' orders in (in this process: quicker than commands)
    settings = load_config(config)
    db = Database(settings.database_url)

    def orders(who: str, key: str, dice: int, tag: str) -> None:
        raw = (
            f"From: {who}\r\nSubject: [g1] orders\r\nMessage-ID: <{tag}@example.org>\r\n\r\n"
            f"KEY {key}\r\nDICE {dice}\r\n"
        ).encode()
        assert ingest(db, settings, raw, datetime.now(UTC), "t").status == "processed"

    try:
        upgrade(db)
        sync_games(db, settings, datetime.now(UTC))
        start_game(db, settings, "g1", datetime.now(UTC))
        orders(PLAYERS[0], "ann-key-123", 4, "a1")
        orders(PLAYERS[1], "bob-key-123", 2, "b1")
        with db.transaction() as s:  # round 1's deadline comes now: the server closes it
            s.execute(update(Round).where(Round.number == 1).values(deadline=datetime.now(UTC)))
    finally:
        db.dispose()

    log = tmp_path / "serve.log"
    service = Service(env, log)
    service.start()
    try:
        for who in PLAYERS:
            wait_for(
                lambda who=who: any(
                    s == "[g1] Round 1 report" for s, _ in received(smtp_sink, who)
                ),
                f"the round 1 report to {who}",
                log,
            )
        eml = tmp_path / "b2.eml"  # bob's orders for round 2, after the backup
        eml.write_text(
            "From: bob@example.org\nSubject: [g1] orders\nMessage-ID: <b2@example.org>\n\n"
            "KEY bob-key-123\nDICE 5\n"
        )
        assert "processed (orders for round 2 (valid))" in snl("ingest", str(eml))
        [backup] = sorted((data / "backups").glob("*.sqlite"))
        assert backup.name.endswith("-g1-before-close.sqlite")
        unsent = unsent_in(backup)  # sent again after the restore: at least once, never lost

        restored_at = len(smtp_sink.delivered)
        steps = restore_steps()
        assert steps[0] == "sudo systemctl stop snl-pbem"
        assert steps[-1] == "sudo systemctl start snl-pbem"
        assert any("notify-restored" in step for step in steps)
        chosen = ""
        for step in steps:
            if step == "sudo systemctl stop snl-pbem":
                service.stop()
                continue
            if step == "sudo systemctl start snl-pbem":
                service.start()
                continue
            line = step.replace("sudo -u snl-pbem ", "").replace("/var/lib/snl-pbem", str(data))
            line = line.replace("FILE", chosen)
            assert "sudo" not in line, f"a step this test cannot run: {step}"
            done = subprocess.run(
                ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=WAIT
            )
            assert done.returncode == 0, (step, done.stdout, done.stderr)
            if line.startswith("ls "):
                chosen = done.stdout.split()[-1]  # the newest backup, as the GM picks it
            if "notify-restored" in line:
                told = done.stdout
                assert "the database's records end at " in told
                assert "g1: round 1 open, its deadline " in told
                assert "has passed: the round closes as soon as the service runs; 2 told" in told
        assert chosen == backup.name

        for who in PLAYERS:
            wait_for(
                lambda who=who: any(
                    s == "[g1] Round 1 report" for s, _ in received(smtp_sink, who, restored_at)
                ),
                f"the round 1 report to {who} again",
                log,
            )
    finally:
        service.stop()

    notices = {}
    for who in PLAYERS:
        got = received(smtp_sink, who, restored_at)
        subjects = [subject for subject, _ in got]
        assert subjects == [
            *unsent.get(who, []),
            "[g1] The server was restored from a backup: round 1 is open",
            "[g1] Round 1 report",
        ], (who, subjects)
        notices[who] = got[-2][1]
    ann, bob = notices[PLAYERS[0]], notices[PLAYERS[1]]
    for text in (ann, bob):
        assert (
            "Restore game: the game's server was restored from a backup. The last mail "
            "between you and it that the server still has is from "
        ) in text
        assert "orders or other mail you sent after that are lost" in text
        assert "Mail we sent you shortly before it may come again." in text
        assert (
            "has passed: it closes as soon as the server is back, with the orders the server "
            "has, and you get its report again, with the next deadline."
        ) in text
        assert "Orders you sent for the next round are lost: send them again once its" in text
    assert "Your orders for round 1, as the server has them: dice 4." in ann
    assert "Your orders for round 1, as the server has them: dice 2." in bob
    assert "dice 2" not in ann and "dice 4" not in bob  # R19: their own orders only
    status = snl("status", "g1")
    assert "round 2 (one turn)" in status and "valid orders from 0 of 2" in status
