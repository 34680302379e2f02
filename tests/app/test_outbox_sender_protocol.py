"""The outbox needs nothing of a sender but the Sender protocol (snl_pbem.mail.smtp):
``send`` and ``close``, and SendError for what was not accepted. A sender kept in memory,
with nothing else, carries the whole outbox: sent, given up on, and a server away.
mypy checks the class against the protocol (the last test runs it on this file)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from mailhelpers import OPENED
from sqlalchemy import select

from snl_pbem.app.outbox import drain_parallel
from snl_pbem.config import Config
from snl_pbem.mail.smtp import Sender, SendError
from snl_pbem.store import Database, OutboxMessage


class InMemory:
    """Keeps what it is given; refuses the addresses in ``refuse`` with their error."""

    def __init__(self, refuse: dict[str, SendError] | None = None) -> None:
        self.refuse = refuse or {}
        self.sent: list[tuple[str, bytes]] = []
        self.closed = False

    def send(self, recipient: str, message: bytes) -> None:
        assert not self.closed
        if recipient in self.refuse:
            raise self.refuse[recipient]
        self.sent.append((recipient, message))

    def close(self) -> None:
        self.closed = True


def senders(
    refuse: dict[str, SendError] | None = None,
) -> tuple[list[InMemory], Callable[[], Sender]]:
    made: list[InMemory] = []

    def make() -> Sender:  # mypy: an InMemory is a Sender
        made.append(InMemory(refuse))
        return made[-1]

    return made, make


START: datetime = OPENED  # the fixtures' game opened then: its mail is that old


def clock() -> datetime:
    return START


def statuses(db: Database) -> dict[str, str]:
    with db.transaction() as s:
        rows = s.execute(select(OutboxMessage.recipient, OutboxMessage.status))
        return {to: status for to, status in rows}


def test_the_outbox_sends_through_any_sender(intake: tuple[Database, Config]) -> None:
    db, config = intake  # three welcomes (with keys) are waiting
    made, make = senders()
    report = drain_parallel(db, config, make, clock, connections=2, worker="w")
    assert (report.sent, report.deferred, report.failed, report.unreachable) == (3, 0, 0, None)
    sent = [item for sender in made for item in sender.sent]
    assert sorted(to for to, _ in sent) == sorted(statuses(db))
    assert set(statuses(db).values()) == {"sent"}
    assert any(b"ann-key-123" in raw for _, raw in sent)  # the player's own key went out
    assert len(made) == 2 and all(sender.closed for sender in made)


def test_what_a_sender_refuses_is_given_up_or_waits(intake: tuple[Database, Config]) -> None:
    db, config = intake
    away = SendError("cannot open an SMTP session", permanent=False, unreachable=True)
    _, make = senders({to: away for to in statuses(db)})
    down = drain_parallel(db, config, make, clock, connections=1, worker="w")
    assert down.sent == 0 and down.unreachable == str(away)
    assert set(statuses(db).values()) == {"pending"}  # nothing counted against the mail

    gone = SendError("550 5.1.1 no such user", permanent=True)
    made, make = senders({"ann@example.org": gone})
    report = drain_parallel(db, config, make, clock, connections=1, worker="w")
    assert (report.sent, report.failed) == (3, 1)  # bob, cy and the referee's alert
    assert statuses(db) == {
        "ann@example.org": "failed",
        "bob@example.org": "sent",
        "cy@example.org": "sent",
        "ref@example.org": "sent",
    }
    [alert] = [raw for to, raw in made[0].sent if to == "ref@example.org"]
    assert b"ann@example.org" in alert  # the referee is told, through the same sender


def test_mypy_accepts_the_in_memory_sender_as_a_sender() -> None:
    from mypy import api

    here = Path(__file__)
    out, err, code = api.run(
        [
            "--no-error-summary",
            "--follow-imports=silent",
            "--disallow-untyped-defs",
            "--ignore-missing-imports",
            str(here),
        ]
    )
    assert code == 0, out + err
