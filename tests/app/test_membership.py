"""Joining, leaving, absences, keys, addresses and observers by mail (issue 15), on SQLite
and PostgreSQL, through ``ingest`` with mail as clients write it."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mailhelpers import code_in, key_in, mail_to
from sqlalchemy import func, select

from snl_pbem.app import codes, observers, seats, signup
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.referee import status
from snl_pbem.app.rounds import close_round
from snl_pbem.app.schedule import send_reminders
from snl_pbem.config import Config, load_config
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.keys import verify_key
from snl_pbem.mail.parse import order_key_given
from snl_pbem.store import (
    AuditEntry,
    Confirmation,
    Database,
    Game,
    OrderRecord,
    OutboxMessage,
    Player,
    RoundTally,
    Signup,
)

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)

CONFIG = """
timezone = "Europe/London"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"

[[games]]
id = "open4"
title = "Open four"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "open"
min_players = 2
max_players = 3
starts = "when_full"

[[games]]
id = "appr"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "approval"
max_players = 4

[[games]]
id = "cl"
ruleset = "classic"
board = "classic-sheet"
first_deadline = "2029-12-04T18:00"
round_length = "1d"
signup = "open"
max_players = 2
starts = "when_full"

[[games]]
id = "g1"
title = "Running game"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "open"
auto_replace = {auto}
max_absence = "10d"
max_absent = 1
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-123" }},
]
"""


def gmail(sender: str, body: str, subject: str = "hello", tag: str = "") -> bytes:
    """A Gmail message: multipart/alternative, text and HTML, quoted-printable."""
    tag = tag or f"{abs(hash((sender, body, subject)))}"
    html = '<div dir=3D"ltr">' + "<br>".join(body.splitlines()) + "</div>"
    return (
        f"MIME-Version: 1.0\r\nDate: Sat, 1 Dec 2029 12:00:00 +0000\r\n"
        f"Message-ID: <CA{tag}@mail.gmail.com>\r\nSubject: {subject}\r\n"
        f"From: Someone <{sender}>\r\nTo: snl@example.org\r\n"
        f'Content-Type: multipart/alternative; boundary="000000000000b1"\r\n\r\n'
        f'--000000000000b1\r\nContent-Type: text/plain; charset="UTF-8"\r\n\r\n'
        f'{body}\r\n\r\n--000000000000b1\r\nContent-Type: text/html; charset="UTF-8"\r\n'
        f"Content-Transfer-Encoding: quoted-printable\r\n\r\n{html}\r\n\r\n"
        f"--000000000000b1--\r\n"
    ).encode()


def outlook_de(sender: str, body: str, quoted: str, tag: str) -> bytes:
    """Outlook in German: the reply above an unmarked quote under "Von: ... Gesendet:"."""
    text = (
        f"{body}\r\n\r\nMit freundlichen Grüßen\r\n\r\n"
        "________________________________\r\nVon: Snakes and Ladders <snl@example.org>\r\n"
        "Gesendet: Samstag, 1. Dezember 2029 12:00\r\nAn: Spieler\r\n"
        f"Betreff: Your confirmation code\r\n\r\n{quoted}\r\n"
    )
    return (
        f"From: Spieler <{sender}>\r\nTo: snl@example.org\r\n"
        f"Subject: AW: [open4] Your confirmation code\r\nMessage-ID: <{tag}@outlook.com>\r\n"
        "Content-Language: de-DE\r\nMIME-Version: 1.0\r\n"
        'Content-Type: text/plain; charset="utf-8"\r\nContent-Transfer-Encoding: 8bit\r\n'
        f"\r\n{text}"
    ).encode()


@pytest.fixture
def life(db: Database, tmp_path: Path) -> Callable[..., Config]:
    def build(auto: bool = False) -> Config:
        path = tmp_path / "config.toml"
        path.write_text(CONFIG.format(url=db.url, auto=str(auto).lower()))
        config = load_config(path)
        sync_games(db, config, T0)
        start_game(db, config, "g1", T0)
        return config

    return build


class Mailer:
    """Sends mail to the intake, one unique message each, and reads what came back."""

    def __init__(self, db: Database, config: Config) -> None:
        self.db, self.config, self.n = db, config, 0

    def send(self, sender: str, body: str, at: datetime = T0, subject: str = "hello") -> str:
        self.n += 1
        result = ingest(
            self.db, self.config, gmail(sender, body, subject, f"m{self.n}"), at, "test"
        )
        return f"{result.status}: {result.detail}"

    def last(self, who: str, kind: str | None = None) -> str:
        with self.db.transaction() as s:
            query = select(OutboxMessage).where(OutboxMessage.recipient == who)
            if kind is not None:
                query = query.where(OutboxMessage.kind == kind)
            row = s.scalars(query.order_by(OutboxMessage.id.desc())).first()
            return re.sub(r"=\r?\n", "", row.message.decode()) if row else ""

    def code(self, who: str) -> str:
        text = self.last(who, "code") or self.last(who, "address-code")
        return code_in(text)

    def join(self, who: str, game: str, name: str) -> str:
        self.send(who, f"JOIN {game} {name}")
        return self.send(who, f"CONFIRM {self.code(who)}")


def flat(text: str) -> str:
    """A message's text with its line breaks as spaces (templates wrap long lines)."""
    return " ".join(text.split())


def orders_in(db: Database) -> list[OrderRecord]:
    with db.transaction() as s:
        return list(s.scalars(select(OrderRecord).order_by(OrderRecord.id)))


