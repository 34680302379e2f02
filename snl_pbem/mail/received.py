"""When the referee's own MTA received a message: its topmost ``Received:`` header.

An MTA that delivers the game address over LMTP prepends its own ``Received:``
header when it accepts a message (Postfix::

    Received: from mail.example.net (mail.example.net [192.0.2.7])
            by mx.example.org (Postfix) with ESMTPS id 4Xyz1ABCDEF
            for <snl@example.org>; Mon, 30 Nov 2026 02:43:07 +0000 (UTC)

). Every header below it, and ``Date:``, the sender could have written; the
topmost one the MTA wrote itself, whatever the message held. So only the topmost
``Received:`` is read, its ``by`` clause must name the configured host, and its
date (after the last ``;``, which the MTA writes last) must fall in
``[now - max_age, now]``; otherwise None, and the caller times the message at
receipt, as without the setting.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

HEADER_LIMIT = 256 * 1024
"""At most this much of a message is searched for its header block."""

_COMMENT = re.compile(r"\([^()]*\)")
_END_OF_HEADER = re.compile(rb"\r?\n\r?\n")


def topmost_received(raw: bytes) -> str | None:
    """The first ``Received:`` field of the header block, unfolded, or None."""
    head = raw[:HEADER_LIMIT]
    end = _END_OF_HEADER.search(head)
    if end is not None:
        head = head[: end.start()]
    field: list[str] = []
    for line in head.decode("latin-1").splitlines():
        if field and line[:1] in (" ", "\t"):
            field.append(line.strip())
            continue
        if field:
            break
        name, colon, value = line.partition(":")
        if colon and name.strip().lower() == "received":
            field = [value.strip()]
    return " ".join(field) if field else None


def received_by(value: str) -> tuple[str, datetime] | None:
    """``(by host, date)`` of one ``Received:`` value, or None if it is not well formed.

    The clauses before the last ``;`` are read as RFC 5321's keyword-value pairs (``from``,
    ``by``, ``via``, ``with``, ``id``, ``for``) once comments are removed, so a HELO name
    such as ``by`` cannot pass for the ``by`` clause."""
    clauses, semicolon, when = value.rpartition(";")
    if not semicolon:
        return None
    text = clauses
    for _ in range(8):  # nested comments, innermost first
        text, count = _COMMENT.subn(" ", text)
        if not count:
            break
    if "(" in text or ")" in text:
        return None
    tokens = text.split()
    if len(tokens) % 2:
        return None
    pairs = list(zip(tokens[0::2], tokens[1::2], strict=True))
    hosts = [v for k, v in pairs if k.lower() == "by"]
    if len(hosts) != 1:
        return None
    try:
        date = parsedate_to_datetime(_COMMENT.sub(" ", when).strip())
    except (TypeError, ValueError, IndexError):
        return None
    if date.tzinfo is None:  # "-0000": UTC, its local zone unknown
        date = date.replace(tzinfo=UTC)
    return hosts[0].rstrip(".").lower(), date.astimezone(UTC)


def mta_receipt_time(
    raw: bytes, hostname: str, now: datetime, max_age: timedelta
) -> datetime | None:
    """When the MTA named ``hostname`` received ``raw``, by its topmost ``Received:``
    header; None unless that header is the MTA's own and its date is in
    ``[now - max_age, now]``."""
    value = topmost_received(raw)
    if value is None:
        return None
    parsed = received_by(value)
    if parsed is None:
        return None
    host, date = parsed
    if host != hostname.rstrip(".").lower():
        return None
    if date > now or date < now - max_age:
        return None
    return date
