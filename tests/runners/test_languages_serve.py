"""A game in three languages through ``serve`` (issue 25): Anna reads English, Bowen
Chinese (the config's players table says so), Chai Thai (she says so by mail: LANGUAGE
th). They play by mail over LMTP (Bowen types his orders full-width, as a Chinese input
method does), ask for HELP and STATUS, and the referee closes each round by mail; a
stranger asks for HELP in Chinese. Each player receives every mail in their language
(``Content-Language``, and no English left in Chinese or Thai but the protocol), no line
is wider than 78 columns, the reports agree on the positions in all three languages, and
another player's name appears only in the standings (R19: nothing else of theirs).

Each step waits for the mail it causes (an event), never for time: the deadlines are a
day away, and the referee closes each round by mail.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import re
import smtplib
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from languagehelpers import english_left
from test_serve import SNL, WAIT, run, wait_for

from snl_pbem.i18n import speaking, width
from snl_pbem.rules.words import joined, tr

REFEREE_KEY = "ref-key-0123456789"
KEYS = {"Anna": "anna-key-123", "Bowen": "bowen-key-123", "Chai": "chai-key-123"}
LANGUAGE = {"Anna": "en", "Bowen": "zh-Hans", "Chai": "th"}


def config_text(folder: Path, sink, lmtp_port: int, first: datetime) -> str:
    return f"""
timezone = "Asia/Bangkok"
[database]
url = "sqlite:///{folder / "snl.db"}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{REFEREE_KEY}"
replies_per_hour = 50
[mail.lmtp]
host = "127.0.0.1"
port = {lmtp_port}
[mail.smtp]
host = "{sink.host}"
port = {sink.port}
tls = "none"

