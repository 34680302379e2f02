"""A seat given to someone else (issue 21), on SQLite and PostgreSQL: each holder is
greeted by the name they go by, never by the seat's old name, and the new holder is told
the game's state (paused or running, the open round and its deadline)."""

from __future__ import annotations

import email
import email.policy
import re
from datetime import timedelta
from pathlib import Path

from mailhelpers import T0
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.lookup import game_by_name
from snl_pbem.app.schedule import send_reminders
from snl_pbem.app.seats import replace_seat
from snl_pbem.app.views import in_game
from snl_pbem.config import Config, load_config
from snl_pbem.store import Database, OutboxMessage, Signup

REFEREE_KEY = "ref-key-0123456789"
DEADLINE = "Fri 4 Jan 2030 18:00 GMT"
CONFIG = """
timezone = "Europe/London"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{key}"

[[games]]
id = "g1"
title = "Seat game"
board = "standard"
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "Dan Dare", email = "dan@example.org", key = "dan-key-123" }},
]
"""


def setup(db: Database, tmp_path: Path, *, start: bool) -> Config:
    """Game g1 (ann and Dan Dare), and Dora on its standby list."""
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, key=REFEREE_KEY))
    config = load_config(path)
    sync_games(db, config, T0)
    if start:
        start_game(db, config, "g1", T0)
    with db.transaction() as s:
        game = game_by_name(s, "g1")
        s.add(
            Signup(
                game_id=game.id,
                name="Dora",
                email="dora@example.net",
                state="standby",
                created_at=T0,
            )
        )
    return config


