"""A whole scripted game, start to game over, through real SMTP, with the clock fast-forwarded.

Every message each player and the referee receives is checked; the final
result equals offline adjudication of the same orders.
"""

from __future__ import annotations

import email
import email.policy
import random
import re

from helpers import game_rules
from mailhelpers import T0, game_config
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.outbox import drain_outbox
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.offline.replay import Replay, outcome_json, run_replay
from snl_pbem.rules import OrderSet
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.store import Database, Game, Round
from snl_pbem.store.migrate import upgrade

NAMES = ("ann", "bob", "cy")


def test_scripted_game_to_the_end(tmp_path, smtp_sink) -> None:
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    config = game_config(
        tmp_path / "c.toml",
        db.url,
        reveal=True,
        board='{ rows = 4, columns = 10, ladders = { "3" = 22 }, snakes = { "27" = 5 } }',
    )
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    clock_now = [T0]
    clock = lambda: clock_now[0]  # noqa: E731
    scheduler = RoundScheduler(db, config, clock=clock)
    sender = SmtpSender(SmtpConfig(smtp_sink.host, smtp_sink.port, "none"), "snl@example.org")
    rng = random.Random(3)
    played: dict[str, list[int]] = {n: [] for n in NAMES}
    rounds: list[dict[str, OrderSet | None]] = []
    with db.transaction() as s:
        rules = game_rules(s.scalar(select(Game)))
    for number in range(1, 30):
        with db.transaction() as s:
            game = s.scalar(select(Game))
            if game.state == "over":
                break
            round_ = s.scalar(select(Round).where(Round.state == "open"))
            turns, deadline = round_.turns, round_.deadline
        orders: dict[str, OrderSet | None] = {}
        for name in NAMES:
            if name == "cy" and number % 4 == 0:
                continue  # cy forgets now and then: R17
            used = played[name][len(played[name]) - len(played[name]) % 6 :]
            choice = rng.sample([v for v in range(1, 7) if v not in used], 1)
            if turns == 2:
                rest = [v for v in range(1, 7) if v not in used and v != choice[0]]
                choice.append(rng.choice(rest) if rest else rng.randint(1, 6))
            raw = (
                f"From: {name}@example.org\r\nSubject: Re: [g1] Round report\r\n"
                f"Message-ID: <{name}.{number}@x.org>\r\n\r\nKEY {name}-key-123\r\n"
                f"DICE {' '.join(map(str, choice))}\r\n"
            ).encode()
            assert ingest(db, config, raw, clock(), "t").status == "processed"
            orders[name] = OrderSet(tuple(choice), None)
        rounds.append(orders)
        clock_now[0] = deadline
        outcome = scheduler.on_deadline("g1", number)
        assert outcome is not None
        for turn in outcome.result.turns:
            for name, move in turn.moves.items():
                played[name].append(move.die)
        drain_outbox(db, config, sender, clock, worker="t")
    sender.close()

    offline = outcome_json(run_replay(Replay(rules, NAMES, tuple(rounds))))
    with db.transaction() as s:
        game = s.scalar(select(Game))
    assert game.state == "over" and game.result == offline["result"]

    inbox: dict[str, list[email.message.EmailMessage]] = {}
    for item in smtp_sink.delivered:
        msg = email.message_from_bytes(item.raw, policy=email.policy.default)
        inbox.setdefault(item.recipient.split("@")[0], []).append(msg)  # type: ignore[arg-type]
    closed = len(rounds)
    for name in NAMES:
        subjects = [str(m["Subject"]) for m in inbox[name]]
        assert subjects[0].startswith("[g1] Welcome")
        reports = [s for s in subjects if re.fullmatch(r"\[g1\] Round \d+ report", s)]
        assert len(reports) == closed - 1  # every round but the last, which ends the game
        assert subjects[-1].startswith("[g1] Game over")
        acks = [s for s in subjects if s.startswith("[g1] Orders received for round ")]
        assert len(acks) == sum(1 for r in rounds if name in r)
        for msg in inbox[name][:-1]:  # everything before the game-over mail
            assert_reveals_nothing(name, msg)
    summaries = [str(m["Subject"]) for m in inbox["ref"]]
    assert len(summaries) == closed and all("Referee summary" in s for s in summaries)
    winner = offline["result"].get("winner") or " and ".join(offline["result"]["draw"])
    final = inbox["ann"][-1].get_body(("plain",)).get_content()
    assert winner.split(" and ")[0] in final


def assert_reveals_nothing(reader: str, msg: email.message.EmailMessage) -> None:
    """R19: before the game ends, a player's mail shows positions and their own dice only."""
    body = msg.get_body(("plain",)).get_content().replace("\r\n", "\n")
    lowered = body.lower()
    for secret in (
        r"nominated \d",
        r"votes?\b.*\d",
        r"trapdoors: \d",
        r"active trapdoor",
        r"ladder \d",
        r"snake \d",
        r"\d+ ?(->|\u2192) ?\d+",
        r"no orders received",
        r"\br1[78]\b",
    ):
        assert not re.search(secret, lowered), (reader, secret, msg["Subject"])
    for other in set(NAMES) - {reader}:
        for line in body.splitlines():
            if re.search(rf"\b{other}\b", line):
                assert re.fullmatch(rf"\s+\d+=?\s+{other}\s+\d+", line), (reader, line)
