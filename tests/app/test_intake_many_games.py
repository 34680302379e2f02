"""A batch of mail for many games (issue 23: hosting thousands of games, whose players'
orders come in together before a shared deadline). The games a batch's messages name are
found and locked at once, and each message's look-ups in them (seats, names, dice of the
set, the open round, the seats the referee gave) read ahead for all of them at once
(``snl_pbem.app.ahead``): the statements a batch runs do not grow with the games it
touches. Each message still sees what it would see alone (R1: every order counts once, for
the round open in its game when it came; R6: a die once per set of six turns)."""

from __future__ import annotations

import contextlib
import email
import email.policy
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from mailhelpers import T0
from mailhelpers import one_batch as batch
from sqlalchemy import event, select, text

from snl_pbem.app import ahead
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import process_batch
from snl_pbem.app.intake.store import store_many
from snl_pbem.config import Config, load_config
from snl_pbem.store import Database, Game, OrderRecord, OutboxMessage, Player, Round

REFEREE_KEY = "referee-key-0123456789"
GAMES = 6


def config_of(db: Database, folder: Path) -> Config:
    """``GAMES`` games, g0..g5, two players each (p0.gN and p1.gN), started."""
    lines = [
        'timezone = "UTC"',
        "[database]",
        f'url = "{db.url}"',
        "[mail]",
        'address = "snl@example.org"',
        'referee = "ref@example.org"',
        f'referee_key = "{REFEREE_KEY}"',
        "replies_per_hour = 100",
    ]
    for g in range(GAMES):
        lines += [
            "[[games]]",
            f'id = "g{g}"',
            'board = { snakes = { "47" = 26 }, ladders = { "4" = 14 } }',
            'first_deadline = "2030-01-04T18:00"',
            'round_length = "3d"',
            "players = [",
            *(
                f'  {{ name = "p{p}", email = "p{p}.g{g}@example.org", key = "key-{p}-g{g}-123" }},'
                for p in range(2)
            ),
            "]",
        ]
    path = folder / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    config = load_config(path)
    sync_games(db, config, T0)
    for g in range(GAMES):
        start_game(db, config, f"g{g}", T0)
    return config


@pytest.fixture
def games(db: Database, tmp_path: Path) -> Config:
    return config_of(db, tmp_path)


def order(g: int, p: int, body: str, tag: str, subject: str | None = None) -> bytes:
    """Player p of game g's message: the game in its subject (``[gN]``), or as given."""
    return (
        f"From: p{p}.g{g}@example.org\r\nTo: snl@example.org\r\n"
        f"Subject: {subject if subject is not None else f'[g{g}] orders'}\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\nKEY key-{p}-g{g}-123\r\n{body}\r\n"
    ).encode()


def orders(db: Database) -> list[tuple[str, str, int, str]]:
    """(game, player, round, dice) of every order set, in the order they were written."""
    with db.transaction() as s:
        rows = s.execute(
            select(Game.name, Player.name, Round.number, OrderRecord.dice)
            .join(Player, Player.id == OrderRecord.player_id)
            .join(Round, Round.id == OrderRecord.round_id)
            .join(Game, Game.id == Round.game_id)
            .order_by(OrderRecord.id)
        ).all()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def acks(db: Database) -> dict[str, str]:
    """Each acknowledgement's text, by its recipient (the latest one)."""
    with db.transaction() as s:
        rows = s.execute(
            select(OutboxMessage.recipient, OutboxMessage.message)
            .where(OutboxMessage.kind == "ack")
            .order_by(OutboxMessage.id)
        ).all()
    found = {}
    for to, raw in rows:
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        found[to] = msg.get_content()
    return found


def statements_by_table(db: Database, run) -> Counter[str]:
    """The SELECTs ``run()`` makes, by the table they read first."""
    seen: Counter[str] = Counter()

    def counted(_conn, _cursor, statement: str, *_args) -> None:
        found = re.match(r"\s*SELECT\b.*?\bFROM\s+\"?(\w+)", statement, re.S | re.I)
        if found is not None:
            seen[found.group(1)] += 1

    event.listen(db.engine, "before_cursor_execute", counted)
    try:
        run()
    finally:
        event.remove(db.engine, "before_cursor_execute", counted)
    return seen


