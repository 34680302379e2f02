"""The deadline decision (snl_pbem.app.deadline.decide): close, hold, wait or re-plan, each
outcome from a real SQLite database, every fact read in one transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from mailhelpers import T0
from sqlalchemy import select
from sqlalchemy.orm import Session

from snl_pbem.app.deadline import (
    Close,
    Hold,
    HoldWhy,
    Replan,
    ReplanWhy,
    Wait,
    decide,
    imap_source,
)
from snl_pbem.app.intake import ingest
from snl_pbem.app.mailbox_state import ensure_state, record_failed_poll, record_good_poll
from snl_pbem.app.referee import extend, pause
from snl_pbem.app.rounds import close_round
from snl_pbem.app.schedule import hold_round
from snl_pbem.config import Config, load_config
from snl_pbem.store import Database, Round

IMAP = (
    '[mail.imap]\nhost = "127.0.0.1"\nport = 1\ntls = "none"\nusername = "u"\n'
    'password_file = "imap.password"\nhealthy_within = "30m"\n'
)


@pytest.fixture
def game(sqlite_intake: tuple[Database, Config]) -> tuple[Database, Config]:
    return sqlite_intake


@pytest.fixture
def imap_game(sqlite_intake: tuple[Database, Config], tmp_path: Path) -> tuple[Database, Config]:
    """The same game, its server reading an IMAP mailbox (healthy_within 30 minutes). The
    password file is gone once the config is loaded: the decision never reads it."""
    db, _ = sqlite_intake
    path = tmp_path / "config.toml"
    path.write_text(path.read_text().replace("[[games]]", IMAP + "\n[[games]]"))
    (tmp_path / "imap.password").write_text("p\n")
    config = load_config(path)
    (tmp_path / "imap.password").unlink()
    return db, config


def deadline_of(db: Database, number: int = 1):
    with db.transaction() as s:
        return s.scalar(select(Round.deadline).where(Round.number == number))


def closes(db: Database) -> Close:
    """The decision to close round 1 (which carries its deadline, for the backup)."""
    return Close(deadline_of(db))


def send_orders(db: Database, config: Config, *who: str) -> None:
    for name, dice in zip(who, ("1", "2", "3"), strict=False):
        raw = (
            f"From: {name}@example.org\r\nSubject: [g1]\r\nMessage-ID: <{name}@x.org>\r\n\r\n"
            f"KEY {name}-key-123\r\nDICE {dice}\r\n"
        ).encode()
        ingest(db, config, raw, T0, "t")


def polled(db: Database, config: Config, started, *, failed_at=None) -> None:
    """A poll of the configured mailbox began at ``started`` and read it to its end (then,
    with ``failed_at``, a later one failed)."""
    imap = config.settings.mail.imap
    assert imap is not None
    source = imap_source(imap)
    ensure_state(db, source)
    record_good_poll(db, source, started, started, 1)
    if failed_at is not None:
        record_failed_poll(db, source, "ConnectionRefusedError: [Errno 111]", failed_at)


# -- Close ----------------------------------------------------------------------------------


def test_a_round_at_its_deadline_closes(game) -> None:
    db, config = game
    deadline = deadline_of(db)
    assert decide(db, config, "g1", 1, deadline) == closes(db)
    assert decide(db, config, "g1", 1, deadline + timedelta(days=9)) == closes(db)  # catch-up


def test_an_all_in_round_closes_early(game) -> None:
    db, config = game
    send_orders(db, config, "ann", "bob", "cy")
    assert decide(db, config, "g1", 1, T0, early=True) == closes(db)  # days before the deadline


# -- Replan ---------------------------------------------------------------------------------


def test_a_round_before_its_deadline_is_not_due(game) -> None:
    db, config = game
    deadline = deadline_of(db)
    early = deadline - timedelta(seconds=1)
    assert decide(db, config, "g1", 1, early) == Replan(ReplanWhy.NOT_DUE, deadline)


def test_a_deadline_moved_later_replans_for_the_new_time(game) -> None:
    """`extend` while the server runs: the job planned for the old deadline only re-plans."""
    db, config = game
    deadline = deadline_of(db)
    extend(db, "g1", T0, by=timedelta(hours=5), config=config)
    later = deadline + timedelta(hours=5)
    assert decide(db, config, "g1", 1, deadline) == Replan(ReplanWhy.NOT_DUE, later)
    assert decide(db, config, "g1", 1, later) == closes(db)


def test_no_round_closes_during_the_start_up_redelivery_grace(game) -> None:
    db, config = game
    deadline = deadline_of(db)
    until = deadline + timedelta(minutes=11)
    assert decide(db, config, "g1", 1, deadline, redelivery_until=until) == Replan(
        ReplanWhy.NOT_DUE, until
    )
    assert decide(db, config, "g1", 1, until, redelivery_until=until) == closes(db)
    earlier = deadline - timedelta(minutes=1)  # a grace over before the deadline: no later
    assert decide(db, config, "g1", 1, deadline, redelivery_until=earlier) == closes(db)


def test_a_paused_or_unknown_game_does_nothing(game) -> None:
    db, config = game
    deadline = deadline_of(db)
    pause(db, "g1", T0)
    assert decide(db, config, "g1", 1, deadline) == Replan(ReplanWhy.NOT_RUNNING)
    send_orders(db, config, "ann", "bob", "cy")
    assert decide(db, config, "g1", 1, deadline, early=True) == Replan(ReplanWhy.NOT_RUNNING)
    assert decide(db, config, "nope", 1, deadline) == Replan(ReplanWhy.NOT_RUNNING)


def test_a_round_closed_by_another_server_is_not_closed_again(game) -> None:
    db, config = game
    deadline = deadline_of(db)
    send_orders(db, config, "ann", "bob", "cy")  # all in, and a close-when-all-in planned
    assert close_round(db, "g1", deadline, expect_round=1) is not None  # close-round, elsewhere
    assert decide(db, config, "g1", 1, deadline) == Replan(ReplanWhy.NOT_OPEN)
    assert decide(db, config, "g1", 3, deadline) == Replan(ReplanWhy.NOT_OPEN)  # no such round
    assert decide(db, config, "g1", 1, deadline, early=True) == Replan(ReplanWhy.NOT_ALL_IN)


def test_a_held_round_waits_for_the_held_rounds_check(imap_game) -> None:
    db, config = imap_game
    deadline = deadline_of(db)
    assert hold_round(db, config, "g1", 1, "down", deadline, timedelta(minutes=30))
    polled(db, config, deadline + timedelta(minutes=1))  # healthy again: check_held's call
    assert decide(db, config, "g1", 1, deadline + timedelta(hours=1)) == Replan(ReplanWhy.NOT_OPEN)


def test_an_early_close_of_a_round_no_longer_all_in_waits_for_the_deadline(game) -> None:
    db, config = game
    send_orders(db, config, "ann", "bob")  # cy's orders are missing
    assert decide(db, config, "g1", 1, T0, early=True, all_in=True) == Replan(ReplanWhy.NOT_ALL_IN)
    # the job an all-in close was re-planned to (past the start-up grace) closes as planned
    assert decide(db, config, "g1", 1, T0, early=True) == closes(db)


# -- Wait -----------------------------------------------------------------------------------


def test_an_early_close_waits_for_the_start_up_redelivery_grace(game) -> None:
    """An order may still be in the MTA's queue: the all-in close waits until the grace ends."""
    db, config = game
    send_orders(db, config, "ann", "bob", "cy")
    until = T0 + timedelta(minutes=11)
    assert decide(db, config, "g1", 1, T0, early=True, redelivery_until=until) == Wait(until)
    assert decide(db, config, "g1", 1, until, early=True, redelivery_until=until) == closes(db)


