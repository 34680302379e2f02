"""Reading a stored message before its processing transaction: in the sandbox, bounded
in time and memory, never inside a transaction; and with the fingerprints of what we
sent its sender, so lines of our own mail pasted back are never orders."""

from __future__ import annotations

import functools

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
        return _sent_in_many(session, config, [sender])[sender]


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
    recipients = [(address, sender) for sender in wanted for address in spellings[sender]]
    prints: dict[str, dict[int, str | None]] = {s: {} for s in wanted}  # by outbox id
    keyed: dict[str, list[int]] = {s: [] for s in wanted}
    for who, key, outbox_id, kept in _latest_to(session, [a for a, _ in recipients]):
        sender = recipients[who][1]
        prints[sender][outbox_id] = kept
        if key:
            keyed[sender].append(outbox_id)
    picked: dict[str, list[int]] = {}
    for sender, mine in prints.items():
        latest = sorted(mine, reverse=True)[:SENT_COMPARED]
        with_key = sorted(keyed[sender], reverse=True)[:SECRET_COMPARED]
        picked[sender] = sorted({*latest, *with_key}, reverse=True)
    # mail written before its fingerprint was kept with it: worked out from its body
    worked_out = _fingerprints(
        session, [i for sender, ids in picked.items() for i in ids if prints[sender][i] is None]
    )
    return {
        sender: tuple(p for p in (prints[sender][i] or worked_out.get(i, "") for i in ids) if p)
        for sender, ids in picked.items()
    }


def _latest_to(session: Session, recipients: list[str]) -> list[tuple[int, int, int, str | None]]:
    """``(who, keyed, id, fingerprint)`` (``who``: the recipient's place in ``recipients``,
    as spelt; ``keyed``: 1 when found as mail that held a key or code) of the latest
    SENT_COMPARED of our mail to each recipient in each status that reached it, and the
    latest SECRET_COMPARED of them that held a key or code: each read back along an index
    from the newest, so the work is bounded whatever the history (window functions ranked
    all of it: 301 us a sender at a hundred of our messages each, against 65; issue 23).
    A row may come twice. Statements of a few fixed shapes, each prepared once, each
    query's rows coming as one (``id:fingerprint;...``): on PostgreSQL one for all the
    recipients (``_latest_on_postgresql``); on SQLite one for each 32 at most, its rows
    packed as one (``who,keyed,rows|...``): SQLite's driver gives up the GIL for every row
    it steps, and the intake's other threads then keep the reader waiting (a statement of
    128 rows took 9 ms on the clock in a run, for 0.8 of CPU; the reading is a batch's
    critical path beside its transaction)."""
    rows: list[tuple[int, int, str | None]] = []  # (who, keyed, "id:fingerprint;...")
    if not recipients:
        return []
    if session.get_bind().dialect.name == "postgresql":
        result = session.execute(_latest_on_postgresql(), {"recipients": recipients})
        rows += [(who, key, joined) for who, key, joined in result]
    else:
        at = 0
        while at < len(recipients):
            size = next((n for n in _SHAPES if n >= len(recipients) - at), _SHAPES[-1])
            values: dict[str, str | None] = {
                f"r{i}": address for i, address in enumerate(recipients[at : at + size])
            }
            values.update({f"r{i}": None for i in range(len(values), size)})  # = NULL: no row
            packed: str = session.execute(_latest_on_sqlite(size), values).scalar() or ""
            rows += [
                (at + int(who), int(key), joined)
                for who, key, joined in (part.split(",", 2) for part in packed.split("|"))
            ]
            at += size
    found: list[tuple[int, int, int, str | None]] = []
    for who, key, joined in rows:
        for row in joined.split(";") if joined else ():
            outbox_id, _, kept = row.partition(":")
            found.append((who, key, int(outbox_id), None if kept == "?" else kept))
    return found


_SHAPES = (1, 8, 32)
"""Recipients one statement asks for on SQLite (its places past them given no one): four
queries each, within SQLite's 500 in one compound SELECT."""


