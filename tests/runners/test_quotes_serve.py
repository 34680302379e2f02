"""Issue 20 through the real ``serve``, on both intakes at once: quoted old orders in reply
header blocks of many languages and scripts (the corpus of tests/data/mail/replies/), an
HTML header block of names only, an auto-reply known by its subject alone, and an
out-of-office that pastes the welcome we sent, unquoted. Only what each player wrote now
counts. (Quote recognition does not depend on the database: SQLite only.)"""

from __future__ import annotations

import email
import email.policy
import smtplib
import socket
import sqlite3
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient
from mailhelpers import server_mail_config
from test_serve import SNL, WAIT, run, wait_for

REPLIES = Path(__file__).parents[1] / "data" / "mail" / "replies"
# Outlook-style header blocks in scripts no word list of ours holds, and an invented
# language: half go in by IMAP, half by LMTP. In each, ann's new DICE 2 stands above the
# quoted old orders (DICE 4, or cy's with his key).
IMAP_FILES = ("ja_outlook", "zh-cn_outlook", "th_outlook", "ko_outlook", "el_outlook")
LMTP_FILES = ("ar_outlook", "he_outlook", "vi_outlook", "zh-tw_outlook", "x-tifinagh_outlook")

GAME = """
[[games]]
id = "g1"
board = {{ ladders = {{ "4" = 14 }} }}
first_deadline = "{first}"
round_length = "1h"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-123" }},
]
"""


def _corpus(name: str) -> bytes:
    return (REPLIES / f"{name}.eml").read_bytes()


def _html_names_only() -> bytes:
    html = (
        "<html><body><div>GAME g1<br>KEY ann-key-123<br>DICE 2<br></div><hr>"
        "<div><b>差出人:</b> Snakes Referee<br><b>送信日時:</b> 2026年11月30日 9:00<br>"
        "<b>宛先:</b> Ann Lee<br><b>件名:</b> [g1] Round 1<br></div><br>"
        "<div>GAME g1<br>KEY ann-key-123<br>DICE 4<br></div></body></html>"
    )
    return (
        "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: RE: [g1] Round 1\r\n"
        "Message-ID: <html-names@example.org>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n" + html
    ).encode()


def _auto_reply_by_subject() -> bytes:
    # no Auto-Submitted, no X-Autoreply, no Precedence: only the subject says it is a robot
    return (
        b"From: cy@example.org\r\nTo: snl@example.org\r\n"
        b"Subject: Automatic reply: [g1] Welcome to g1: your order key\r\n"
        b"Message-ID: <cy-away@example.org>\r\n\r\n"
        b"I am away until Monday.\r\n\r\nGAME g1\r\nKEY cy-key-123\r\nDICE 6\r\n"
    )


@pytest.mark.slow
def test_only_what_players_wrote_counts_through_serve_on_both_intakes(
    tmp_path: Path, dovecot, smtp_sink
) -> None:
    user = dovecot.new_user()
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "config.toml"
    config.write_text(
        f'timezone = "UTC"\n[database]\nurl = "sqlite:///{tmp_path / "snl.db"}"\n'
        + server_mail_config(dovecot, user, smtp_sink, 20).replace(
            "[mail.smtp]", f'[mail.lmtp]\nhost = "127.0.0.1"\nport = {port}\n[mail.smtp]'
        )
        + GAME.format(first=first.isoformat(timespec="seconds"))
    )
    assert run("db", "upgrade", config=config).returncode == 0
    assert run("start", "g1", config=config).returncode == 0
    log_path = tmp_path / "serve.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed in finally)
    server = subprocess.Popen(
        [SNL, "serve", "--config", str(config), "--log-level", "info"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: "receiving LMTP" in log_path.read_text(), WAIT, "LMTP", log_path)
        welcomes = lambda: [  # noqa: E731
            d for d in smtp_sink.delivered if b"Welcome to g1" in d.raw and b"bob@" in d.raw
        ]
        wait_for(lambda: welcomes(), WAIT, "bob's welcome", log_path)
        welcome = email.message_from_bytes(welcomes()[0].raw, policy=email.policy.default)
        body = welcome.get_body(("plain",)).get_content()  # type: ignore[union-attr]
        # bob's orders, then his out-of-office pastes our welcome whole and unquoted, with
        # no auto-reply header (the case: its example block must not count)
        pasted = (
            "From: bob@example.org\r\nTo: snl@example.org\r\nSubject: Re: [g1] Welcome\r\n"
            "Message-ID: <bob-away@example.org>\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"\r\nGAME g1\r\nKEY bob-key-123\r\nDICE 3\r\n\r\nI am away; your mail:\r\n\r\n{body}"
        ).encode()
        client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
        client.login(user, "secret")
        for name in IMAP_FILES:
            client.append("INBOX", _corpus(name))
        client.append("INBOX", _html_names_only())
        client.logout()
        with smtplib.LMTP("127.0.0.1", port, timeout=60) as lmtp:
            for name in LMTP_FILES:
                assert lmtp.sendmail("ann@example.org", ["snl@example.org"], _corpus(name)) == {}
            assert lmtp.sendmail("bob@example.org", ["snl@example.org"], pasted) == {}
            auto = _auto_reply_by_subject()
            assert lmtp.sendmail("cy@example.org", ["snl@example.org"], auto) == {}
        database = tmp_path / "snl.db"

        def settled() -> bool:
            """Every message stored, and none left unread."""
            with sqlite3.connect(database) as db:
                [(stored, unread)] = db.execute(
                    "select count(*), sum(status = 'new') from inbound_messages"
                ).fetchall()
            return bool(stored >= len(IMAP_FILES) + len(LMTP_FILES) + 3 and unread == 0)

        wait_for(settled, WAIT, "every message read", log_path)
        server.terminate()
        assert server.wait(WAIT) == 0
    finally:
        if server.poll() is None:
            server.kill()
        log.close()
    with sqlite3.connect(tmp_path / "snl.db") as db:
        orders = db.execute(
            "select p.name, o.dice, o.trapdoor from order_sets o join players p "
            "on p.id = o.player_id order by o.id"
        ).fetchall()
        statuses = db.execute("select status, error from inbound_messages order by id").fetchall()
    by_player: dict[str, set[tuple[str, int | None]]] = {}
    for name, dice, nomination in orders:
        by_player.setdefault(name, set()).add((dice, nomination))
    # every one of ann's messages gave her new DICE 2 and nothing quoted; bob's DICE 3 stands
    # and the welcome's example (DICE 4, TRAPDOOR 12) never counted; cy's auto-reply is ignored
    assert by_player == {"ann": {("2", None)}, "bob": {("3", None)}}, (orders, statuses)
    assert sum(1 for _name, _d, _n in orders if _name == "ann") == 1 + len(IMAP_FILES) + len(
        LMTP_FILES
    ), statuses
    assert any(s == "ignored" and "auto-reply" in (e or "") for s, e in statuses), statuses
    text = log_path.read_text()
    assert "Traceback" not in text, text[-3000:]
