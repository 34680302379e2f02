"""Reading a stored message before its processing transaction: in the sandbox, bounded
in time and memory, never inside a transaction; and with the fingerprints of what we
sent its sender, so lines of our own mail pasted back are never orders."""

from __future__ import annotations

import functools
from typing import cast

from sqlalchemy import TextClause, func, select, text
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
    or bounced never reached the sender. See ``_sent_in_many``."""
    if sender is None:
        return ()
    with db.reading() as session:
        return _sent_in(session, config, sender)


def _sent_to_many(
    db: Database, config: Config, senders: list[str | None]
) -> dict[str | None, tuple[str, ...]]:
    """``_sent_to`` for each of these senders (a batch's messages), in a few queries
    whatever their number (``_sent_in_many``)."""
    found: dict[str | None, tuple[str, ...]] = {None: ()}
    wanted = sorted({s for s in senders if s is not None})
    if wanted:
        with db.reading() as session:
            found.update(_sent_in_many(session, config, wanted))
    return found


def _sent_in(session: Session, config: Config, sender: str) -> tuple[str, ...]:
    return _sent_in_many(session, config, [sender])[sender]


def _sent_in_many(
    session: Session, config: Config, wanted: list[str]
) -> dict[str, tuple[str, ...]]:
    """Each sender's fingerprints (``_sent_to``): its spellings found (one query), the
    latest of its mail read back along the indexes (``_latest_to``), the newest first."""
    spellings: dict[str, set[str]] = {s: {s} for s in wanted}
    referee = config.settings.mail.referee
    if referee.lower() in spellings:
        spellings[referee.lower()].add(referee)
    for email in session.scalars(select(Player.email).where(func.lower(Player.email).in_(wanted))):
        if email.lower() in spellings:  # (SQL's lower and Python's may differ past ASCII)
            spellings[email.lower()].add(email)
    rows: dict[str, dict[int, _Sent]] = {s: {} for s in wanted}
    for outbox_id, message_id, secret, status, recipient, kept in _latest_to(
        session, sorted(set().union(*spellings.values()))
    ):
        whose = rows.get(recipient.lower())
        if whose is not None:
            whose[outbox_id] = (outbox_id, message_id, bool(secret), status, kept)
    picked: dict[str, list[_Sent]] = {}
    for sender, mine in rows.items():
        newest = sorted(mine.values(), key=_newest)
        keyed = [row for row in newest if row[2]][:SECRET_COMPARED]
        picked[sender] = sorted({*newest[:SENT_COMPARED], *keyed}, key=_newest)
    # mail written before its fingerprint was kept with it: worked out from its body
    prints = _fingerprints(
        session, [row[:4] for rows_ in picked.values() for row in rows_ if row[4] is None]
    )
    return {
        sender: tuple(p for p in (row[4] or prints.get(row[1], "") for row in rows_) if p)
        for sender, rows_ in picked.items()
    }


_Sent = tuple[int, str, bool, str, str | None]
"""An outbox row as compared: id, Message-ID, secret, status, fingerprint (None: not kept)."""


def _newest(row: _Sent) -> int:
    return -row[0]


def _latest_to(
    session: Session, recipients: list[str]
) -> list[tuple[int, str, bool, str, str, str | None]]:
    """``(id, message_id, secret, status, recipient, fingerprint)`` of the latest
    SENT_COMPARED of our mail to each of ``recipients`` (as spelt) in each status that
    reached it, and the latest SECRET_COMPARED of them that held a key or code: each read
    back along an index from the newest, so the work is bounded whatever the history
    (window functions ranked all of it: 301 us a sender at a hundred of our messages each,
    against 65; issue 23). A row may come twice. Statements of a few fixed shapes, each
    prepared once."""
    found: list[tuple[int, str, bool, str, str, str | None]] = []
    dialect = session.get_bind().dialect.name
    at = 0
    while at < len(recipients):
        size = next((n for n in _SHAPES if n >= len(recipients) - at), _SHAPES[-1])
        chunk = recipients[at : at + size]
        at += size
        values = {f"r{i}": address for i, address in enumerate(chunk)}
        values.update({f"r{i}": "" for i in range(len(chunk), size)})  # "": no one's address
        rows = session.execute(_latest_statement(dialect, size), values).all()
        found.extend(cast("list[tuple[int, str, bool, str, str, str | None]]", rows))
    return found


_SHAPES = (1, 8, 32)
"""Recipients one statement asks for (its places past them given no one): four queries
each, within SQLite's 500 in one compound SELECT."""


_COLUMNS = "id, message_id, secret, status, recipient, fingerprint"


@functools.cache
def _latest_statement(dialect: str, size: int) -> TextClause:
    # the partial index ix_outbox_recipient_secret serves a query that says what it says:
    # "secret = 1" on SQLite, "secret" on PostgreSQL
    secret = "secret" if dialect == "postgresql" else "secret = 1"
    parts: list[str] = []
    for i in range(size):
        for status in (OutboxStatus.SENT, OutboxStatus.PENDING):
            mine = f"recipient = :r{i} AND status = '{status.value}'"
            for where, limit in ((mine, SENT_COMPARED), (f"{mine} AND {secret}", SECRET_COMPARED)):
                parts.append(
                    f"SELECT * FROM (SELECT {_COLUMNS} FROM outbox WHERE {where}"
                    f" ORDER BY id DESC LIMIT {limit}) AS q{len(parts)}"
                )
    return text(" UNION ALL ".join(parts))


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
