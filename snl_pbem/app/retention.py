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
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import LargeBinary, and_, func, literal, not_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from snl_pbem.store import Database
from snl_pbem.store.models import InboundMessage
from snl_pbem.store.states import InboundStatus
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
    when = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    mark = (
        f"body removed {when}, kept {format_duration(keep)} (keep_processed_mail); "
        f"{len(raw)} bytes as received{cut}"
    )
    return TRIMMED_HEADER + mark.encode("ascii") + eol + head + eol


def _trimmed() -> ColumnElement[bool]:
    """Rows already trimmed: they start with the mark and are no longer than a trimmed
    message can be (a sender who writes the mark himself gets a large message trimmed)."""
    return and_(
        func.substr(InboundMessage.raw, 1, len(TRIMMED_HEADER))
        == literal(TRIMMED_HEADER, LargeBinary),
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
    if keep is None:
        return 0
    due = and_(
        InboundMessage.status.in_(TRIMMABLE),
        InboundMessage.received_at < now - keep,
        not_(_trimmed()),
    )
    query = select(InboundMessage.id).where(due).order_by(InboundMessage.id)
    ids = list(session.scalars(query if limit is None else query.limit(limit)))
    trimmed = 0
    for start in range(0, len(ids), 100):
        rows = session.execute(
            select(InboundMessage.id, InboundMessage.raw).where(
                InboundMessage.id.in_(ids[start : start + 100])
            )
        ).all()
        for row_id, raw in rows:
            result = session.execute(
                update(InboundMessage)
                .where(InboundMessage.id == row_id, due)
                .values(raw=headers_only(raw, now, keep))
                .execution_options(synchronize_session=False)
            )
            trimmed += result.rowcount  # type: ignore[attr-defined]
    return trimmed


def purge_batch(db: Database, now: datetime, keep: timedelta | None, limit: int) -> int:
    """One transaction of ``purge_raw_mail`` (at most ``limit`` messages)."""
    with db.transaction() as session:
        return purge_raw_mail(session, now, keep, limit=limit)