def test_a_batch_reads_the_games_it_names_at_once(db: Database, games: Config) -> None:
    """A batch of orders for two games and one for all six run the same statements: the
    games, their seats, names, dice, rounds and REPLACEs are read once for the batch, not
    once a game (a batch for 100 games cost 8 times a batch for one). Every order is applied
    in its own game and answered to its own player."""
    two = statements_by_table(
        db,
        lambda: batch(
            db, games, *(order(g, p, "DICE 2", f"a{g}{p}") for g in (0, 1) for p in (0, 1))
        ),
    )
    six = statements_by_table(
        db,
        lambda: batch(
            db, games, *(order(g, p, "DICE 3", f"b{g}{p}") for g in range(6) for p in (0, 1))
        ),
    )
    assert six == two
    assert six["players"] and six["rounds"], six  # (counted at all)
    for table in ("games", "players", "signups", "turn_results", "rounds", "audit_log"):
        assert six[table] <= 2, (table, six)  # (games: found, then locked)
    written = orders(db)
    assert written[:4] == [
        ("g0", "p0", 1, "2"),
        ("g0", "p1", 1, "2"),
        ("g1", "p0", 1, "2"),
        ("g1", "p1", 1, "2"),
    ]
    assert written[4:] == [(f"g{g}", f"p{p}", 1, "3") for g in range(6) for p in (0, 1)]
    texts = acks(db)
    assert len(texts) == 12
    assert (
        "Hello p1," in texts["p1.g4@example.org"]
        and "[g4]" not in texts["p1.g4@example.org"].split("\n")[0]
    )


def test_each_message_finds_its_game_as_it_would_alone(db: Database, games: Config) -> None:
    """A GAME line, a subject whose first [tag] is not a game here (a gateway's
    [EXTERNAL]), and a message for a game that does not exist, in one batch with orders for
    other games: each is found (or refused) as it would be alone, and the orders of the
    others are applied."""
    statuses = batch(
        db,
        games,
        order(0, 0, "GAME g0\nDICE 4", "c0", subject="orders"),
        order(3, 1, "DICE 5", "c1", subject="[EXTERNAL] [g3] orders"),
        order(2, 0, "GAME nosuch\nDICE 6", "c2", subject="orders"),
        order(5, 1, "DICE 1", "c3"),
    )
    assert statuses == ["processed", "processed", "rejected", "processed"]
    assert orders(db) == [("g0", "p0", 1, "4"), ("g3", "p1", 1, "5"), ("g5", "p1", 1, "1")]


def test_a_round_closed_mid_batch_and_the_dice_of_each_games_set(
    db: Database, games: Config
) -> None:
    """g0 has played a turn (p0 used his 3), g1 none. In one batch: p0 of g0 sends 3
    again (not valid: a die once per set of six, R6), p0 of g1 sends 3 (valid); the
    referee then closes g1's round 1, and p1 of g1's orders after it go to round 2 while
    p1 of g0's still go to g0's round 2. Read ahead for both games at once, each message
    still sees its own game's set and its round as they stand when it is processed."""
    assert batch(db, games, order(0, 0, "DICE 3", "d0")) == ["processed"]
    referee = (
        "From: ref@example.org\r\nTo: snl@example.org\r\nSubject: close\r\n"
        f"Message-ID: <close-g0@example.org>\r\n\r\nKEY {REFEREE_KEY}\r\nCLOSE ROUND g0\r\n"
    ).encode()
    assert batch(db, games, referee) == ["processed"]
    close_g1 = referee.replace(b"g0", b"g1")
    statuses = batch(
        db,
        games,
        order(0, 0, "DICE 3", "e0"),
        order(1, 0, "DICE 3", "e1"),
        close_g1,
        order(1, 1, "DICE 2", "e2"),
        order(0, 1, "DICE 2", "e3"),
    )
    assert statuses == ["processed"] * 5
    assert orders(db)[1:] == [
        ("g0", "p0", 2, "3"),
        ("g1", "p0", 1, "3"),
        ("g1", "p1", 2, "2"),
        ("g0", "p1", 2, "2"),
    ]
    texts = acks(db)
    assert "NOT VALID" in texts["p0.g0@example.org"]
    assert "NOT VALID" not in texts["p0.g1@example.org"]
    assert "Round 2" in texts["p1.g1@example.org"]


def stranger(tag: str) -> bytes:
    """Mail of no command from someone who plays nowhere (spam to the game's address)."""
    return (
        "From: stranger@example.net\r\nTo: snl@example.org\r\nSubject: [g5] hello\r\n"
        f"Message-ID: <{tag}@example.net>\r\n\r\nBuy things\r\n"
    ).encode()


