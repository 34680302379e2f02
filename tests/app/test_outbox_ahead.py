"""The outbox claims the next batch while one goes out (snl_pbem.app.outbox.drain_outbox).
A batch claimed ahead and never tried goes back as it was: no try counted against its
mail, no claim left to lapse, whether the server went away or the sender broke; and mail to
one recipient still goes in the order it was written, across batches."""

from __future__ import annotations

from mailhelpers import OPENED as T0
from sqlalchemy import select

from snl_pbem.app.outbox import drain_outbox, enqueue_mail
from snl_pbem.config import Config
from snl_pbem.mail.smtp import SendError
from snl_pbem.store import Database, OutboxMessage

AWAY = SendError("cannot open an SMTP session", permanent=False, unreachable=True)


class Sender:
    """Takes ``good`` messages, then fails with ``then`` (a SendError or anything else)."""

    def __init__(self, good: int, then: BaseException | None = None) -> None:
        self.good, self.then = good, then
        self.sent: list[tuple[str, bytes]] = []

    def send(self, recipient: str, message: bytes) -> None:
        if len(self.sent) >= self.good and self.then is not None:
            raise self.then
        self.sent.append((recipient, message))

    def close(self) -> None:
        return


def queue(db: Database, config: Config, recipients: list[str]) -> None:
    with db.transaction() as s:
        for index, to in enumerate(recipients):
            enqueue_mail(
                s,
                config,
                game=None,
                kind="notice",
                to=to,
                now=T0,
                template="player/notice.txt.j2",
                subject=f"note {index}",
                player=None,
                message=f"message number {index}",
                line_problems=(),
            )


def waiting(db: Database) -> list[tuple[str, int, str | None]]:
    with db.transaction() as s:
        rows = s.execute(
            select(OutboxMessage.status, OutboxMessage.attempts, OutboxMessage.claimed_by)
            .where(OutboxMessage.status == "pending")
            .order_by(OutboxMessage.id)
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


def fresh(db: Database, config: Config, n: int) -> None:
    with db.transaction() as s:  # the fixture's welcomes aside: only ours count
        for row in s.scalars(select(OutboxMessage)):
            s.delete(row)
    queue(db, config, [f"p{i}@example.org" for i in range(n)])


def test_a_server_gone_mid_batch_hands_back_the_batch_claimed_ahead(intake) -> None:
    db, config = intake
    fresh(db, config, 7)  # batches of 2: the second is claimed while the first goes out
    sender = Sender(good=1, then=AWAY)
    report = drain_outbox(db, config, sender, lambda: T0, worker="w", batch=2)
    assert report.unreachable and (report.sent, report.deferred) == (1, 1)
    # the one tried counts its try; the rest of its batch and the batch ahead: untouched
    assert waiting(db) == [("pending", 1, None)] + [("pending", 0, None)] * 5


def test_a_sender_that_breaks_hands_back_the_batch_claimed_ahead(intake) -> None:
    db, config = intake
    fresh(db, config, 6)
    sender = Sender(good=3, then=RuntimeError("a bug in the sender"))
    try:
        drain_outbox(db, config, sender, lambda: T0, worker="w", batch=2)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the sender's error was swallowed")
    left = waiting(db)
    # batches of 2: the first recorded sent; the one that broke (one sent, not recorded:
    # it goes again) keeps its claims, as before (they lapse); the one ahead is free
    assert [claimed for _, _, claimed in left] == ["w", "w", None, None]
    assert [attempts for _, attempts, _ in left] == [0, 0, 0, 0]


def test_mail_to_one_recipient_goes_in_order_across_batches(intake) -> None:
    db, config = intake
    fresh(db, config, 0)
    order = ["a@example.org", "b@example.org", "a@example.org", "c@example.org"] * 5
    queue(db, config, order)
    sender = Sender(good=10**6)
    report = drain_outbox(db, config, sender, lambda: T0, worker="w", batch=3)
    assert report.sent == len(order) and waiting(db) == []
    for to in set(order):
        subjects = [raw.split(b"note ")[1].split(b"\r\n")[0] for r, raw in sender.sent if r == to]
        numbers = [int(n) for n in subjects]
        assert numbers == sorted(numbers) and len(numbers) == order.count(to)