def send(db: Database, config: Config, sender: str, body: str, tag: str, at=T0) -> str:
    raw = (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: [g1] mail\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()
    return ingest(db, config, raw, at, "t").detail


def referee(db: Database, config: Config, *lines: str, tag: str, at=T0) -> str:
    send(db, config, "ref@example.org", "\n".join((f"KEY {REFEREE_KEY}", *lines)), tag, at)
    return last(db, "ref@example.org")


def last(db: Database, to: str) -> str:
    """The newest message to ``to``: its subject and text, the lines joined."""
    with db.transaction() as s:
        raw = s.scalars(
            select(OutboxMessage.message)
            .where(OutboxMessage.recipient == to)
            .order_by(OutboxMessage.id.desc())
            .limit(1)
        ).one()
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    return f"{msg['Subject']}\n" + " ".join(msg.get_content().split())  # type: ignore[attr-defined]


def test_the_new_holder_is_greeted_by_their_name_and_told_the_games_state(
    db: Database, tmp_path: Path
) -> None:
    config = setup(db, tmp_path, start=True)
    assert send(db, config, "dan@example.org", "KEY dan-key-123\nDICE 3", "d1") == (
        "orders for round 1 (valid)"
    )
    reply = referee(db, config, "PAUSE g1", "REPLACE g1 Dan Dare dora@example.net", tag="r1")
    assert (
        "Done: g1: Dan Dare's seat now belongs to dora@example.net, who joined as Dora, (a new "
        "key was mailed)"
    ) in " ".join(reply.split())

    dora = last(db, "dora@example.net")
    assert dora.startswith("[g1] You take over a seat: your order key\nHello Dora, ")
    assert "Dan Dare," not in dora.split("\n")[1][:20]  # not greeted by the seat's old name
    assert "You now play Dan Dare's seat in Seat game (postal rules)." in dora
    assert "The seat keeps its name, Dan Dare, by which the reports and our mail" in dora
    assert (
        "The game is paused: no orders are accepted until the referee resumes it. Round 1 is "
        f"open; its deadline, {DEADLINE}, is stopped until then, and you will be told the new "
        "one."
    ) in dora
    assert (
        "The seat already has orders in for round 1, from its previous player: they count "
        "unless you send your own."
    ) in dora
    assert "dice 3" not in dora.lower() and "DICE 3" not in dora
    dan = last(db, "dan@example.org")
    assert dan.startswith("[g1] Your seat has a new player\nHello Dan Dare, ")

    # running again; the seat goes to an address the referee names alone: no name to use
    later = T0 + timedelta(hours=1)
    referee(db, config, "RESUME g1", "REPLACE g1 Dan Dare eve@example.net", tag="r2", at=later)
    eve = last(db, "eve@example.net")
    assert eve.split("\n")[1].startswith("Hello, You now play Dan Dare's seat")
    assert (
        "The game is running: round 1 (one turn) is open until its deadline, "
        "Fri 4 Jan 2030 19:00 GMT."
    ) in eve
    dora = last(db, "dora@example.net")  # told by the name she joined with, not the seat's
    assert dora.startswith("[g1] Your seat has a new player\nHello Dora, ")

    referee(db, config, "REPLACE g1 Dan Dare fay@example.net", tag="r3", at=later)
    eve = last(db, "eve@example.net")
    assert eve.startswith("[g1] Your seat has a new player\nHello, The referee has given")


def test_a_seat_given_before_the_start_greets_its_new_holder(db: Database, tmp_path: Path) -> None:
    config = setup(db, tmp_path, start=False)
    line = in_game(
        db,
        config,
        "g1",
        T0,
        lambda s, c, g, now: replace_seat(
            s, c, g, "Dan Dare", "dora@example.net", now, actor="referee", via="cli"
        ),
    )
    assert line == (
        "g1: Dan Dare's seat now belongs to dora@example.net, who joined as Dora, (told; the "
        "key comes with the welcome at the start)"
    )
    dora = last(db, "dora@example.net")
    assert dora.startswith("[g1] You have a seat: Dan Dare's\nHello Dora, You have a seat in")
    assert "The game has not started yet. When it starts you will get a welcome" in dora
    in_game(
        db,
        config,
        "g1",
        T0,
        lambda s, c, g, now: replace_seat(
            s, c, g, "Dan Dare", "gil@example.net", now, actor="referee", via="cli"
        ),
    )
    assert last(db, "gil@example.net").split("\n")[1].startswith("Hello, You have a seat")
    assert last(db, "dora@example.net").startswith("[g1] Your seat has a new player\nHello Dora, ")
    # the welcome at the start greets its holder, Gil (no name of his own), and names the
    # seat; ann's is as ever
    start_game(db, config, "g1", T0)
    gil = last(db, "gil@example.net")
    assert gil.startswith("[g1] Welcome to Seat game: your order key\nHello, You play the seat ")
    assert "You play the seat Dan Dare: the reports and our mail name it so." in gil
    ann = last(db, "ann@example.org")
    assert ann.split("\n")[1].startswith("Hello ann, You are playing") and "seat" not in ann


def test_notices_after_a_replace_greet_the_holder_by_their_own_name(
    db: Database, tmp_path: Path
) -> None:
    """The rollback's notice (and the second close's) to a seat's new holder greets them as
    they joined, Dora, not as the seat, Dan Dare; the seat's first holder, ann, by hers."""
    config = setup(db, tmp_path, start=True)
    referee(db, config, "REPLACE g1 Dan Dare dora@example.net", tag="r1")
    referee(db, config, "CLOSE ROUND g1", "ROLLBACK g1", tag="r2")
    dora = last(db, "dora@example.net")
    assert dora.startswith("[g1] Round 1 reopened: its report no longer counts\nHello Dora, ")
    assert last(db, "ann@example.org").split("\n")[1].startswith("Hello ann, ")
    referee(db, config, "CLOSE ROUND g1", tag="r3")
    with db.transaction() as s:
        again = s.scalars(
            select(OutboxMessage.message).where(OutboxMessage.recipient == "dora@example.net")
        ).all()
    closed_again = [m for m in again if b"closed again" in m]
    assert len(closed_again) == 1 and b"Hello Dora," in closed_again[0]


def test_every_mail_to_a_new_holder_greets_them_by_their_own_name(
    db: Database, tmp_path: Path
) -> None:
    """After a REPLACE, the outbox greets the seat's holder by the name they joined with in
    every mail (ack, STATUS, reminder, report), while the standings still name the seat;
    ann, never replaced, is greeted as before; an address given alone gets "Hello,"."""
    config = setup(db, tmp_path, start=True)
    referee(db, config, "REPLACE g1 Dan Dare dora@example.net", tag="r1")
    key = re.search(r"Your order key is (\S+)", last(db, "dora@example.net"))
    assert key is not None
    send(db, config, "dora@example.net", f"KEY {key[1]}\nSTATUS", "s1")
    assert last(db, "dora@example.net").split("\n")[1].startswith("Hello Dora, ")
    assert send_reminders(db, config, "g1", 1, T0 + timedelta(days=2)) == 2
    assert "Hello Dora, " in last(db, "dora@example.net")
    assert last(db, "ann@example.org").split("\n")[1].startswith("Hello ann, ")
    send(db, config, "dora@example.net", f"KEY {key[1]}\nDICE 4", "d1")
    ack = last(db, "dora@example.net")
    assert ack.split("\n")[1].startswith("Hello Dora, ") and "Dan Dare," not in ack
    referee(db, config, "CLOSE ROUND g1", tag="r2")
    report = last(db, "dora@example.net")
    assert report.startswith("[g1] Round 1") and "\nHello Dora, " in report
    assert "Dan Dare" in report and "<- you" in report  # the standings name the seat
    assert "\nHello ann, " in last(db, "ann@example.org")

    referee(db, config, "REPLACE g1 Dan Dare eve@example.net", tag="r3")
    referee(db, config, "CLOSE ROUND g1", tag="r4")
    assert "\nHello, " in last(db, "eve@example.net")  # no name of her own: not the seat's
