"""A rollback as the players live it (issue 21), on SQLite and PostgreSQL, through the
outbox to a real SMTP server: every player (and observer) is told that the round is open
again, until when, and what became of their own orders (R19: theirs, nobody else's); the
round's second close says that its new report replaces the first, instead of a second
"closed early"; and a resume past the reopened round's deadline sends no "deadline now"
for a time already gone."""

from __future__ import annotations

import email
import email.policy
from datetime import timedelta

import pytest
from mailhelpers import T0
from sqlalchemy import select

from snl_pbem.app.games import sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.lookup import game_by_name
from snl_pbem.app.observers import observe
from snl_pbem.app.outbox import drain_outbox
from snl_pbem.app.rounds import close_round
from snl_pbem.config import Config, load_config
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.store import Database, Round

REFEREE_KEY = "ref-key-0123456789"
PLAYERS = ("ann@example.org", "bob@example.org", "cy@example.org")
OBSERVER = "obs@example.net"
DEADLINE = "Fri 4 Jan 2030 18:00 GMT"  # round 1 of the fixtures' game g1


@pytest.fixture
def game(intake) -> tuple[Database, Config]:
    """The started game g1 (ann, bob, cy), a referee key, and an observer."""
    db, config = intake
    text = config.path.read_text().replace(
        'referee = "ref@example.org"', f'referee = "ref@example.org"\nreferee_key = "{REFEREE_KEY}"'
    )
    config.path.write_text(text)
    config = load_config(config.path)
    sync_games(db, config, T0)
    with db.transaction() as s:
        observe(s, game_by_name(s, "g1"), OBSERVER, T0)
    return db, config