def count(db: Database, model: type, *where: object) -> int:
    with db.transaction() as s:
        return s.scalar(select(func.count()).select_from(model).where(*where)) or 0


def player(db: Database, game: str, name: str) -> Player:
    with db.transaction() as s:
        return s.scalar(select(Player).join(Game).where(Game.name == game, Player.name == name))


def game_state(db: Database, game: str) -> str:
    with db.transaction() as s:
        return s.scalar(select(Game.state).where(Game.name == game))


# -- joining ------------------------------------------------------------------------------


def test_list_shows_forming_and_running_games_and_nothing_private(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    assert m.send("stranger@example.net", "LIST").startswith("processed")
    text = m.last("stranger@example.net", "list")
    assert "open4: Open four" in text and "Forming: 0 players of 3, starts when full" in text
    assert "JOIN open4 Your Name" in text and "OBSERVE open4" in text
    assert "appr" in text and "the referee approves each player" in text
    assert "g1: Running game" in text and "Running: round 1" in text
    assert "standby list" in text  # a running game's joiners wait for a seat
    for secret in ("ann@example.org", "ann-key", "ladder", "snake"):
        assert secret not in text


def test_join_is_confirmed_from_the_address_and_the_game_starts_when_full(db, life) -> None:
    """JOIN mails a code to the sender; only a reply from that address with the code
    seats them; the third seat fills the game and it starts (welcomes with keys); a
    fourth joiner goes on the standby list."""
    m = Mailer(db, life())
    assert m.send("x1@example.net", "JOIN open4 Xavier Lee") == "processed: join: code sent"
    code = m.code("x1@example.net")
    assert count(db, Player, Player.name == "Xavier Lee") == 0  # nothing before the code
    # the code from another address does nothing (and counts as a wrong code there)
    assert "wrong or expired code" in m.send("evil@example.net", f"CONFIRM {code}")
    assert count(db, Signup) == 0
    # Outlook in German, replying above the quoted code mail: read, and the quote is not
    raw = outlook_de("x1@example.net", f"CONFIRM {code}", m.last("x1@example.net"), "o1")
    result = ingest(db, m.config, raw, T0, "test")
    assert result.detail == "joined open4 as Xavier Lee: seated", result
    assert "You have a seat in Open four" in m.last("x1@example.net")
    # replayed: the code works once
    assert "wrong or expired code" in m.send("x1@example.net", f"CONFIRM {code}")
    assert count(db, Player, Player.name == "Xavier Lee") == 1
    assert m.join("x2@example.net", "open4", "Yo") == "processed: joined open4 as Yo: seated"
    assert game_state(db, "open4") == "new"
    assert m.join("x3@example.net", "open4", "Zed") == (
        "processed: joined open4 as Zed: seated; the game started"
    )
    assert game_state(db, "open4") == "running"
    welcomes = mail_to(db, "x1@example.net", "welcome")
    assert len(welcomes) == 1 and "Your order key" in welcomes[0]
    key = key_in(welcomes[0])
    assert verify_key(key, player(db, "open4", "Xavier Lee").order_key_hash, _salt(db, "open4"))
    assert m.join("x4@example.net", "open4", "Wu") == "processed: joined open4 as Wu: standby"
    assert "standby list" in m.last("x4@example.net")
    with db.transaction() as s:
        assert s.scalar(select(Signup.state).where(Signup.name == "Wu")) == "standby"


def _salt(db: Database, game: str) -> str:
    with db.transaction() as s:
        return s.scalar(select(Game.order_key_salt).where(Game.name == game))


def test_join_refusals_say_why(db, life) -> None:
    m = Mailer(db, life())
    m.join("x1@example.net", "open4", "Xavier")
    cases = [
        ("JOIN nosuch Ann", "There is no game 'nosuch' on this server"),
        ("JOIN open4", "Write your name after the game"),
        ("JOIN open4 xavier", "The name 'xavier' is taken in open4"),
        ("JOIN open4 ann@x.org", "A name is 1 to 20 plain letters"),
        ("JOIN open4 \u0430nn", "A name is 1 to 20 plain letters"),  # a Cyrillic a
        ("JOIN open4 Referee", "cannot be a player's name"),
        ("JOIN open4 Averyveryverylongname", "A name is 1 to 20 plain letters"),
    ]
    for i, (body, reason) in enumerate(cases):  # one sender each: 5 answers a day per address
        m.send(f"y{i}@example.net", body)
        assert reason in m.last(f"y{i}@example.net"), body
    m.send("x1@example.net", "JOIN open4 Another")
    assert "already signed up" not in m.last("x1@example.net")
    assert "x1@example.net already plays in open4" in m.last("x1@example.net")
    # the game's own address is never read (a loop), and the referee's cannot join
    assert m.send("snl@example.org", "JOIN open4 Loop").startswith("ignored")
    assert "join refused" in m.send("ref@example.org", "JOIN open4 Referee")


def test_join_flood_from_one_address_and_from_many(db, life) -> None:
    """JOINs from one address under ten names get the address's codes for the day (each
    name its own code: a forged name must not keep the owner from hers), then one note
    an hour naming the code that waits and why no more come; none is voided. Many
    addresses get at most MAX_UNCONFIRMED_PER_GAME codes an hour for one game, the rest
    a short reason, and older codes are never voided (issue 20: the cap used to evict
    the oldest)."""
    m = Mailer(db, life())
    for i in range(10):
        m.send("flood@example.net", f"JOIN open4 Flood{i}")
    assert len(mail_to(db, "flood@example.net", "code")) == 3
    (note,) = mail_to(db, "flood@example.net", "guest-note")  # once an hour
    assert "too many codes today" in flat(note) and "as 'Flood0'" in flat(note)
    assert "already" in m.send("flood@example.net", "JOIN open4 Flood2")
    assert (
        count(
            db,
            Confirmation,
            Confirmation.email == "flood@example.net",
            Confirmation.used_at.is_(None),
        )
        == 3
    )
    m.send("early@example.com", "JOIN appr Early")
    early = m.code("early@example.com")
    for i in range(40):  # forty domains: the per-domain bound does not hold them
        m.send(f"bot{i}@bot{i}.example", f"JOIN appr Bot{i}")
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "appr"))
        assert signup.join_codes_sent(s, game, T0) == signup.MAX_UNCONFIRMED_PER_GAME
    assert "in an hour" in flat(m.last("bot39@bot39.example", "guest-note"))
    assert count(db, OutboxMessage, OutboxMessage.kind == "code") <= 1 + 30
    # the code sent before the flood still seats its owner
    assert m.send("early@example.com", f"CONFIRM {early}").endswith("waiting")
    # an hour later a real joiner gets through (the caps are windows, not bans)
    later = T0 + timedelta(hours=2)
    assert m.send("real@example.net", "JOIN appr Real", at=later) == "processed: join: code sent"