# -- Hold (IMAP) ----------------------------------------------------------------------------


def test_a_mailbox_never_read_holds_the_round(imap_game) -> None:
    db, config = imap_game
    at = deadline_of(db) + timedelta(seconds=1)  # the intake grace with IMAP
    assert decide(db, config, "g1", 1, at) == Hold(
        HoldWhy.INTAKE_UNHEALTHY, "the mailbox was last read successfully never"
    )


def test_a_mailbox_last_read_too_long_ago_holds_the_round(imap_game) -> None:
    db, config = imap_game
    deadline = deadline_of(db)
    polled(db, config, deadline - timedelta(minutes=31))
    decision = decide(db, config, "g1", 1, deadline + timedelta(seconds=1))
    assert decision == Hold(
        HoldWhy.INTAKE_UNHEALTHY, "the mailbox was last read successfully 31m1s ago"
    )


def test_a_mailbox_whose_last_read_failed_holds_the_round(imap_game) -> None:
    db, config = imap_game
    deadline = deadline_of(db)
    polled(db, config, deadline + timedelta(seconds=1), failed_at=deadline + timedelta(seconds=2))
    decision = decide(db, config, "g1", 1, deadline + timedelta(seconds=3))
    assert isinstance(decision, Hold) and decision.why == HoldWhy.INTAKE_UNHEALTHY
    assert decision.problem.startswith("the last read of the mailbox failed")
    send_orders(db, config, "ann", "bob", "cy")  # an early close is held alike
    assert decide(db, config, "g1", 1, deadline + timedelta(seconds=3), early=True) == decision