def test_mail_of_no_command_keeps_what_the_batch_read_ahead(db: Database, games: Config) -> None:
    """A stranger's mail with no command at the head of a batch is answered as before,
    and the orders after it still find their seats read ahead: the batch reads what it
    would without it (until it was read anew around every keyless message, and the batch
    then read each game's seats again, message by message)."""
    alone = statements_by_table(
        db,
        lambda: batch(
            db, games, *(order(g, p, "DICE 2", f"f{g}{p}") for g in range(6) for p in (0, 1))
        ),
    )
    spammed = statements_by_table(
        db,
        lambda: batch(
            db,
            games,
            stranger("s1"),
            *(order(g, p, "DICE 3", f"h{g}{p}") for g in range(6) for p in (0, 1)),
        ),
    )
    for table in ("signups", "turn_results", "rounds", "audit_log"):
        assert spammed[table] == alone[table], (table, alone, spammed)
    assert spammed["players"] <= alone["players"] + 1  # (the stranger's refusal: who is it)
    assert len(orders(db)) == 24


def test_a_message_found_by_its_sender_is_locked_with_the_named_ones(
    db: Database, games: Config
) -> None:
    """A message that names no game is for its sender's one running game: that game is
    locked with those the batch's other messages name, in one statement at the batch's
    start (locked at the message, after the others, two batches could each hold a game the
    other waits for). Each message is for the game it would be alone: the GAME line before
    the subject, the first [id] of the subject that is a game, else the sender's."""
    locks: list[str] = []

    def noted(_conn, _cursor, statement: str, *_args) -> None:
        if re.match(r"\s*SELECT\b.*?\bFROM\s+games\b.*ORDER BY games\.id", statement, re.S):
            locks.append(statement)

    event.listen(db.engine, "before_cursor_execute", noted)
    try:
        statuses = batch(
            db,
            games,
            order(0, 0, "GAME g0\nDICE 4", "m1", subject="[g1] orders"),
            order(2, 1, "DICE 5", "m2", subject="orders"),
            order(3, 0, "DICE 6", "m3", subject="[g4] orders"),
            stranger("m4"),
            order(3, 1, "DICE 1", "m5"),
            order(5, 0, "DICE 2", "m6", subject="[zz] [g5] [g1]"),
        )
    finally:
        event.remove(db.engine, "before_cursor_execute", noted)
    assert len(locks) == 1, locks
    assert statuses == ["processed", "processed", "rejected", "rejected", "processed", "processed"]
    assert orders(db) == [
        ("g0", "p0", 1, "4"),
        ("g2", "p1", 1, "5"),
        ("g3", "p1", 1, "1"),
        ("g5", "p0", 1, "2"),
    ]


def stored_apart(
    db: Database, config: Config, **batches: tuple[bytes, ...]
) -> dict[str, list[int]]:
    """Each batch's messages stored in one transaction: their ids, by the batch's name."""
    return {
        name: [
            r.inbound_id
            for r, _ in store_many(db, config, [(raw, T0, "t", None, None, None) for raw in raws])
        ]
        for name, raws in batches.items()
    }


def at_once(db: Database, runs: dict[str, Callable[[], object]], hook: Callable[..., None]) -> None:
    """Each of ``runs`` in a thread of its name, all at once, ``hook`` after each statement."""
    event.listen(db.engine, "after_cursor_execute", hook)
    threads = [threading.Thread(target=run, name=name) for name, run in runs.items()]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        event.remove(db.engine, "after_cursor_execute", hook)


