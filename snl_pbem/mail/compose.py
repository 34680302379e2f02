"""Building outgoing messages: headers that are safe, stable and loop-proof.

Every message gets its Message-ID when it is enqueued (so a resend after a
crash is recognisable), ``Auto-Submitted`` (RFC 3834) so that no robot
answers it, and a ``List-Id``-style game header so players can filter.
Player-supplied text never reaches a header unchecked: CR/LF are removed and
the length is capped.
"""

from __future__ import annotations

import binascii
import re
import secrets
from collections.abc import Sequence
from datetime import datetime
from email.header import Header
from email.utils import format_datetime, formataddr

MAX_HEADER_TEXT = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def header_text(value: str, limit: int = MAX_HEADER_TEXT) -> str:
    """Text safe for a header: control characters (CR, LF, ...) folded to spaces, capped."""
    return _CONTROL.sub(" ", value).strip()[:limit]


def new_message_id(domain: str) -> str:
    """A Message-ID unique for ever: 128 random bits from ``secrets`` (make_msgid uses the
    ``random`` module, which a seeded program would make repeat)."""
    return f"<snl.{secrets.token_hex(16)}@{domain}>"


def compose(
    *,
    sender: str,
    sender_name: str,
    to: str,
    subject: str,
    body: str,
    now: datetime,
    message_id: str,
    game_key: str | None = None,
    auto_submitted: str = "auto-generated",
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
) -> bytes:
    """A plain-text message as bytes, ready for SMTP (CRLF lines, UTF-8, quoted-printable).

    Built directly rather than through ``EmailMessage``, which costs more than
    everything else a reply needs; every header value here is ours or cleaned.
    """
    domain = sender.rpartition("@")[2]
    fields = [
        ("From", formataddr((header_text(sender_name), sender))),
        ("To", header_text(to, 254)),
        ("Reply-To", sender),
        ("Subject", _encoded(header_text(subject))),
        ("Date", format_datetime(now)),
        ("Message-ID", message_id),
        ("Auto-Submitted", auto_submitted),  # RFC 3834: robots must not answer
        ("Precedence", "bulk" if auto_submitted == "auto-generated" else "auto_reply"),
    ]
    if game_key is not None:
        fields.append(("List-Id", f"Snakes and Ladders game {game_key} <{game_key}.{domain}>"))
    if in_reply_to is not None:
        parent = _message_id(in_reply_to)
        if parent is not None:
            chain = [i for i in (_message_id(r) for r in references) if i is not None][-10:]
            fields.append(("In-Reply-To", parent))
            fields.append(("References", "\r\n ".join([*chain, parent])))
    fields += [
        ("MIME-Version", "1.0"),
        ("Content-Type", 'text/plain; charset="utf-8"'),
        ("Content-Transfer-Encoding", "quoted-printable"),
    ]
    head = "".join(f"{name}: {value}\r\n" for name, value in fields).encode("ascii")
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    encoded = binascii.b2a_qp(text.encode("utf-8"), istext=True).replace(b"\n", b"\r\n")
    return head + b"\r\n" + encoded


def _encoded(text: str) -> str:
    """A header value, RFC 2047-encoded (and folded) only when it is not plain ASCII."""
    if text.isascii():
        return text
    return Header(text, "utf-8", header_name="Subject").encode(linesep="\r\n")


_MSGID = re.compile(r"<[^<>\s]{1,250}@[^<>\s]{1,250}>")


def _message_id(value: str) -> str | None:
    """A message id as it may be put in a header; None for anything else."""
    match = _MSGID.search(value)
    return match.group(0) if match else None
