"""A whole game's life cycle through ``serve`` by real mail, as players and a referee meet
it (issue 15): players find the game with LIST and sign up by JOIN and CONFIRM, through
LMTP and a Dovecot mailbox at once; the game starts when full; one player is away for
two rounds (ABSENT); one resigns (two messages) and the standby takes the seat at the
next round (auto_replace); the referee extends, pauses, resumes and closes rounds by
mail with the referee key. Every report's positions equal offline adjudication of the
orders sent, and the private record says who was excused.

Each step waits for the mail it causes (an event), never for time: the deadlines are a
day away, and the referee closes each round by mail.
"""

from __future__ import annotations

import email
import email.policy
import json
import re
import smtplib
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import game_rules
from imapclient import IMAPClient
from mailhelpers import code_in, key_in
from sqlalchemy import select
from test_serve import SNL, WAIT, run, wait_for

from snl_pbem.config import load_config
from snl_pbem.offline.replay import Replay, outcome_json, run_replay
from snl_pbem.rules import OrderSet
from snl_pbem.store import AuditEntry, Database, Game, RoundTally

REFEREE_KEY = "ref-key-0123456789"
PLAYERS = ("ann", "bob", "cy", "dee")


def config_text(folder: Path, dovecot, user: str, sink, lmtp_port: int, first: datetime) -> str:
    return f"""
timezone = "UTC"
[database]
url = "sqlite:///{folder / "snl.db"}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{REFEREE_KEY}"
replies_per_hour = 50
[mail.imap]
host = "{dovecot.host}"
port = {dovecot.port}
tls = "none"
username = "{user}"
password = "secret"
poll_interval = "1s"
[mail.lmtp]
host = "127.0.0.1"
port = {lmtp_port}
[mail.smtp]
host = "{sink.host}"
port = {sink.port}
tls = "none"

[[games]]
id = "club"
title = "The Club Game"
board = {{ ladders = {{ "4" = 14, "9" = 31 }}, snakes = {{ "17" = 7 }} }}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "1d"
signup = "open"
max_players = 4
starts = "when_full"
auto_replace = true
max_absence = "10d"
"""


class Post:
    """The players' and the referee's mail: sent alternately by LMTP and into the Dovecot
    mailbox (as an MTA delivers, and as mail waits for the poller), read from the sink."""

    def __init__(self, dovecot, user: str, lmtp_port: int, sink) -> None:
        self.dovecot, self.user, self.port, self.sink = dovecot, user, lmtp_port, sink
        self.n = 0

    def send(self, sender: str, body: str, subject: str = "Re: [club]") -> None:
        self.n += 1
        raw = (
            f"From: {sender.split('@')[0].title()} <{sender}>\r\nTo: snl@example.org\r\n"
            f"Subject: {subject}\r\nMessage-ID: <life{self.n}.{sender}>\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
            f"{body}\r\n\r\nThanks!\r\n-- \r\nsent from my phone\r\n"
        ).encode()
        if self.n % 2:
            with smtplib.LMTP("127.0.0.1", self.port, timeout=60) as lmtp:
                assert lmtp.sendmail(sender, ["snl@example.org"], raw) == {}
        else:
            client = IMAPClient(self.dovecot.host, port=self.dovecot.port, ssl=False, timeout=10)
            client.login(self.user, "secret")
            client.append("INBOX", raw)
            client.logout()

    def to(self, who: str) -> list[email.message.EmailMessage]:
        return [
            email.message_from_bytes(d.raw, policy=email.policy.default)
            for d in list(self.sink.delivered)
            if d.recipient == who
        ]

    def texts(self, who: str, subject: str) -> list[str]:
        return [
            m.get_body(("plain",)).get_content()
            for m in self.to(who)
            if subject in str(m["Subject"])
        ]

    def wait(self, who: str, subject: str, count: int, log: Path) -> list[str]:
        wait_for(
            lambda: len(self.texts(who, subject)) >= count,
            WAIT,
            f"{count} mail(s) '{subject}' to {who}",
            log,
        )
        return self.texts(who, subject)


