"""Building outgoing messages: headers that are safe, stable and loop-proof.

Every message gets its Message-ID when it is enqueued (so a resend after a
crash is recognisable), ``Auto-Submitted`` (RFC 3834) so that no robot
answers it, and a ``List-Id``-style game header so players can filter.
Player-supplied text never reaches a header unchecked: CR/LF are removed and
the length is capped.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from datetime import datetime
from email.message import EmailMessage
from email.policy import SMTP
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
    """A plain-text message as bytes, ready for SMTP."""
    domain = sender.rpartition("@")[2]
    msg = EmailMessage(policy=SMTP)
    msg["From"] = formataddr((header_text(sender_name), sender))
    msg["To"] = to
    msg["Reply-To"] = sender
    msg["Subject"] = header_text(subject)
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = message_id
    msg["Auto-Submitted"] = auto_submitted  # RFC 3834: robots must not answer
    msg["Precedence"] = "bulk" if auto_submitted == "auto-generated" else "auto_reply"
    if game_key is not None:
        msg["List-Id"] = f"Snakes and Ladders game {game_key} <{game_key}.{domain}>"
    if in_reply_to is not None:
        msg["In-Reply-To"] = header_text(in_reply_to, 998)
        chain = [header_text(r, 998) for r in references][-10:]
        msg["References"] = " ".join([*chain, header_text(in_reply_to, 998)])
    msg.set_content(body, charset="utf-8")
    return msg.as_bytes()
