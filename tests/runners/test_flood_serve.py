"""A sign-up flood through ``serve`` (issue 20), its mail alternately by LMTP and into the
Dovecot mailbox, on SQLite and PostgreSQL: thirty forged JOINs from thirty domains void
no honest code, the honest JOIN after them gets a short reason (not silence), the
referee hears of it once, and forged repeats in an honest joiner's name send her no new
code and leave hers good. Each step waits for the mail (or the stored state) it causes.
"""

from __future__ import annotations

import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mailhelpers import code_in
from sqlalchemy import func, select
from test_life_cycle_serve import Post, config_text
from test_serve import SNL, WAIT, run, wait_for

from snl_pbem.app import signup
from snl_pbem.config import load_config
from snl_pbem.store import Database, InboundMessage

FORGED = [f"x{i}@forger{i}.example" for i in range(30)]


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_sign_up_flood_through_serve_starves_no_one(
    tmp_path: Path, dovecot, smtp_sink, request: pytest.FixtureRequest, database: str
) -> None:
    user = dovecot.new_user()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        lmtp_port = sock.getsockname()[1]
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    path = tmp_path / "config.toml"
    text = config_text(tmp_path, dovecot, user, smtp_sink, lmtp_port, first)
    if database == "postgresql":
        server_pg = request.getfixturevalue("postgres")
        url = server_pg.url(server_pg.create_database())
        text = text.replace(f"sqlite:///{tmp_path / 'snl.db'}", url)
    path.write_text(text)
    assert run("db", "upgrade", config=path).returncode == 0
    db = Database(load_config(path).database_url)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(path), "--log-level", "info"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    post = Post(dovecot, user, lmtp_port, smtp_sink)

    def all_read(total: int) -> bool:
        with db.transaction() as s:
            done = s.scalar(
                select(func.count())
                .select_from(InboundMessage)
                .where(InboundMessage.status != "new")
            )
            return done == total

    try:
        wait_for(lambda: "receiving LMTP" in log.read_text(), WAIT, "the server", log)
        post.send("ann@honest.example", "JOIN club Ann", subject="sign me up")
        (code_mail,) = post.wait("ann@honest.example", "Your confirmation code", 1, log)
        for who in FORGED:
            post.send(who, f"JOIN club {who.split('@')[0]}", subject="join")
        wait_for(lambda: all(post.to(who) for who in FORGED), WAIT, "an answer to each JOIN", log)
        coded = [who for who in FORGED if post.texts(who, "Your confirmation code")]
        assert len(coded) == signup.MAX_UNCONFIRMED_PER_GAME - 1
        refused = [who for who in FORGED if who not in coded]
        assert all(
            "again in an hour" in post.texts(who, "About your request")[0] for who in refused
        )
        # the honest JOIN after the flood: a short reason, never silence
        post.send("bea@honest.example", "JOIN club Bea", subject="can I play?")
        (reason,) = post.wait("bea@honest.example", "About your request", 1, log)
        assert "send your JOIN again in an hour" in " ".join(reason.split())
        (notice,) = post.wait("ref@example.org", "many sign-ups", 1, log)
        assert "club" in notice
        # forged repeats in ann's name: one reminder, no new code, her code still good
        for i in range(6):
            post.send("ann@honest.example", f"JOIN club Mallory{i}", subject="join")
        (reminder,) = post.wait("ann@honest.example", "About your request", 1, log)
        assert "as 'Ann'" in " ".join(reminder.split())
        wait_for(lambda: all_read(1 + len(FORGED) + 1 + 6), WAIT, "every message read", log)
        post.send("ann@honest.example", f"CONFIRM {code_in(code_mail)}")
        post.wait("ann@honest.example", "You have a seat", 1, log)
        assert len(post.texts("ann@honest.example", "Your confirmation code")) == 1
        assert len(post.texts("ann@honest.example", "About your request")) == 1
        assert len(post.texts("ref@example.org", "many sign-ups")) == 1
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert "Traceback" not in log.read_text()