def test_guessed_codes_never_match_and_only_slow_the_code(db, life) -> None:
    """Guesses from the address fail (a guess from another address is not even looked
    at); after CODE_TRIES_PER_HOUR in an hour the code rests (not checked, not counted)
    but is never void: the owner's right code works once the hour has passed. Answers to
    guesses are two notes an hour at most."""
    m = Mailer(db, life())
    m.send("x1@example.net", "JOIN open4 Xavier")
    code = m.code("x1@example.net")
    for i in range(codes.CODE_TRIES_PER_HOUR + 1):  # the last one finds it resting
        assert "processed: confirm:" in m.send("x1@example.net", f"CONFIRM {i:04d}-zzzz")
    assert len(mail_to(db, "x1@example.net", "guest-note")) == 3  # 2 wrong, 1 resting
    assert "not checked" in m.send("x1@example.net", f"CONFIRM {code}")
    assert count(db, Signup) == 0
    later = T0 + codes.CODE_TRY_WINDOW + timedelta(seconds=1)
    assert m.send("x1@example.net", f"CONFIRM {code}", at=later) == (
        "processed: joined open4 as Xavier: seated"
    )


def test_approval_waits_for_the_referee(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    assert m.join("x1@example.net", "appr", "Xavier") == "processed: joined appr as Xavier: waiting"
    assert "The referee approves each player" in m.last("x1@example.net")
    note = flat(m.last("ref@example.org", "referee-notice"))
    assert "Subject: [appr] Xavier asks to join" in note and "APPROVE appr Xavier" in note
    m.join("x2@example.net", "appr", "Yo")
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "appr").with_for_update())
        line = signup.approve_signup(s, config, game, "xavier", T0, actor="ref", via="cli")
        assert line == "appr: Xavier approved, seated"
        assert "Yo's sign-up refused" in signup.refuse_signup(
            s, config, game, "Yo", T0, actor="ref", via="cli"
        )
        with pytest.raises(NotFound, match="no sign-up named 'Nobody'"):
            signup.approve_signup(s, config, game, "Nobody", T0, actor="ref", via="cli")
    assert "The referee approved your sign-up" in m.last("x1@example.net")
    assert "did not accept your sign-up" in m.last("x2@example.net")
    assert count(db, Player, Player.name == "Xavier") == 1
    assert count(db, Player, Player.name == "Yo") == 0
    with db.transaction() as s:
        rows = s.execute(select(AuditEntry.action, AuditEntry.actor, AuditEntry.via)).all()
    assert ("signup-seated", "ref", "cli") in rows and ("signup-refused", "ref", "cli") in rows


def test_a_game_starts_at_its_time_with_enough_players_else_waits(db, tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        CONFIG.format(url=db.url, auto="false").replace(
            'starts = "when_full"', 'starts = "2029-12-02T09:00"', 1
        )
    )
    config = load_config(path)
    sync_games(db, config, T0)
    m = Mailer(db, config)
    m.join("x1@example.net", "open4", "Xavier")
    due = datetime(2029, 12, 2, 9, 0, tzinfo=UTC)
    assert signup.start_due_games(db, config, due - timedelta(seconds=1)) == []
    assert signup.start_due_games(db, config, due) == ["open4: waiting for players (1/2)"]
    assert signup.start_due_games(db, config, due + timedelta(minutes=1)) == []
    notes = mail_to(db, "ref@example.org", "referee-notice")
    assert len(notes) == 1 and "has 1 of the 2 players it needs" in flat(notes[0])
    m.join("x2@example.net", "open4", "Yo")
    later = due + timedelta(hours=1)
    assert signup.start_due_games(db, config, later) == [
        "open4: started at its start time with 2 players"
    ]
    assert game_state(db, "open4") == "running"
    # round 1's deadline (4 Dec 18:00) was more than half a round away: kept
    (row,) = status(db, "open4")
    assert row.deadline == datetime(2029, 12, 4, 18, 0, tzinfo=UTC)
    assert len(mail_to(db, "ref@example.org", "referee-notice")) == 1  # told once


