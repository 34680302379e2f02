"""Soak: 500 players, 30 rounds, every order through Dovecot and every report to an SMTP
sink, the clock fast-forwarded. Prints the time per round close and the peak memory."""

from __future__ import annotations

import random
import resource
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient
from sqlalchemy import func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.outbox import drain_parallel
from snl_pbem.config import load_config
from snl_pbem.mail.imap import ImapPoller, MailboxConfig
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.runners.mailboxes import DatabaseHooks
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.store import Database, OrderRecord, OutboxMessage, Round
from snl_pbem.store.migrate import upgrade

PLAYERS = 500
ROUNDS = 30


@pytest.mark.slow
def test_soak_500_players_30_rounds(tmp_path: Path, dovecot, smtp_sink) -> None:
    names = [f"s{i:03d}" for i in range(PLAYERS)]
    # The fast-forwarded clock runs in the past: mail arrives (INTERNALDATE) in real time,
    # and a receipt time is never later than the server's clock.
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=60)
    players = "\n".join(
        f'  {{ name = "{n}", email = "{n}@example.org", key = "{n}-key-123" }},' for n in names
    )
    path = tmp_path / "config.toml"
    path.write_text(f"""
[database]
url = "sqlite:///{tmp_path / "soak.db"}"
backups = 0
[mail]
address = "snl@example.org"
referee = "ref@example.org"
replies_per_hour = 1000
[[games]]
id = "soak"
board = {{ rows = 20, columns = 20, ladders = {{ "7" = 30 }}, snakes = {{ "99" = 40 }} }}
first_deadline = "{(start + timedelta(days=1)).isoformat()}"
round_length = "1d"
players = [
{players}
]
""")
    config = load_config(path)
    db = Database(config.database_url)
    upgrade(db)
    sync_games(db, config, start)
    start_game(db, config, "soak", start)
    now = [start]
    clock = lambda: now[0]  # noqa: E731
    user = dovecot.new_user()
    hooks = DatabaseHooks(db, config, clock=clock)
    poller = ImapPoller(
        MailboxConfig(dovecot.host, dovecot.port, "none", user, "secret", timeout=60), hooks
    )
    rounds = RoundScheduler(db, config, clock=clock)

    def sender():
        return SmtpSender(
            SmtpConfig(smtp_sink.host, smtp_sink.port, "none"),
            "snl@example.org",
        )

    rng = random.Random(500)
    used = {n: [] for n in names}
    close_times = []
    sent = 0
    for number in range(1, ROUNDS + 1):
        with db.transaction() as s:
            round_ = s.scalar(select(Round).where(Round.state == "open"))
        if round_ is None:
            break
        now[0] = round_.opened_at + timedelta(hours=1)
        client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=60)
        client.login(user, "secret")
        for name in names:
            history = used[name]
            dice = []
            for _ in range(round_.turns):
                in_set = history[len(history) - len(history) % 6 :]
                dice.append(rng.choice([v for v in range(1, 7) if v not in in_set]))
                history = [*history, dice[-1]]
            raw = (
                f"From: {name}@example.org\r\nSubject: [soak]\r\n"
                f"Message-ID: <{name}.{number}@soak.test>\r\n\r\nKEY {name}-key-123\r\n"
                f"DICE {' '.join(map(str, dice))}\r\n"
            ).encode()
            client.append("INBOX", raw)
            sent += 1
        client.logout()
        poller.poll_once()
        now[0] = round_.deadline
        started = time.perf_counter()
        outcome = rounds.on_deadline("soak", number)
        close_times.append(time.perf_counter() - started)
        assert outcome is not None
        for turn in outcome.result.turns:
            for name, move in turn.moves.items():
                used[name].append(move.die)
        drain_parallel(db, config, sender, clock, connections=2, worker="soak")
        if outcome.next_round is None:
            break
    poller.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    closed = len(close_times)
    print(
        f"soak: {PLAYERS} players, {closed} rounds; round close median "
        f"{sorted(close_times)[closed // 2] * 1000:.0f} ms, max {max(close_times) * 1000:.0f} ms;"
        f" peak memory {peak_mb:.0f} MB; {len(smtp_sink.delivered)} messages delivered"
    )
    with db.transaction() as s:
        orders = s.scalar(select(func.count()).select_from(OrderRecord))
        valid = s.scalar(select(func.count()).select_from(OrderRecord).where(OrderRecord.valid))
        unsent = s.scalar(
            select(func.count()).select_from(OutboxMessage).where(OutboxMessage.status != "sent")
        )
    db.dispose()
    assert closed == ROUNDS or closed >= 20  # a very lucky player may finish a little early
    assert orders == valid == sent  # every order stored and applied, nothing lost
    assert unsent == 0
    delivered = Counter(d.message_id for d in smtp_sink.delivered)
    assert set(delivered.values()) == {1}
    reports = sum(1 for d in smtp_sink.delivered if b"report" in d.raw[:600].lower())
    assert reports >= PLAYERS * (closed - 1)
