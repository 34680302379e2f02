"""Reading a stored message before its processing transaction: in the sandbox, bounded
in time and memory, never inside a transaction; and with the fingerprints of what we
sent its sender, so lines of our own mail pasted back are never orders."""

from __future__ import annotations

from sqlalchemy import func, select, union_all
from sqlalchemy.orm import Session

from snl_pbem.app import sentprints
from snl_pbem.app.retention import is_trimmed_sent
from snl_pbem.config import Config
from snl_pbem.mail import sandbox
from snl_pbem.mail.ours import fingerprint_of_sent
from snl_pbem.mail.parse import ParsedMail, ParseTimeout
from snl_pbem.store import Database, OutboxMessage, Player
from snl_pbem.store.states import OutboxStatus


def _read(raw: bytes, config: Config, sent: tuple[str, ...] = ()) -> ParsedMail | str:
    """The parsed message, or why it could not be read (in the sandbox: bounded). ``sent``:
    what we sent its sender (``_sent_to``): lines of it in the message are never orders."""
    try:
        return sandbox.parse(raw, config.settings.mail.address, sent)
    except ParseTimeout as exc:
        return f"set aside: {exc}"
    except sandbox.ParseFailed as exc:
        return f"set aside: it could not be read: {exc}"


SENT_COMPARED = 40
"""Our latest messages to a sender that its message is compared with (``snl_pbem.mail.ours``),
and, however old, the latest SECRET_COMPARED that gave a key or a code: a welcome is what
out-of-office replies paste, weeks into a game."""
SECRET_COMPARED = 5


def _sent_to(db: Database, config: Config, sender: str | None) -> tuple[str, ...]:
    """The fingerprints of the mail we sent to ``sender`` (as the address is spelt in
    players' rows or the referee's setting too), newest first, bounded: the latest
    SENT_COMPARED and the latest SECRET_COMPARED that held a key or code. Mail that failed
    or bounced never reached the sender. Two small indexed queries, and a third for the
    messages not fingerprinted yet (usually one: the last reply)."""
    if sender is None:
        return ()
    with db.reading() as session:
        return _sent_in(session, config, sender)


def _sent_to_many(
    db: Database, config: Config, senders: list[str | None]
) -> dict[str | None, tuple[str, ...]]:
    """``_sent_to`` for each of these senders (a batch's messages), in three queries
    whatever their number: the latest of each sender's mail picked by window functions."""
    found: dict[str | None, tuple[str, ...]] = {None: ()}
    wanted = sorted({s for s in senders if s is not None})
    if not wanted:
        return found
    with db.reading() as session:
        spellings: dict[str, set[str]] = {s: {s} for s in wanted}
        referee = config.settings.mail.referee
        if referee.lower() in spellings:
            spellings[referee.lower()].add(referee)
        for email in session.scalars(
            select(Player.email).where(func.lower(Player.email).in_(wanted))
        ):
            spellings[email.lower()].add(email)
        recipients = sorted(set().union(*spellings.values()))
        whose = func.lower(OutboxMessage.recipient)
        newest = OutboxMessage.id.desc()
        ranked = (
            select(
                OutboxMessage.id,
                OutboxMessage.message_id,
                OutboxMessage.secret,
                OutboxMessage.status,
                whose.label("whose"),
                func.row_number().over(partition_by=whose, order_by=newest).label("n"),
                func.row_number()
                .over(partition_by=(whose, OutboxMessage.secret), order_by=newest)
                .label("s"),
            )
            .where(
                OutboxMessage.recipient.in_(recipients),
                OutboxMessage.status.in_((OutboxStatus.SENT, OutboxStatus.PENDING)),
            )
            .subquery()
        )
        picked = session.execute(
            select(
                ranked.c.id, ranked.c.message_id, ranked.c.secret, ranked.c.status, ranked.c.whose
            ).where(
                (ranked.c.n <= SENT_COMPARED) | (ranked.c.secret & (ranked.c.s <= SECRET_COMPARED))
            )
        ).all()
        prints = _fingerprints(session, [(r.id, r.message_id, r.secret, r.status) for r in picked])
    by_sender: dict[str, list[tuple[int, str]]] = {s: [] for s in wanted}
    for row in picked:
        by_sender[row.whose].append((row.id, row.message_id))
    for sender, rows in by_sender.items():
        values = (prints.get(message_id, "") for _, message_id in sorted(rows, reverse=True))
        found[sender] = tuple(value for value in values if value)
    return found


def _fingerprints(session: Session, rows: list[tuple[int, str, bool, str]]) -> dict[str, str]:
    """The fingerprints of these outbox rows, by Message-ID: those kept in memory, and the
    others worked out from their stored bytes (and kept)."""
    found = sentprints.kept(row[1] for row in rows)
    missing = {row[0]: row for row in rows if row[1] not in found}
    if not missing:
        return found
    for outbox_id, message in session.execute(
        select(OutboxMessage.id, OutboxMessage.message).where(OutboxMessage.id.in_(sorted(missing)))
    ):
        _, message_id, is_secret, status = missing[outbox_id]
        # its body was replaced by its fingerprint: once sent if it held a key (see
        # drain_outbox), or once kept for keep_sent_mail (see retention)
        scrubbed = (is_secret and status == OutboxStatus.SENT) or is_trimmed_sent(message)
        found[message_id] = fingerprint_of_sent(message, scrubbed=scrubbed)
        sentprints.remember(message_id, found[message_id])
    return found


def _sent_in(session: Session, config: Config, sender: str) -> tuple[str, ...]:
    columns = (OutboxMessage.id, OutboxMessage.message_id, OutboxMessage.secret)
    addresses = {sender, config.settings.mail.referee}  # as the players' rows spell it
    addresses.update(
        session.scalars(select(Player.email).where(func.lower(Player.email) == sender))
    )
    to_sender = (  # an IN list, not an OR: the (recipient, status, id) index serves it
        OutboxMessage.recipient.in_(sorted(a for a in addresses if a.lower() == sender)),
        OutboxMessage.status.in_((OutboxStatus.SENT, OutboxStatus.PENDING)),
    )
    latest = select(OutboxMessage.status, *columns).order_by(OutboxMessage.id.desc())
    both = union_all(
        latest.where(*to_sender).limit(SENT_COMPARED).subquery().select(),
        latest.where(*to_sender, OutboxMessage.secret).limit(SECRET_COMPARED).subquery().select(),
    )
    rows = {(row.id, row.message_id, row.secret, row.status) for row in session.execute(both)}
    prints = _fingerprints(session, list(rows))
    found = (prints.get(row[1], "") for row in sorted(rows, reverse=True))
    return tuple(value for value in found if value)