def test_a_late_start_moves_the_schedule(db, tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        CONFIG.format(url=db.url, auto="false").replace(
            'starts = "when_full"', 'starts = "2029-12-02T09:00"', 1
        )
    )
    config = load_config(path)
    sync_games(db, config, T0)
    m = Mailer(db, config)
    m.join("x1@example.net", "open4", "Xavier")
    m.join("x2@example.net", "open4", "Yo")
    late = datetime(2029, 12, 4, 12, 0, tzinfo=UTC)  # 6 hours before round 1's deadline
    signup.start_due_games(db, config, late)
    (row,) = status(db, "open4")
    assert row.deadline == late + timedelta(days=3)  # one round from the start
    assert (
        "Round 1 deadline: Fri 7 Dec 2029 12:00 GMT" in mail_to(db, "x1@example.net", "welcome")[0]
    )


# -- leaving -----------------------------------------------------------------------------


def test_resign_takes_two_messages_and_the_seat_plays_on(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    reply = m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nRESIGN")
    assert reply == "processed: resign: confirmation asked"
    assert "RESIGN g1" in m.last("bob@example.org") and player(db, "g1", "bob").active
    # a stray RESIGN naming another game does nothing
    m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nRESIGN open4")
    assert "your key is for g1" in m.last("bob@example.org") and player(db, "g1", "bob").active
    assert m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nRESIGN g1") == "processed: resigned"
    bob = player(db, "g1", "bob")
    assert not bob.active and bob.resigned_at is not None and bob.order_key_hash is None
    assert "bob resigned" in m.last("ref@example.org", "referee-notice")
    # the old key is refused from now on; orders from it change nothing
    assert m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nDICE 3").startswith("rejected")
    assert count(db, OrderRecord) == 0
    outcome = close_round(db, "g1", T0 + timedelta(days=4), config=config)
    assert outcome is not None and outcome.round == 1
    with db.transaction() as s:
        nmr = s.scalar(select(RoundTally.nmr))
    assert nmr["bob"].endswith("(resigned)")
    assert mail_to(db, "bob@example.org", "report") == []  # no more mail to a resigned seat
    assert len(mail_to(db, "ann@example.org", "report")) == 1
    # a config reload does not bring the resigned player back
    sync_games(db, config, T0 + timedelta(days=4))
    assert not player(db, "g1", "bob").active


def test_replace_gives_the_seat_with_its_history_and_a_new_key(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nDICE 5")
    close_round(db, "g1", T0 + timedelta(days=4), config=config)
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "g1").with_for_update())
        with pytest.raises(LifecycleError, match="already plays in g1 \\(as ann\\)"):
            seats.replace_seat(
                s, config, game, "bob", "ann@example.org", T0, actor="referee", via="cli"
            )
        with pytest.raises(LifecycleError, match="one of the game's own addresses"):
            seats.replace_seat(
                s, config, game, "bob", "SNL@example.org", T0, actor="referee", via="cli"
            )
        line = seats.replace_seat(
            s, config, game, "bob", "dora@example.net", T0, actor="referee", via="cli"
        )
    assert line == "g1: bob's seat now belongs to dora@example.net (a new key was mailed)"
    seat = mail_to(db, "dora@example.net", "welcome")[0]
    (row,) = status(db, "g1")
    position = next(p.position for p in row.players if p.name == "bob")
    assert "You now play bob's seat" in seat and f"space {position}" in seat
    new_key = key_in(seat)
    assert "no longer works" in m.last("bob@example.org")  # the old address is told
    assert m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nDICE 1").startswith("rejected")
    # the new holder plays on with the seat's set of six: 5 is used already (R6)
    m.send(
        "dora@example.net", f"GAME g1\nKEY {new_key}\nDICE 5", at=T0 + timedelta(days=4, hours=1)
    )
    assert "5" in m.last("dora@example.net", "ack") and "already used" in m.last(
        "dora@example.net", "ack"
    )
    with db.transaction() as s:
        entry = s.scalar(select(AuditEntry).where(AuditEntry.action == "replace"))
        assert (entry.actor, entry.via, entry.detail["new"]) == (
            "referee",
            "cli",
            "dora@example.net",
        )
    # the config no longer governs the seat's address: a reload keeps dora
    sync_games(db, config, T0)
    assert player(db, "g1", "bob").email == "dora@example.net"


def test_auto_replace_seats_the_first_standby_at_the_next_round(db, life) -> None:
    config = life(auto=True)
    m = Mailer(db, config)
    assert m.join("w1@example.net", "g1", "Wu") == "processed: joined g1 as Wu: standby"
    m.join("w2@example.net", "g1", "Vi")
    m.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN")
    m.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN g1")
    close_round(db, "g1", T0 + timedelta(days=4), config=config)
    cy = player(db, "g1", "cy")
    assert cy.active and cy.email == "w1@example.net"  # the seat keeps the name cy
    assert "You now play cy's seat" in mail_to(db, "w1@example.net", "welcome")[0]
    assert mail_to(db, "w2@example.net", "welcome") == []  # the second waits on
    with db.transaction() as s:
        states = dict(s.execute(select(Signup.name, Signup.state)).all())
    assert states == {"Wu": "seated", "Vi": "standby"}
    assert "Wu took cy's seat" in m.last("ref@example.org", "referee-notice")


# -- absences, keys, addresses -----------------------------------------------------------