def send(db: Database, config: Config, sender: str, body: str, at, tag: str) -> str:
    raw = (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()
    result = ingest(db, config, raw, at, "t")
    return f"{result.status}: {result.detail}"


def referee(db: Database, config: Config, command: str, at, tag: str) -> str:
    return send(db, config, "ref@example.org", f"KEY {REFEREE_KEY}\n{command}", at, tag)


class Inboxes:
    """What each address received from the SMTP server, in order, as (subject, text)."""

    def __init__(self, sink, db: Database, config: Config) -> None:
        self.sink, self.db, self.config, self.seen = sink, db, config, 0

    def deliver(self, at=T0) -> dict[str, list[tuple[str, str]]]:
        """Send what is due at ``at``, and return what arrived since the last call, by
        address."""
        sender = SmtpSender(
            SmtpConfig(self.sink.host, self.sink.port, "none", timeout=10), "snl@example.org"
        )
        try:
            drain_outbox(self.db, self.config, sender, lambda: at, worker="test")
        finally:
            sender.close()
        new, self.seen = self.sink.delivered[self.seen :], len(self.sink.delivered)
        got: dict[str, list[tuple[str, str]]] = {}
        for item in new:
            msg = email.message_from_bytes(item.raw, policy=email.policy.default)
            text = " ".join(msg.get_content().split())  # type: ignore[attr-defined]
            got.setdefault(item.recipient, []).append((str(msg["Subject"]), text))
        return got


def subjects(got: dict[str, list[tuple[str, str]]], who: str) -> list[str]:
    return [subject for subject, _ in got.get(who, [])]


def test_a_rollback_by_mail_tells_everyone_what_counts_and_the_reclose_replaces_the_report(
    game, smtp_sink
) -> None:
    db, config = game
    inboxes = Inboxes(smtp_sink, db, config)
    assert send(db, config, PLAYERS[0], "KEY ann-key-123\nDICE 5\nTRAPDOOR 30", T0, "a1")
    assert send(db, config, PLAYERS[1], "KEY bob-key-123\nDICE 3", T0, "b1")
    referee(db, config, "CLOSE ROUND g1", T0 + timedelta(hours=1), "c1")
    first = inboxes.deliver(T0 + timedelta(hours=1))
    for who in PLAYERS:
        assert subjects(first, who)[-2:] == [
            "[g1] Round 1 closed early",
            "[g1] Round 1 report",
        ], who
        assert "replaces" not in first[who][-1][1], who  # a first report replaces nothing

    referee(db, config, "ROLLBACK g1", T0 + timedelta(hours=2), "rb")
    told = inboxes.deliver(T0 + timedelta(hours=2))
    for who in (*PLAYERS, OBSERVER):
        [(subject, text)] = told[who]
        assert subject == "[g1] Round 1 reopened: its report no longer counts", who
        assert "the referee has reopened round 1. Its results are withdrawn" in text
        assert "the report of round 1 you had no longer counts" in text
        assert "The game is paused while the referee puts things right" in text
        assert (
            f"Its deadline, {DEADLINE}, is stopped while the game is paused, and moves on by "
            "the time paused when the game resumes; you will be told."
        ) in text
    ann, bob, cy, obs = (told[who][0][1] for who in (*PLAYERS, OBSERVER))
    assert "Your orders for round 1 are kept: dice 5, trapdoor 30. They count unless" in ann
    assert "Your orders for round 1 are kept: dice 3. They count unless you change" in bob
    assert "Your orders for round 1 are kept: none." in cy
    assert "Your orders" not in obs and "Hello," in obs
    # R19: each player's own orders, nobody else's
    assert "dice 3" not in ann and "dice 5" not in bob and "trapdoor" not in bob + cy + obs
    assert "dropped" not in ann + bob + cy

    referee(db, config, "RESUME g1", T0 + timedelta(hours=3), "rs")
    resumed = inboxes.deliver(T0 + timedelta(hours=3))
    for who in PLAYERS:
        assert subjects(resumed, who) == ["[g1] Round 1 deadline now Fri 4 Jan 2030 19:00 GMT"]
    send(db, config, PLAYERS[2], "KEY cy-key-123\nDICE 2", T0 + timedelta(hours=4), "c2")
    assert subjects(inboxes.deliver(T0 + timedelta(hours=4)), PLAYERS[2]) == [
        "[g1] Orders received for round 1"
    ]
    referee(db, config, "CLOSE ROUND g1", T0 + timedelta(hours=5), "c2r")
    again = inboxes.deliver(T0 + timedelta(hours=5))
    for who in (*PLAYERS, OBSERVER):
        report = "[g1] Round 1 report" if who != OBSERVER else "[g1] Round 1 report (observer)"
        got = subjects(again, who)
        assert got[0] == "[g1] Round 1 closed again: a new report follows", who
        assert "closed early" not in " ".join(got), who  # not a second "closed early"
        assert got[-1].startswith("[g1] Round 1 report"), (who, got, report)
        notice = again[who][0][1]
        assert (
            "round 1, which the referee reopened, closed again at Sat 1 Dec 2029 17:00 GMT"
        ) in notice
        assert "The report of round 1 that follows replaces the one you had before" in notice
        # the report itself says so too, for a player who reads it alone
        assert (
            "This report replaces the report of round 1 sent before the rollback."
            in again[who][-1][1]
        ), who


def test_a_rollback_past_the_deadline_closes_again_at_once_on_resume(game, smtp_sink) -> None:
    """Round 1 closed at its deadline by the scheduler, then rolled back an hour later:
    its deadline has passed, and the players are told so; RESUME sends no "deadline now"
    (a time already gone): the round closes again at once, told as such."""
    db, config = game
    inboxes = Inboxes(smtp_sink, db, config)
    with db.transaction() as s:
        deadline = s.scalar(select(Round.deadline).where(Round.number == 1))
    send(db, config, PLAYERS[0], "KEY ann-key-123\nDICE 4", T0, "a1")
    assert close_round(db, "g1", deadline, actor="scheduler", config=config) is not None
    inboxes.deliver(deadline)
    later = deadline + timedelta(hours=1)
    detail = referee(db, config, "ROLLBACK g1", later, "rb")
    assert detail == "processed: referee's commands: 1 done, 0 not done"
    told = inboxes.deliver(later)
    for who in PLAYERS:
        [(_, text)] = told[who]
        assert (
            f"The round's deadline, {DEADLINE}, has passed: it closes again when the referee "
            "resumes the game or closes it."
        ) in text
        assert "They count when it closes again." in text or "kept: none." in text
    assert (
        "Your orders for round 1 are kept: dice 4. They count when it closes again."
        in (told[PLAYERS[0]][0][1])
    )

    resumed_at = later + timedelta(minutes=30)
    referee(db, config, "RESUME g1", resumed_at, "rs")
    catch_up = RoundScheduler(db, config, clock=lambda: resumed_at).catch_up  # the server's
    assert [o.round for o in catch_up()] == [1]
    again = inboxes.deliver(resumed_at)
    for who in PLAYERS:
        got = subjects(again, who)
        assert got == ["[g1] Round 1 closed again: a new report follows", "[g1] Round 1 report"]
    replies = [text for subject, text in again["ref@example.org"] if "referee commands" in subject]
    assert (
        "Done: g1: resumed; its deadline Fri 4 Jan 2030 18:30 GMT has passed: the round "
        "closes at once"
    ) in replies[0]


def test_a_forced_rollback_on_the_command_line_tells_who_must_send_again(
    make_config, capsys, smtp_sink
) -> None:
    """``snl-pbem rollback --force`` drops round 2's orders: bob, who had sent his, is told
    to send them again when round 2 opens; ann, who had not, is not; both keep round 1's."""
    from snl_pbem.cli.main import main
    from snl_pbem.store import Database

    config = make_config([{"keys": True}])
    cfg = ("--config", str(config.path))
    assert main(["db", "upgrade", *cfg]) == 0
    assert main(["start", "g1", *cfg]) == 0
    db = Database(config.database_url)
    try:
        from snl_pbem.timeutil import utcnow

        now = utcnow()
        assert send(db, config, PLAYERS[0], "KEY ann-key-123\nDICE 6", now, "a1").startswith(
            "processed"
        )
        assert main(["close-round", "g1", *cfg]) == 0
        assert send(db, config, PLAYERS[1], "KEY bob-key-123\nDICE 2", utcnow(), "b2")
        capsys.readouterr()
        inboxes = Inboxes(smtp_sink, db, config)
        inboxes.deliver(utcnow())

        assert main(["rollback", "g1", *cfg]) == 2
        assert "round 2 already has 1 order set;" in capsys.readouterr().err
        assert inboxes.deliver(utcnow()) == {}  # refused: nobody told anything
        assert main(["rollback", "g1", "--force", *cfg]) == 0
        out = capsys.readouterr().out
        assert (
            "g1: round 1 reopened (results discarded, its orders kept, any for round 2 "
            "discarded); the game is paused and the players are told; its deadline "
            f"{DEADLINE} is stopped until resume. Correct what you need, then close-round or "
            "resume"
        ) in out
        told = inboxes.deliver(utcnow())
        ann, bob = told[PLAYERS[0]][0][1], told[PLAYERS[1]][0][1]
        assert "Your orders for round 1 are kept: dice 6." in ann
        assert "Your orders for round 2 were dropped" not in ann
        assert "Your orders for round 1 are kept: none." in bob
        assert (
            "Your orders for round 2 were dropped with that round: send them again when it "
            "opens (its report will say when)."
        ) in bob
        assert "dice 2" not in bob + ann  # the dropped orders are not restated

        assert main(["resume", "g1", *cfg]) == 0
        assert main(["close-round", "g1", *cfg]) == 0
        again = inboxes.deliver(utcnow())
        for who in PLAYERS:
            got = subjects(again, who)
            assert "[g1] Round 1 closed again: a new report follows" in got
            assert not any("closed early" in s for s in got)
            assert got.index("[g1] Round 1 closed again: a new report follows") < got.index(
                "[g1] Round 1 report"
            )
    finally:
        db.dispose()


@pytest.mark.parametrize("ruleset", ["classic", "postal"])
def test_a_game_over_mail_after_a_rollback_says_it_replaces_the_earlier_one(ruleset) -> None:
    """A last round rolled back and closed again: its game-over mail says it replaces the
    one sent before; a first game-over mail says nothing of the kind."""
    from test_plurals import CASES

    from snl_pbem.mail.render import render

    template = f"{ruleset}/game_over.txt.j2"
    # the postal one counts nothing, so has no case of its own: the classic case fits it
    context = {**CASES["classic/game_over.txt.j2"](1), "your_move": None}
    line = "This mail replaces the mail of round 4 sent before the rollback."
    _, again = render(template, **context, replaces=True)
    assert line in again
    assert line not in render(template, **context, replaces=False)[1]
