"""How long raw inbound mail is kept whole (``[mail] keep_processed_mail``).

Every message is stored as received (``inbound_messages.raw``) before anything else
happens. Once it has been handled -- processed, rejected, ignored or a duplicate -- and
is older than ``keep_processed_mail``, its body is no longer needed (and holds a player's
order key): :func:`purge_raw_mail` replaces the raw bytes by the message's header block,
so the referee still sees who sent what, and when (``inbound show ID``). Mail set aside
(``set-aside``) or not yet processed (``new``) is never trimmed: the referee may still
retry it. The row's other columns (SHA-256 of the original bytes, Message-ID, mailbox
UID, sender) stay, so the same message arriving again is still recognised.

A trimmed message starts with an ``X-SNL-PBEM-Trimmed:`` header saying when and how
much was removed; it is how the next purge knows the row is done. The scheduler runs
the purge at start-up and once a day.

Mail we sent (``outbox.message``) is kept whole for ``[mail] keep_sent_mail`` after it was
sent; then :func:`purge_sent_mail` cuts it to its headers and the fingerprint of its lines
(:func:`snl_pbem.mail.ours.scrubbed`, as a message holding a key is scrubbed once sent):
the intake still knows a pasted copy of it as ours (``snl_pbem.app.intake.reading``), a
bounce still names its subject, and ``outbox show`` still shows who was sent what, when.
Only mail sent is cut: mail waiting, failed (the referee may send it again) or bounced
before then stays whole. Rows are never deleted: a host of a thousand games writes some
21,000 messages at each deadline, and a cut one keeps about 1 KB (a round report of 20
players, half its bytes; a game's last mail loses its replay file, 16 KB in a game of
eight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import LargeBinary, and_, bindparam, func, literal, not_, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.sql.elements import ColumnElement

from snl_pbem.mail.ours import scrubbed
from snl_pbem.store import Database
from snl_pbem.store.models import InboundMessage, OutboxMessage
from snl_pbem.store.states import InboundStatus, OutboxStatus
from snl_pbem.timeutil import format_duration

TRIMMABLE = (
    InboundStatus.PROCESSED,
    InboundStatus.REJECTED,
    InboundStatus.IGNORED,
    InboundStatus.DUPLICATE,
)
"""Statuses whose raw bytes may be trimmed; never ``new`` or ``set-aside``."""
TRIMMED_HEADER = b"X-SNL-PBEM-Trimmed: "
HEADER_LIMIT = 64 * 1024
"""A header block longer than this is cut (at a line end) when the body is removed."""
LARGEST_TRIMMED = HEADER_LIMIT + 1024
"""No trimmed message is longer than this (the header block, the mark, line ends)."""


def headers_only(raw: bytes, now: datetime, keep: timedelta) -> bytes:
    """The message's header block (up to the first empty line), after a header saying
    that the body was removed; the result ends with an empty line (an empty body)."""
    if raw.startswith((b"\r\n", b"\n")):
        head = b""
    else:
        ends = [i + len(sep) // 2 for sep in (b"\r\n\r\n", b"\n\n") if (i := raw.find(sep)) >= 0]
        head = raw[: min(ends)] if ends else raw
    eol = b"\n" if head and b"\r\n" not in head else b"\r\n"
    cut = ""
    if len(head) > HEADER_LIMIT:
        line_end = head.rfind(b"\n", 0, HEADER_LIMIT)
        head = head[: line_end + 1] if line_end >= 0 else head[:HEADER_LIMIT]
        cut = f"; headers cut at {len(head)} bytes"
    if head and not head.endswith(b"\n"):
        head += eol
    mark = _mark(now, keep, "keep_processed_mail", f"{len(raw)} bytes as received{cut}")
    return mark + eol + head + eol


def _mark(now: datetime, keep: timedelta, setting: str, what: str) -> bytes:
    """The header line (without its line end) that a trimmed message starts with."""
    when = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    mark = f"body removed {when}, kept {format_duration(keep)} ({setting}); {what}"
    return TRIMMED_HEADER + mark.encode("ascii")


def _starts_with_mark(column: InstrumentedAttribute[bytes]) -> ColumnElement[bool]:
    return func.substr(column, 1, len(TRIMMED_HEADER)) == literal(TRIMMED_HEADER, LargeBinary)


def _trimmed() -> ColumnElement[bool]:
    """Rows already trimmed: they start with the mark and are no longer than a trimmed
    message can be (a sender who writes the mark himself gets a large message trimmed)."""
    return and_(
        _starts_with_mark(InboundMessage.raw),
        func.length(InboundMessage.raw) <= LARGEST_TRIMMED,
    )


def purge_raw_mail(
    session: Session, now: datetime, keep: timedelta | None, *, limit: int | None = None
) -> int:
    """Trim handled inbound mail received more than ``keep`` before ``now`` to its headers;
    returns how many messages were trimmed. ``keep`` None keeps everything. ``limit`` trims
    at most that many (the oldest first), so a caller can keep transactions short.

    Each row is rewritten under the same conditions it was chosen by, so two servers
    purging at once trim each message once. The caller commits."""
    return _purge(session, _INBOUND, now, keep, 0, limit)[0]


def purge_batch(
    db: Database, now: datetime, keep: timedelta | None, limit: int, after: int = 0
) -> tuple[int, int | None]:
    """``purge_raw_mail`` for at most ``limit`` messages after the row ``after``: how many
    were trimmed, and the last row looked at (None: no more are due). See ``_purge_batch``."""
    return _purge_batch(db, _INBOUND, now, keep, limit, after)


SENT_NOTE = (
    b"\r\n[Body removed after keep_sent_mail. Below: a fingerprint of its lines (no text), "
    b"so that a copy pasted in a reply is still known as ours.]\r\n"
)


def sent_headers_only(raw: bytes, now: datetime, keep: timedelta) -> bytes:
    """A message we sent, as it is kept after ``keep_sent_mail``: the mark, its headers, a
    note for the reader and the fingerprint of its lines (``scrubbed``). Our own mail: its
    headers are ours and short, and never start with the mark. A short message may grow
    by up to some 250 bytes (the mark and the note): it is cut all the same, once."""
    mark = _mark(now, keep, "keep_sent_mail", f"{len(raw)} bytes as sent")
    return mark + b"\r\n" + scrubbed(raw, SENT_NOTE)


def is_trimmed_sent(message: bytes) -> bool:
    """Whether a message we sent was cut by :func:`purge_sent_mail` (its fingerprint is
    then read from its body, as a scrubbed one's is): we never write the mark first."""
    return message.startswith(TRIMMED_HEADER)


def purge_sent_mail(
    session: Session,
    now: datetime,
    keep: timedelta | None,
    *,
    after: int = 0,
    limit: int | None = None,
) -> tuple[int, int | None]:
    """Cut mail we sent more than ``keep`` before ``now`` to its headers and fingerprint
    (:func:`sent_headers_only`), the oldest first, those after the row ``after``; ``limit``
    cuts at most that many. Returns how many were cut and the last row looked at, or None
    when no more are due. Mail holding a key is scrubbed once sent already, and mail
    waiting, failed, or bounced before then is never cut. The caller commits."""
    return _purge(session, _SENT, now, keep, after, limit)


def purge_sent_batch(
    db: Database, now: datetime, keep: timedelta | None, limit: int, after: int = 0
) -> tuple[int, int | None]:
    """``purge_sent_mail`` for at most ``limit`` messages: see ``_purge_batch``."""
    return _purge_batch(db, _SENT, now, keep, limit, after)


def _sent_due(now: datetime, keep: timedelta) -> ColumnElement[bool]:
    return and_(
        # a function of the column (a no-op: it is never NULL), so that the rows are
        # walked in the primary key's order from ``after``: SQLite, without statistics,
        # took the (status, next_attempt_at) index and sorted every sent row at each batch
        func.coalesce(OutboxMessage.status, "") == OutboxStatus.SENT,
        not_(OutboxMessage.secret),
        OutboxMessage.sent_at < now - keep,
        not_(_starts_with_mark(OutboxMessage.message)),
    )


def _inbound_due(now: datetime, keep: timedelta) -> ColumnElement[bool]:
    return and_(
        InboundMessage.status.in_(TRIMMABLE),
        InboundMessage.received_at < now - keep,
        not_(_trimmed()),
    )


@dataclass(frozen=True)
class _Kept:
    """What a purge cuts: the table's id and bytes, which rows are due, their new bytes."""

    id: InstrumentedAttribute[int]
    data: InstrumentedAttribute[bytes]
    due: Callable[[datetime, timedelta], ColumnElement[bool]]
    cut: Callable[[bytes, datetime, timedelta], bytes]


_INBOUND = _Kept(InboundMessage.id, InboundMessage.raw, _inbound_due, headers_only)
_SENT = _Kept(OutboxMessage.id, OutboxMessage.message, _sent_due, sent_headers_only)


def _purge(
    session: Session,
    kept: _Kept,
    now: datetime,
    keep: timedelta | None,
    after: int,
    limit: int | None,
) -> tuple[int, int | None]:
    if keep is None:
        return 0, None
    cuts, last = _find(session, kept, now, keep, after, limit)
    return _write(session, kept, cuts, now, keep), last


def _purge_batch(
    db: Database,
    kept: _Kept,
    now: datetime,
    keep: timedelta | None,
    limit: int,
    after: int,
) -> tuple[int, int | None]:
    """At most ``limit`` rows after the row ``after`` (so that a caller going on in
    batches reads each row once): found, and their new bytes made, in a transaction that
    only reads (on SQLite it holds no write lock while it goes through the table), then
    written in a short one of their own."""
    if keep is None:
        return 0, None
    with db.reading() as session:
        cuts, last = _find(session, kept, now, keep, after, limit)
    if not cuts:
        return 0, last
    with db.transaction() as session:
        return _write(session, kept, cuts, now, keep), last


def _find(
    session: Session,
    kept: _Kept,
    now: datetime,
    keep: timedelta,
    after: int,
    limit: int | None,
) -> tuple[list[tuple[int, bytes]], int | None]:
    """The rows due after ``after``, the oldest first, at most ``limit``, each with its new
    bytes (read 100 at a time: a stored message may be large); and the last of them when
    there may be more (else None)."""
    query = select(kept.id).where(kept.id > after, kept.due(now, keep)).order_by(kept.id)
    ids = list(session.scalars(query if limit is None else query.limit(limit)))
    cuts: list[tuple[int, bytes]] = []
    for start in range(0, len(ids), 100):
        rows = session.execute(
            select(kept.id, kept.data).where(kept.id.in_(ids[start : start + 100]))
        ).all()
        cuts.extend((row_id, kept.cut(data, now, keep)) for row_id, data in rows)
    more = limit is not None and len(ids) == limit
    return sorted(cuts), ids[-1] if more else None


def _write(
    session: Session, kept: _Kept, cuts: list[tuple[int, bytes]], now: datetime, keep: timedelta
) -> int:
    """Write these rows' new bytes, each under the conditions it was chosen by (it may have
    changed since: a message bounced, or another server cut it), so each is cut once."""
    statement = (  # built once: a row's writing is then the database's work alone
        update(kept.id.class_)
        .where(kept.id == bindparam("row"), kept.due(now, keep))
        .values({kept.data: bindparam("cut")})
        .execution_options(synchronize_session=False)
    )
    connection = session.connection()
    return sum(
        connection.execute(statement, {"row": row_id, "cut": data}).rowcount
        for row_id, data in cuts
    )