def test_absent_players_are_not_reminded_and_not_counted(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    too_far = "GAME g1\nKEY ann-key-123\nABSENT UNTIL 2029-12-30"
    assert "absent refused" in m.send("ann@example.org", too_far)
    assert "at most 10 days" in m.last("ann@example.org")
    assert m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nABSENT UNTIL 2029-12-08") == (
        "processed: absent"
    )
    assert "You are absent until Sat 8 Dec 2029 23:59 GMT" in m.last("ann@example.org")
    # max_absent = 1: a second player may not be absent at the same time
    assert "absent refused" in m.send(
        "bob@example.org", "GAME g1\nKEY bob-key-123\nABSENT UNTIL 2029-12-05"
    )
    assert "already absent" in m.last("bob@example.org")
    assert send_reminders(db, config, "g1", 1, T0 + timedelta(days=2)) == 2  # bob, cy
    assert mail_to(db, "ann@example.org", "reminder") == []
    close_round(db, "g1", T0 + timedelta(days=4), config=config)
    with db.transaction() as s:
        nmr = s.scalar(select(RoundTally.nmr))
    assert nmr["ann"].endswith("(absent, excused)") and "excused" not in nmr["bob"]
    summary = mail_to(db, "ref@example.org", "referee-summary")[0]
    assert "ann: absent until Sat 8 Dec 2029 23:59 GMT" in summary
    assert (
        m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nABSENT OFF") == "processed: absent off"
    )
    assert player(db, "g1", "ann").absent_until is None


def test_new_key_goes_only_to_the_registered_address(db, life) -> None:
    m = Mailer(db, life())
    # sent from another address with ann's key: the new key still goes to ann's own address
    assert "new key sent" in m.send("thief@example.net", "GAME g1\nKEY ann-key-123\nNEW KEY")
    assert m.last("thief@example.net") == ""
    text = m.last("ann@example.org", "membership")
    key = key_in(text)
    with db.transaction() as s:
        row = s.scalars(select(OutboxMessage).where(OutboxMessage.kind == "membership")).all()[-1]
        assert row.secret  # scrubbed once sent
    assert m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nSTATUS").startswith("rejected")
    assert m.send("ann@example.org", f"GAME g1\nKEY {key}\nSTATUS") == "processed: status sent"


def test_address_moves_only_with_a_code_from_the_new_address_and_the_key(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    for target, why in (
        ("snl@example.org", "one of the game's own addresses"),
        ("bob@example.org", "belongs to another player"),
        ("ann@example.org", "already your address"),
    ):
        m.send("ann@example.org", f"GAME g1\nKEY ann-key-123\nADDRESS {target}")
        assert why in m.last("ann@example.org"), target
    assert m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nADDRESS ann@new.example") == (
        "processed: address: code sent"
    )
    code = m.code("ann@new.example")
    # the code alone (no key) from the new address does nothing
    assert "wrong or expired" in m.send("ann@new.example", f"CONFIRM {code}")
    # the key and code from a third address do nothing either
    m.send("evil@example.net", f"GAME g1\nKEY ann-key-123\nCONFIRM {code}")
    assert player(db, "g1", "ann").email == "ann@example.org"
    m.send("ann@new.example", f"GAME g1\nKEY ann-key-123\nCONFIRM {code}")
    assert player(db, "g1", "ann").email == "ann@new.example"
    assert "now goes to ann@new.example" in m.last("ann@example.org")
    assert "now comes to this address" in m.last("ann@new.example")
    sync_games(db, config, T0)  # the config still says ann@example.org: not applied
    assert player(db, "g1", "ann").email == "ann@new.example"


# -- history, observers ------------------------------------------------------------------