[[games]]
id = "tri"
title = "Three tongues"
board = {{ rows = 2, columns = 6, ladders = {{ "2" = 8 }} }}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "1d"
double_from_round = 2
players = [
  {{ name = "Anna", email = "anna@example.org", key = "{KEYS["Anna"]}" }},
  {{ name = "Bowen", email = "bowen@example.org", key = "{KEYS["Bowen"]}", language = "zh" }},
  {{ name = "Chai", email = "chai@example.org", key = "{KEYS["Chai"]}" }},
]
"""


class Post:
    def __init__(self, port: int, sink) -> None:
        self.port, self.sink, self.n = port, sink, 0

    def send(self, sender: str, body: str, subject: str = "Re: [tri]") -> None:
        self.n += 1
        raw = (
            f"From: <{sender}>\r\nTo: snl@example.org\r\nSubject: {subject}\r\n"
            f"Message-ID: <tri{self.n}@example.net>\r\nMIME-Version: 1.0\r\n"
            'Content-Type: text/plain; charset="utf-8"\r\nContent-Transfer-Encoding: 8bit\r\n'
            f"\r\n{body}\r\n"
        ).encode()
        with smtplib.LMTP("127.0.0.1", self.port, timeout=60) as lmtp:
            assert lmtp.sendmail(sender, ["snl@example.org"], raw) == {}

    def to(self, who: str) -> list[email.message.EmailMessage]:
        return [
            email.message_from_bytes(d.raw, policy=email.policy.default)
            for d in list(self.sink.delivered)
            if d.recipient == who
        ]

    def wait(self, who: str, count: int, log: Path) -> list[email.message.EmailMessage]:
        wait_for(lambda: len(self.to(who)) >= count, WAIT, f"{count} mail(s) to {who}", log)
        return self.to(who)


def text_of(message: email.message.EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def language_of(message: email.message.EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body["Content-Language"] or message["Content-Language"])


def standings(text: str) -> dict[str, int]:
    return {
        name: int(at)
        for name, at in re.findall(r"^\s+\d+=?\s+(Anna|Bowen|Chai)\s+(\d+)", text, re.M)
    }


def orders(name: str, *lines: str) -> str:
    return "\r\n".join(["GAME tri", f"KEY {KEYS[name]}", *lines])


@pytest.mark.slow
def test_a_game_in_three_languages_through_serve(tmp_path: Path, smtp_sink) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        lmtp_port = sock.getsockname()[1]
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    path = tmp_path / "config.toml"
    path.write_text(config_text(tmp_path, smtp_sink, lmtp_port, first))
    assert run("db", "upgrade", config=path).returncode == 0
    started = run("start", "tri", config=path)
    assert started.returncode == 0, started.stderr
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(path), "--log-level", "info"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    post = Post(lmtp_port, smtp_sink)
    sent = {name: 1 for name in KEYS}  # the welcome

    def address(name: str) -> str:
        return f"{name.lower()}@example.org"

    def answered(name: str, body: str, more: int = 1) -> list[email.message.EmailMessage]:
        post.send(address(name), body)
        sent[name] += more
        return post.wait(address(name), sent[name], log)

    try:
        wait_for(lambda: "receiving LMTP" in log.read_text(), WAIT, "the server", log)
        for name in KEYS:
            post.wait(address(name), 1, log)
        # Chai chooses Thai by mail (her welcome came in the game's language, English)
        assert language_of(post.to(address("Chai"))[0]) == "en"
        answered("Chai", orders("Chai", "LANGUAGE th"))
        # round 1: orders (Bowen's typed full-width), HELP and STATUS
        answered("Anna", orders("Anna", "DICE 6"))
        answered("Bowen", "ＧＡＭＥ　ｔｒｉ\r\nＫＥＹ　bowen-key-123\r\nＤＩＣＥ　６")
        answered("Chai", orders("Chai", "DICE 6", "TRAPDOOR 11"))
        for name in KEYS:
            answered(name, orders(name, "HELP"))
            answered(name, orders(name, "STATUS"))
        post.send("x1@example.net", "HELP\r\n请问怎么下指令？", subject="怎么玩")
        (stranger,) = post.wait("x1@example.net", 1, log)
        assert language_of(stranger) == "zh-Hans"
        assert not english_left(text_of(stranger), subject_line=False), text_of(stranger)
        # the referee closes round 1; round 2 (two turns) ends the game
        post.send(
            "ref@example.org", orders("Anna", "CLOSE ROUND tri").replace(KEYS["Anna"], REFEREE_KEY)
        )
        for name in KEYS:
            sent[name] += 1
            post.wait(address(name), sent[name], log)
        answered("Anna", orders("Anna", "ROUND 2", "DICE 5 4"))
        answered("Bowen", orders("Bowen", "ROUND 2", "DICE ５，４"))
        answered("Chai", orders("Chai", "ROUND 2", "DICE 5 4"))
        post.send(
            "ref@example.org", orders("Anna", "CLOSE ROUND tri").replace(KEYS["Anna"], REFEREE_KEY)
        )
        for name in KEYS:
            sent[name] += 1
            post.wait(address(name), sent[name], log)
    finally:
        server.terminate()
        server.wait(timeout=60)

    reports: dict[str, list[dict[str, int]]] = {}
    for name, code in LANGUAGE.items():
        mails = post.to(address(name))
        assert len(mails) >= sent[name], [str(m["Subject"]) for m in mails]
        # everything after Chai's LANGUAGE line is in her language
        for message in mails[1:] if name == "Chai" else mails:
            text, subject = text_of(message), str(message["Subject"])
            assert language_of(message) == code, (name, subject)
            assert "[tri]" in subject, subject
            wide = [line for line in text.splitlines() if width(line) > 78]
            assert not wide, (name, subject, wide)
            named = (*KEYS, "tri", "Three", "tongues")  # the players, the game id and title
            left = english_left(f"{subject}\n{text}", named) if code != "en" else set()
            assert not left, (name, subject, left, text)
            others = [n for n in KEYS if n != name]
            with speaking(code):  # the game's result, as the game-over mail says it
                result = str(tr("a draw between {names}", names=joined(tr(", "), KEYS)))
            for line in text.splitlines():
                if any(other in line for other in others) and result not in line:
                    assert standings(line), f"{name} reads of another player: {line!r}"
        reports[name] = [standings(text_of(m)) for m in mails if standings(text_of(m))]
    assert reports["Anna"] == reports["Bowen"] == reports["Chai"], reports
    # round 2: no TRAPDOOR lines, so each first move's space (11) is everyone's nomination
    # (R16): three of three make it a trapdoor; each falls to 2 below it, climbs the ladder
    # to 8, and the second die (4) ends on the last space, 12: a draw
    assert [r["Anna"] for r in reports["Anna"]] == [6, 12]
    assert all(r == {"Anna": 6, "Bowen": 6, "Chai": 6} for r in reports["Anna"][:1])