@functools.cache
def _latest_on_postgresql() -> TextClause:
    """``_latest_to``'s rows on PostgreSQL, ``(who, keyed, id:fingerprint;...)``, for every
    recipient at once (an array: ``who`` is its place in it, from 0): for each recipient
    and status, a subquery read back along its index from the newest (the partial index
    ``ix_outbox_recipient_secret`` for the keyed: its ``secret`` written as it is). One
    statement of one shape, planned once: the compound SELECT of four queries a recipient
    took 15-50 ms for a batch's hundred senders, most of it PostgreSQL planning it, its
    CPU on the cores the server shares; this, 1.7 ms (7 at forty of our messages each,
    against 24-61). Issue 23. (PostgreSQL plans the subquery once for every recipient: a
    sender whose history is far longer than the others' may have it read whole and
    sorted, as the compound SELECT's keyed query could too: 16 ms for 100 senders, one
    of them with 60,000 of our messages.)"""
    parts = []
    for key, where, limit in ((0, "", SENT_COMPARED), (1, " AND secret", SECRET_COMPARED)):
        parts.append(
            f"SELECT (r.place - 1)::integer AS w, {key} AS k, (SELECT string_agg(q.id::text"
            " || ':' || coalesce(q.fingerprint, '?'), ';') FROM (SELECT id, fingerprint"
            f" FROM outbox WHERE recipient = r.address AND status = s.status{where}"
            f" ORDER BY id DESC LIMIT {limit}) AS q) AS j"
            " FROM unnest(CAST(:recipients AS text[])) WITH ORDINALITY AS r(address, place)"
            " CROSS JOIN (VALUES"
            f" ('{OutboxStatus.SENT.value}'), ('{OutboxStatus.PENDING.value}')) AS s(status)"
        )
    return text(" UNION ALL ".join(parts))


@functools.cache
def _latest_on_sqlite(size: int) -> TextClause:
    # the partial index ix_outbox_recipient_secret serves a query that says what it says:
    # "secret = 1" on SQLite
    secret, joined = "secret = 1", "group_concat(id || ':' || coalesce(fingerprint, '?'), ';')"
    parts: list[str] = []
    for i in range(size):
        for status in (OutboxStatus.SENT, OutboxStatus.PENDING):
            mine = f"recipient = :r{i} AND status = '{status.value}'"
            for key, where, limit in (
                (0, mine, SENT_COMPARED),
                (1, f"{mine} AND {secret}", SECRET_COMPARED),
            ):
                # a fingerprint is hex digests and spaces: "?" is one not kept (None)
                parts.append(
                    f"SELECT {i} AS w, {key} AS k, {joined} AS j FROM (SELECT id, fingerprint"
                    f" FROM outbox WHERE {where} ORDER BY id DESC LIMIT {limit}) AS q{len(parts)}"
                )
    union = " UNION ALL ".join(parts)
    # (the fields hold digits, hex digits, spaces, ":", ";" and "?": never "," nor "|")
    return text(f"SELECT group_concat(w || ',' || k || ',' || coalesce(j, ''), '|') FROM ({union})")


def _fingerprints(session: Session, ids: list[int]) -> dict[int, str]:
    """The fingerprints of these outbox rows (written before it was kept with them), by
    id: those kept in memory by Message-ID, the others worked out from their stored bytes
    (and kept)."""
    if not ids:
        return {}
    rows = session.execute(
        select(OutboxMessage.id, OutboxMessage.message_id).where(
            OutboxMessage.id.in_(sorted(set(ids)))
        )
    ).all()
    kept = sentprints.kept(message_id for _, message_id in rows)
    found = {outbox_id: kept[message_id] for outbox_id, message_id in rows if message_id in kept}
    missing = {outbox_id: message_id for outbox_id, message_id in rows if outbox_id not in found}
    if not missing:
        return found
    # the body with its status and secret, in one statement: on PostgreSQL each statement
    # sees what was committed before it, and a scrub between two would be misread
    for outbox_id, message, is_secret, status in session.execute(
        select(
            OutboxMessage.id, OutboxMessage.message, OutboxMessage.secret, OutboxMessage.status
        ).where(OutboxMessage.id.in_(sorted(missing)))
    ):
        message_id = missing[outbox_id]
        # its body was replaced by its fingerprint: once sent if it held a key (see
        # drain_outbox), or once kept for keep_sent_mail (see retention)
        scrubbed = (is_secret and status == OutboxStatus.SENT) or is_trimmed_sent(message)
        found[outbox_id] = fingerprint_of_sent(message, scrubbed=scrubbed)
        sentprints.remember(message_id, found[outbox_id])
    return found