def test_history_shows_positions_only(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nDICE 3\nTRAPDOOR 40")
    close_round(db, "g1", T0 + timedelta(days=4), config=config)
    m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nHISTORY", at=T0 + timedelta(days=4))
    text = m.last("ann@example.org", "membership").split("\r\n\r\n", 1)[1]  # the body
    (row,) = status(db, "g1")
    expected = ", ".join(
        f"{p.name} {p.position}" for p in sorted(row.players, key=lambda p: (-p.position, p.name))
    )
    assert f"Round 1: {expected}" in text and "ann 3" in text
    assert "40" not in text and "DICE" not in text and "trapdoor" not in text.lower()


def test_observers_get_the_public_report_and_can_stop(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    assert m.send("fan@example.net", "OBSERVE g1") == "processed: observe: code sent"
    m.send("fan@example.net", f"CONFIRM {m.code('fan@example.net')}")
    assert "You now follow Running game" in m.last("fan@example.net")
    close_round(db, "g1", T0 + timedelta(days=4), config=config)
    (report,) = mail_to(db, "fan@example.net", "observer-report")
    assert "positions after round 1" in report and "Next: round 2" in report
    assert "Still open" not in report and "KEY" not in report  # nobody's dice, no order form
    assert m.send("fan@example.net", "UNOBSERVE g1") == "processed: unobserved"
    close_round(db, "g1", T0 + timedelta(days=8), config=config)
    assert len(mail_to(db, "fan@example.net", "observer-report")) == 1
    # UNOBSERVE from someone not observing gets no answer (no backscatter)
    assert m.send("other@example.net", "UNOBSERVE g1") == "processed: unobserve: was not observing"
    assert m.last("other@example.net") == ""


def test_a_confirmation_during_a_round_close_is_applied_once(db, life) -> None:
    """A sign-up confirmed while the round closes: the game row lock orders them; the
    standby sign-up exists once, the round closes once, and nobody's orders change."""
    config = life()
    m = Mailer(db, config)
    m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nDICE 4")
    m.send("w1@example.net", "JOIN g1 Wu")
    code = m.code("w1@example.net")
    barrier = threading.Barrier(2)
    results: list[object] = []

    def closer() -> None:
        barrier.wait()
        results.append(close_round(db, "g1", T0 + timedelta(days=4), config=config))

    def joiner() -> None:
        barrier.wait()
        results.append(
            ingest(db, config, gmail("w1@example.net", f"CONFIRM {code}", tag="race"), T0, "t")
        )

    threads = [threading.Thread(target=closer), threading.Thread(target=joiner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count(db, Signup, Signup.name == "Wu") == 1
    assert count(db, RoundTally) == 1
    with db.transaction() as s:
        assert s.scalar(select(Game.rounds_played).where(Game.name == "g1")) == 1
    assert [o.dice for o in orders_in(db)] == ["4"]  # ann's orders, counted once


def test_help_and_the_players_guide_cover_every_command(db, life) -> None:
    """Every command a player may send is in HELP (both rulesets) and in docs/players.md."""
    from snl_pbem.mail.commands import PLAYER_ACTIONS

    guide = (Path(__file__).parents[2] / "docs" / "players.md").read_text()
    m = Mailer(db, life())
    m.send("newcomer@example.net", "HELP")
    help_text = m.last("newcomer@example.net")
    from snl_pbem.mail.render import render

    _, classic_help = render("classic/help.txt.j2", game=None, subject="x")
    for word in sorted(PLAYER_ACTIONS):
        assert f"\n{word}" in help_text, word
        assert f"\n{word}" in classic_help, word
        assert f"`{word}" in guide or f"\n{word} " in guide, word


def test_a_forged_join_does_not_void_the_owners_code(db, life) -> None:
    m = Mailer(db, life())
    m.send("x1@example.net", "JOIN open4 Xavier")
    first = m.code("x1@example.net")
    m.send("x1@example.net", "JOIN open4 Mallory")  # a forger, writing as x1
    assert m.send("x1@example.net", f"CONFIRM {first}") == (
        "processed: joined open4 as Xavier: seated"
    )


def test_a_seat_given_up_before_the_start_goes_to_the_standby_list(db, tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, auto="false").replace('starts = "when_full"', "", 1))
    config = load_config(path)
    sync_games(db, config, T0)
    m = Mailer(db, config)
    for i, name in enumerate(("Xavier", "Yo", "Zed", "Wu")):
        m.join(f"x{i}@example.net", "open4", name)
    assert game_state(db, "open4") == "new"  # no start time: the referee starts it
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "open4").with_for_update())
        xavier = s.scalar(select(Player).where(Player.name == "Xavier"))
        assert not seats.resign(s, config, game, xavier, T0, None)  # asks first
        assert seats.resign(s, config, game, xavier, T0, "open4")
    assert [p.name for p in _seated(db, "open4")] == ["Yo", "Zed", "Wu"]
    assert "You have a seat in" in m.last("x3@example.net")
    assert "Wu from the standby list has it" in flat(m.last("ref@example.org", "referee-notice"))


def _seated(db: Database, game: str) -> list[Player]:
    with db.transaction() as s:
        return list(
            s.scalars(
                select(Player)
                .join(Game)
                .where(Game.name == game, Player.active)
                .order_by(Player.id)
            )
        )


def test_the_classic_game_takes_sign_ups_too(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    m.send("x@example.net", "LIST")
    assert "cl\r\n  classic rules" in m.last("x@example.net", "list")
    m.join("x1@example.net", "cl", "Xavier")
    assert m.join("x2@example.net", "cl", "Yo") == (
        "processed: joined cl as Yo: seated; the game started"
    )
    assert game_state(db, "cl") == "running"
    (welcome,) = mail_to(db, "x2@example.net", "welcome")
    assert "ROLL" in welcome  # the classic game's welcome: the server throws
    close_round(db, "cl", datetime(2029, 12, 4, 18, 0, tzinfo=UTC), config=config)
    assert len(mail_to(db, "x1@example.net", "report")) == 1


# -- the hostile review's cases (each was a reproduction first) -----------------------


def test_an_address_the_server_cannot_seat_never_gets_a_code(db, life) -> None:
    """A From the server could not send to as a player's (a trailing dot, a domain literal,
    non-ASCII) is not answered and never gets on a list; HELP from one is not set aside."""
    m = Mailer(db, life())
    for sender in ("mallory@evil.example.", "mallory@[192.0.2.7]"):
        assert m.send(sender, "JOIN g1 Mal") == (
            "rejected: sign-up commands from an unclear From address"
        )
    raw = "From: jöe@example.org\r\nSubject: hi\r\nMessage-ID: <u1@x>\r\n\r\nLIST\r\n"
    assert ingest(db, m.config, raw.encode(), T0, "t").status == "rejected"
    raw = "From: jöe@example.org\r\nSubject: hi\r\nMessage-ID: <u2@x>\r\n\r\nHELP\r\n"
    assert ingest(db, m.config, raw.encode(), T0, "t").status == "processed"
    assert count(db, Confirmation) == 0 and count(db, OutboxMessage) == 3  # the 3 welcomes


def test_a_standby_who_cannot_take_the_seat_is_passed_over(db, life) -> None:
    """auto_replace: a standby whose address has become a player's since (a config edit)
    is taken off the list and the referee told; the round closes, the next standby sits."""
    config = life(auto=True)
    m = Mailer(db, config)
    m.join("w1@example.net", "g1", "Wu")
    m.join("w2@example.net", "g1", "Vi")
    with db.transaction() as s:  # ann's address edited to Wu's (as a config edit would)
        s.scalar(select(Player).where(Player.name == "ann")).email = "w1@example.net"
    m.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN")
    m.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN g1")
    outcome = close_round(db, "g1", T0 + timedelta(days=4), config=config)
    assert outcome is not None and outcome.next_round == 2
    assert player(db, "g1", "cy").email == "w2@example.net"
    with db.transaction() as s:
        assert dict(s.execute(select(Signup.name, Signup.state)).all()) == {
            "Wu": "refused",
            "Vi": "seated",
        }
    notes = [flat(n) for n in mail_to(db, "ref@example.org", "referee-notice")]
    assert any("Wu could not take a seat" in n and "already plays in g1" in n for n in notes)


def test_one_failing_close_does_not_stop_the_catch_up(db, life, monkeypatch) -> None:
    from snl_pbem.runners import scheduler as scheduler_module

    config = life()
    m = Mailer(db, config)
    m.join("x1@example.net", "cl", "Xavier")
    m.join("x2@example.net", "cl", "Yo")  # cl starts (round 1 due 4 Dec 18:00, as g1's)
    real = scheduler_module.close_with_backup

    def broken(db_, game_id, *args, **kwargs):
        if game_id == "g1":
            raise RuntimeError("g1 is broken")
        return real(db_, game_id, *args, **kwargs)

    monkeypatch.setattr(scheduler_module, "close_with_backup", broken)
    later = T0 + timedelta(days=4)
    rounds = scheduler_module.RoundScheduler(db, config, clock=lambda: later)
    outcomes = rounds.catch_up()
    assert [o.game for o in outcomes] == ["cl"]
    assert rounds.failures == ["RuntimeError: g1 is broken"]


def test_new_key_is_always_mailed_once_per_message_and_not_right_after_a_move(db, life) -> None:
    m = Mailer(db, life())
    for i in range(21):  # 21 acknowledged orders this hour: the replies' budget is spent
        m.send("ann@example.org", f"GAME g1\nKEY ann-key-123\nDICE {1 + i % 6}")
    assert "new key sent" in m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nNEW KEY\nNEW KEY")
    keys = [order_key_given(t) for t in mail_to(db, "ann@example.org", "membership")]
    assert len([k for k in keys if k]) == 1  # one key mailed, and it was mailed
    key = next(k for k in keys if k)
    m.send("ann@example.org", f"GAME g1\nKEY {key}\nADDRESS ann@new.example")
    m.send("ann@new.example", f"GAME g1\nKEY {key}\nCONFIRM {m.code('ann@new.example')}")
    assert m.send("ann@new.example", f"GAME g1\nKEY {key}\nNEW KEY") == (
        "processed: new key refused"
    )
    assert "address changed less than 3 days ago" in flat(m.last("ann@new.example"))


def test_an_absence_far_off_loses_no_orders(db, life) -> None:
    m = Mailer(db, life())
    reply = m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nDICE 4\nABSENT UNTIL 9999-12-31")
    assert reply.startswith("processed: absent refused") and "orders for round 1" in reply
    assert [o.dice for o in orders_in(db)] == ["4"]


def test_keyless_mail_does_one_thing_and_echoes_nothing(db, life) -> None:
    """One game action per keyless message (the second CONFIRM is not read, so it is not
    a wrong try); an answer to a stranger never quotes their lines (no relay of spam)."""
    m = Mailer(db, life())
    m.send("x1@example.net", "JOIN open4 Xavier")
    code = m.code("x1@example.net")
    reply = m.send("x1@example.net", f"CONFIRM aaaa-aaaa\nCONFIRM {code}")
    assert reply == "processed: confirm: wrong or expired code; CONFIRM: not done (one per message)"
    with db.transaction() as s:
        assert s.scalar(select(Confirmation.wrong)) == 1
    m.send("victim@example.net", "JOIN nosuch X\nDICE 1 CHEAP-PILLS-at-http://spam.example/buy")
    assert "CHEAP-PILLS" not in m.last("victim@example.net")


def test_orders_without_a_key_are_answered_beside_an_open_command(db, life) -> None:
    m = Mailer(db, life())
    reply = m.send("ann@example.org", "GAME g1\nDICE 4\nTRAPDOOR 40\nOBSERVE g1")
    assert reply == "rejected: observe: code sent; authentication failed (no KEY line)"
    assert "had no order key" in flat(m.last("ann@example.org", "guest-notice"))
    assert orders_in(db) == []


def test_a_code_sent_before_sign_up_closed_no_longer_seats(db, tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, auto="false"))
    config = load_config(path)
    sync_games(db, config, T0)
    m = Mailer(db, config)
    m.send("x1@example.net", "JOIN open4 Xavier")
    code = m.code("x1@example.net")
    closed = CONFIG.format(url=db.url, auto="false").replace(
        'signup = "open"\nmin_players = 2\nmax_players = 3\nstarts = "when_full"',
        'players = [{ name = "zz", email = "zz@example.org" }]',
        1,
    )
    assert closed != CONFIG.format(url=db.url, auto="false")
    path.write_text(closed)
    m.config = load_config(path)
    assert "join refused" in m.send("x1@example.net", f"CONFIRM {code}")
    assert "no longer takes sign-ups" in m.last("x1@example.net")


def test_resign_needs_a_second_message_even_when_written_twice(db, life) -> None:
    m = Mailer(db, life())
    reply = m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nRESIGN\nRESIGN g1\nNEW KEY")
    assert reply == "processed: resign: confirmation asked; new key sent"
    assert player(db, "g1", "bob").active
    assert order_key_given(m.last("bob@example.org", "membership")) is not None


def test_observers_are_capped(db, life, monkeypatch) -> None:
    monkeypatch.setattr(observers, "MAX_OBSERVERS_PER_GAME", 1)
    m = Mailer(db, life())
    m.send("fan1@example.net", "OBSERVE g1")
    m.send("fan1@example.net", f"CONFIRM {m.code('fan1@example.net')}")
    assert m.send("fan2@example.net", "OBSERVE g1") == "processed: observe: refused (full)"


def test_a_config_player_is_told_to_ask_the_referee_before_the_start(db, tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, auto="false"))
    config = load_config(path)
    sync_games(db, config, T0)  # g1 not started: its config players hold their keys
    m = Mailer(db, config)
    assert m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nRESIGN") == (
        "processed: resign refused"
    )
    assert "ask them to take you off" in flat(m.last("ann@example.org"))
    # still so after a NEW KEY made the seat the mail's (a reload would add them back)
    m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nNEW KEY")
    key = key_in(m.last("bob@example.org", "membership"))
    reply = m.send("bob@example.org", f"GAME g1\nKEY {key}\nRESIGN\nABSENT UNTIL 2029-12-05")
    assert reply.startswith("processed: resign refused")
    assert player(db, "g1", "bob") is not None