def test_a_mailbox_not_yet_read_up_to_the_deadline_holds_the_close_a_moment(imap_game) -> None:
    """Mail that reached the mailbox before the deadline counts: the close waits for a poll
    begun after the deadline. A close-when-all-in does not (it closes early on purpose)."""
    db, config = imap_game
    deadline = deadline_of(db)
    polled(db, config, deadline - timedelta(minutes=5))  # healthy, but before the deadline
    at = deadline + timedelta(seconds=1)
    decision = decide(db, config, "g1", 1, at)
    assert isinstance(decision, Hold) and decision.why == HoldWhy.MAILBOX_BEHIND
    polled(db, config, deadline)  # a poll begun at the deadline read it to its end
    assert decide(db, config, "g1", 1, at) == closes(db)


def test_an_early_close_with_a_healthy_mailbox_does_not_wait_for_a_poll(imap_game) -> None:
    db, config = imap_game
    send_orders(db, config, "ann", "bob", "cy")
    polled(db, config, T0 - timedelta(minutes=5))
    assert decide(db, config, "g1", 1, T0, early=True) == closes(db)


def test_with_imap_the_close_is_due_a_second_after_the_deadline(imap_game) -> None:
    db, config = imap_game
    deadline = deadline_of(db)
    polled(db, config, deadline)
    assert decide(db, config, "g1", 1, deadline) == Replan(
        ReplanWhy.NOT_DUE, deadline + timedelta(seconds=1)
    )


# -- how it is decided -----------------------------------------------------------------------


def test_every_fact_is_read_in_one_transaction(imap_game) -> None:
    db, config = imap_game
    deadline = deadline_of(db)
    polled(db, config, deadline)
    send_orders(db, config, "ann", "bob", "cy")
    opened = []
    transaction = db.transaction

    @contextmanager
    def counted() -> Iterator[Session]:
        opened.append(1)
        with transaction() as session:
            yield session

    db.transaction = counted  # type: ignore[method-assign]
    try:
        assert decide(db, config, "g1", 1, deadline + timedelta(seconds=1)) == Close(deadline)
        assert decide(db, config, "g1", 1, T0, early=True) == Close(deadline)
    finally:
        del db.transaction
    assert len(opened) == 2


def test_the_mailbox_is_named_as_its_poller_names_it(imap_game, tmp_path) -> None:
    """The hold reads the mailbox's health under the poller's name for it, computed from the
    settings alone (the fixture's password file is gone, and decide never reads it)."""
    from snl_pbem.runners.mailboxes import imap_poller

    db, _ = imap_game
    path = tmp_path / "config.toml"
    path.write_text(path.read_text().replace('password_file = "imap.password"', 'password = "p"'))
    with_password = load_config(path)
    poller = imap_poller(db, with_password)
    assert poller is not None and with_password.settings.mail.imap is not None
    assert imap_source(with_password.settings.mail.imap) == poller.config.source
    assert poller.config.source == "imap:u@127.0.0.1:1/INBOX"