def test_two_batches_naming_the_same_games_never_wait_in_a_circle(
    db: Database, games: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL, two servers' batches at once: A holds a message for g2 found by its
    sender, then one for g1; B one for g2, then one for g1 found by its sender. Each
    locks its games in one statement, in the order of their ids, so one waits for the
    other's commit; locked message by message, A's first lock and B's were g1 and g2, each
    then waiting for the other's (PostgreSQL's deadlock detection, a second, then every
    message written again). Each order is applied once."""
    if db.is_sqlite:
        pytest.skip("SQLite's writers take turns for its one write lock")
    stored = stored_apart(
        db,
        games,
        A=(order(2, 0, "DICE 1", "a1", subject="o"), order(1, 0, "DICE 1", "a2")),
        B=(order(2, 1, "DICE 2", "b1"), order(1, 1, "DICE 2", "b2", subject="o")),
    )
    both_locked = threading.Barrier(2, timeout=3)  # (broken when one waits for the other)

    def after_first_lock(_conn, _cursor, statement: str, *_args) -> None:
        name = threading.current_thread().name
        if name in stored and "FOR UPDATE" in statement and "FROM games" in statement:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_locked.wait()

    runs = {name: partial(process_batch, db, games, ids) for name, ids in stored.items()}
    with caplog.at_level(logging.INFO, logger="snl_pbem.intake"):
        at_once(db, runs, after_first_lock)
    assert not any("deadlock" in r.getMessage().lower() for r in caplog.records)
    assert not any("a savepoint each" in r.getMessage() for r in caplog.records)
    assert sorted(orders(db)) == [
        ("g1", "p0", 1, "1"),
        ("g1", "p1", 1, "2"),
        ("g2", "p0", 1, "1"),
        ("g2", "p1", 1, "2"),
    ]


def test_a_read_ahead_that_fails_costs_the_batch_its_speed_only(
    db: Database, games: Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should reading the batch's games ahead fail (a deadlock the database broke, say),
    the batch is written again with a savepoint each, where each message finds and locks
    its own game as it would alone: every order is still applied once."""

    def fails(*_args: object) -> None:
        raise RuntimeError("read ahead failed")

    monkeypatch.setattr(ahead, "games", fails)
    with caplog.at_level(logging.INFO, logger="snl_pbem.intake"):
        statuses = batch(db, games, *(order(g, 0, "DICE 5", f"r{g}") for g in range(3)))
    assert statuses == ["processed"] * 3
    assert orders(db) == [(f"g{g}", "p0", 1, "5") for g in range(3)]
    assert any("could not be read ahead" in r.getMessage() for r in caplog.records)
    assert not any("could not be committed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("words", ["OBSERVE g1", f"KEY {REFEREE_KEY}\r\nPAUSE g1"])
def test_a_batch_whose_words_lock_a_game_locks_its_games_in_message_order(
    db: Database, games: Config, caplog: pytest.LogCaptureFixture, words: str
) -> None:
    """PostgreSQL: words that lock a game as they run (a stranger's OBSERVE, the referee's
    PAUSE) would lock it after the games the batch locked at its start. A = [those words
    for g1, an order for g2], B = [orders for g1 and g2], at once: had A locked g2 first,
    B would hold g1 and wait for g2 while A's words waited for g1. A batch with such words
    is not read ahead: it locks each game at its message, g1 then g2, as B does."""
    if db.is_sqlite:
        pytest.skip("SQLite's writers take turns for its one write lock")
    head = (
        "From: ref@example.org\r\nTo: snl@example.org\r\nSubject: words\r\n"
        f"Message-ID: <w0@example.org>\r\n\r\n{words}\r\n"
    ).encode()
    stored = stored_apart(
        db,
        games,
        A=(head, order(2, 0, "DICE 1", "w1")),
        B=(order(1, 1, "DICE 2", "w2"), order(2, 1, "DICE 2", "w3")),
    )
    a_locked = threading.Event()

    def b_waits() -> None:  # (until B waits for a lock A holds: 30 s at most)
        with db.engine.connect() as watcher:
            for _ in range(300):
                if watcher.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")):
                    return
                time.sleep(0.1)

    def after_lock(_conn, _cursor, statement: str, *_args) -> None:
        first = threading.current_thread().name == "A" and not a_locked.is_set()
        if first and "FOR UPDATE" in statement and "FROM games" in statement:
            a_locked.set()
            b_waits()  # A goes on holding its first game, B waiting for it

    def run(name: str) -> None:
        if name == "B":
            a_locked.wait(30)
        process_batch(db, games, stored[name])

    with caplog.at_level(logging.INFO, logger="snl_pbem.intake"):
        at_once(db, {name: partial(run, name) for name in stored}, after_lock)
    assert a_locked.is_set()
    assert not any("deadlock" in r.getMessage().lower() for r in caplog.records)
    applied = [("g2", "p0", 1, "1"), ("g2", "p1", 1, "2")]
    if "PAUSE" not in words:  # (paused by A first, g1 takes no orders: B waited for A)
        applied.insert(0, ("g1", "p1", 1, "2"))
    assert sorted(orders(db)) == applied