def test_start_from_the_command_line_moves_a_late_sign_up_game(db, life) -> None:
    config = life()
    m = Mailer(db, config)
    m.join("x1@example.net", "appr", "Xavier")
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "appr").with_for_update())
        signup.approve_signup(s, config, game, "Xavier", T0, actor="ref", via="cli")
    late = datetime(2029, 12, 10, 12, 0, tzinfo=UTC)  # first_deadline (4 Dec) long past
    report = start_game(db, config, "appr", late)
    assert report.round_deadline == late + timedelta(days=3)


def test_an_early_close_does_not_wait_for_a_resigned_seat(db, tmp_path) -> None:
    from snl_pbem.app.schedule import all_in_close_at

    path = tmp_path / "config.toml"
    text = CONFIG.format(url=db.url, auto="false").replace(
        "max_absent = 1", "max_absent = 1\nclose_when_all_in = true"
    )
    path.write_text(text)
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    m = Mailer(db, config)
    m.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN")
    m.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN g1")
    m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nDICE 4")
    assert all_in_close_at(db, "g1", T0) is None
    m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nDICE 2")
    assert all_in_close_at(db, "g1", T0) is not None


def test_replace_before_the_start_tells_the_new_holder(db, tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, auto="false"))
    config = load_config(path)
    sync_games(db, config, T0)
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "g1").with_for_update())
        line = seats.replace_seat(
            s, config, game, "bob", "dora@example.net", T0, actor="referee", via="cli"
        )
    assert "key comes with the welcome at the start" in line
    assert "You have a seat in Running game" in flat(
        mail_to(db, "dora@example.net", "membership")[0]
    )
    start_game(db, config, "g1", T0)
    (welcome,) = mail_to(db, "dora@example.net", "welcome")
    key = key_in(welcome)
    assert verify_key(key, player(db, "g1", "bob").order_key_hash, _salt(db, "g1"))