def report_positions(text: str) -> dict[str, int]:
    return {
        name: int(pos) for name, pos in re.findall(r"^\s+\d+=?\s+(\w+)\s+(\d+)", text, re.MULTILINE)
    }


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_whole_life_cycle_through_serve(
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
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(path), "--log-level", "info"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    post = Post(dovecot, user, lmtp_port, smtp_sink)
    try:
        wait_for(lambda: "receiving LMTP" in log.read_text(), WAIT, "the server", log)
        # -- sign-up: LIST, JOIN, CONFIRM; full at four; a fifth on standby ---------------
        post.send("ann@example.org", "LIST", subject="what games are there?")
        (listing,) = post.wait("ann@example.org", "the games on this server", 1, log)
        assert "club: The Club Game" in listing and "JOIN club Your Name" in listing
        keys: dict[str, str] = {}
        for name in (*PLAYERS, "eve"):
            who = f"{name}@example.org"
            post.send(who, f"JOIN club {name}", subject="sign me up")
            (code_mail,) = post.wait(who, "Your confirmation code", 1, log)
            code = code_in(code_mail)
            # the reply quotes the code mail below, as a phone's mail app does
            quoted = "\r\n".join("> " + line for line in code_mail.splitlines())
            post.send(who, f"CONFIRM {code}\r\n\r\nOn Sat, the referee wrote:\r\n{quoted}")
            if name == "eve":
                (standby,) = post.wait(who, "You are on the standby list", 1, log)
                assert "no free seat" in standby
                continue
            post.wait(who, "You have a seat", 1, log)
        for name in PLAYERS:
            (welcome,) = post.wait(f"{name}@example.org", "Welcome", 1, log)
            keys[name] = key_in(welcome)

        def orders(name: str, die: int, number: int, key: str | None = None) -> None:
            post.send(
                f"{name}@example.org",
                f"GAME club\r\nKEY {key or keys[name]}\r\nROUND {number}\r\nDICE {die}",
            )

        def referee(*lines: str) -> None:
            post.send("ref@example.org", "\r\n".join(["GAME club", f"KEY {REFEREE_KEY}", *lines]))

        sent: list[dict[str, OrderSet | None]] = []
        # -- round 1: everyone plays ----------------------------------------------------
        r1 = {"ann": 4, "bob": 2, "cy": 3, "dee": 5}
        for name, die in r1.items():
            orders(name, die, 1)
        for name in r1:
            post.wait(f"{name}@example.org", "Orders received for round 1", 1, log)
        sent.append({n: OrderSet((d,), None) for n, d in r1.items()})
        referee("CLOSE ROUND club")
        for name in PLAYERS:
            post.wait(f"{name}@example.org", "Round 1 report", 1, log)
        # -- round 2: cy away, dee resigns; the referee extends, pauses, resumes ------------
        away = (datetime.now(UTC) + timedelta(days=5)).date().isoformat()
        post.send("cy@example.org", f"GAME club\r\nKEY {keys['cy']}\r\nABSENT UNTIL {away}")
        post.wait("cy@example.org", "About your request", 1, log)
        post.send("dee@example.org", f"GAME club\r\nKEY {keys['dee']}\r\nRESIGN")
        post.wait("dee@example.org", "About your request", 1, log)
        post.send("dee@example.org", f"GAME club\r\nKEY {keys['dee']}\r\nRESIGN club")
        post.wait("dee@example.org", "About your request", 2, log)
        orders("ann", 1, 2)
        orders("bob", 6, 2)
        for name in ("ann", "bob"):
            post.wait(f"{name}@example.org", "Orders received for round 2", 1, log)
        sent.append({"ann": OrderSet((1,), None), "bob": OrderSet((6,), None)})
        referee("EXTEND club BY 1d")
        for name in ("ann", "bob", "cy"):
            post.wait(f"{name}@example.org", "Round 2 deadline now", 1, log)
        referee("PAUSE club")
        for name in ("ann", "bob", "cy"):
            post.wait(f"{name}@example.org", "Round 2", 2, log)
        referee("RESUME club")
        for name in ("ann", "bob", "cy"):
            post.wait(f"{name}@example.org", "Round 2", 3, log)
        assert post.to("dee@example.org")[-1]["Subject"] == "[club] About your request"
        referee("CLOSE ROUND club")
        for name in ("ann", "bob", "cy"):
            post.wait(f"{name}@example.org", "Round 2 report", 1, log)
        # auto_replace: eve, first on standby, now plays dee's seat
        (seat,) = post.wait("eve@example.org", "You take over a seat", 1, log)
        eve_key = key_in(seat)
        # -- round 3: eve plays dee's seat; cy still away --------------------------------
        orders("ann", 2, 3)
        orders("bob", 5, 3)
        post.send("eve@example.org", f"GAME club\r\nKEY {eve_key}\r\nROUND 3\r\nDICE 6")
        post.send("dee@example.org", f"GAME club\r\nKEY {keys['dee']}\r\nROUND 3\r\nDICE 3")
        for who in ("ann", "bob", "eve"):
            post.wait(f"{who}@example.org", "Orders received for round 3", 1, log)
        sent.append(
            {"ann": OrderSet((2,), None), "bob": OrderSet((5,), None), "dee": OrderSet((6,), None)}
        )
        referee("CLOSE ROUND club")
        reports = {
            name: post.wait(f"{name}@example.org", "Round 3 report", 1, log)[0]
            for name in ("ann", "bob", "cy", "eve")
        }
        shown = run("status", "club", config=path)
        assert shown.returncode == 0 and "round 4" in shown.stdout, shown.stdout
    finally:
        server.terminate()
        server.wait(WAIT)
    text = log.read_text()
    assert "Traceback" not in text and "set aside" not in text, text[-4000:]
    # the reports say what offline adjudication of the same orders says
    db = Database(load_config(path).database_url)
    try:  # the rules the server played by: its stored game's
        with db.transaction() as s:
            rules = game_rules(s.scalars(select(Game).where(Game.name == "club")).one())
    finally:
        db.dispose()
    offline = outcome_json(run_replay(Replay(rules, PLAYERS, tuple(sent))))
    expected = offline["rounds"][-1]["positions"]
    for name, report in reports.items():
        assert report_positions(report) == expected, (name, report)
    # dee's old key bought nothing after the seat changed hands: eve's DICE 6 counted (the
    # offline check above), one acknowledgement went to the seat, and the old key was refused
    assert len(post.texts("eve@example.org", "Orders received for round 3")) == 1
    assert not post.texts("dee@example.org", "Orders received for round 3")
    # the private record: cy excused twice, dee's seat resigned in round 2
    db = Database(load_config(path).database_url)
    try:
        with db.transaction() as s:
            nmr = [json.dumps(t) for t in s.scalars(select(RoundTally.nmr).order_by(RoundTally.id))]
            wrong_keys = list(
                s.scalars(select(AuditEntry.detail).where(AuditEntry.action == "wrong-key"))
            )
            via = {
                tuple(row)
                for row in s.execute(
                    select(AuditEntry.action, AuditEntry.actor, AuditEntry.via).where(
                        AuditEntry.via == "mail"
                    )
                )
            }
    finally:
        db.dispose()
    assert any(d.get("address") == "dee@example.org" for d in wrong_keys), wrong_keys
    assert "absent, excused" in nmr[1] and "absent, excused" in nmr[2], nmr
    assert "resigned" in nmr[1], nmr
    for action in ("extend", "pause", "resume", "close-round"):
        assert (action, "ref@example.org", "mail") in via, (action, via)
    assert {("signup-seated", f"{n}@example.org", "mail") for n in PLAYERS} <= via
    assert ("resign", "dee@example.org", "mail") in via and (
        "absent",
        "cy@example.org",
        "mail",
    ) in via