def test_careless_sign_up_lines_get_an_answer(db, life) -> None:
    m = Mailer(db, life())
    assert m.send("x1@example.net", "JOIN") == "rejected: sign-up line not understood"
    assert "JOIN needs the game and your name" in flat(m.last("x1@example.net"))
    # an observer code sent with GAME and KEY lines out of habit still works
    m.send("ann@example.org", "OBSERVE g1")
    reply = m.send(
        "ann@example.org", f"GAME g1\nKEY ann-key-123\nCONFIRM {m.code('ann@example.org')}"
    )
    assert reply == "processed: observing"
    # one-digit months and days, and an hour, in ABSENT UNTIL
    assert m.send("bob@example.org", "GAME g1\nKEY bob-key-123\nABSENT UNTIL 2029-12-5 9:30") == (
        "processed: absent"
    )
    assert "until Wed 5 Dec 2029 09:30 GMT" in flat(m.last("bob@example.org"))


def test_the_confirm_that_fills_a_game_is_in_the_typed_result(db, life) -> None:
    """serve plans round 1 at once from the ingest result's ``started`` (issue 22): the
    CONFIRM that fills the game sets it, for that game; a CONFIRM that only seats does not."""
    m = Mailer(db, life())
    m.join("x1@example.net", "open4", "Xavier")
    m.send("x2@example.net", "JOIN open4 Yo")
    seated = ingest(
        db,
        m.config,
        gmail("x2@example.net", f"CONFIRM {m.code('x2@example.net')}", "c", "c2"),
        T0,
        "test",
    )
    assert seated.detail == "joined open4 as Yo: seated" and not seated.started
    m.send("x3@example.net", "JOIN open4 Zed")
    filled = ingest(
        db,
        m.config,
        gmail("x3@example.net", f"CONFIRM {m.code('x3@example.net')}", "c", "c3"),
        T0,
        "test",
    )
    assert filled.detail == "joined open4 as Zed: seated; the game started"
    assert filled.started and filled.game == "open4"
