"""Building outgoing messages: headers that are safe, stable and loop-proof.

Every message gets its Message-ID when it is enqueued (so a resend after a
crash is recognisable), ``Auto-Submitted`` (RFC 3834) so that no robot
answers it, ``X-Auto-Response-Suppress`` (Exchange and Outlook honour it, not
always Auto-Submitted) against out-of-office replies, and an
``X-SNL-PBEM-Game`` header naming the game so players can filter.

Personal mail (a welcome with its key, replies, reminders, anything to one
player or the referee) looks personal: no ``Precedence`` and no ``List-Id``,
which make filters file a message as list mail. Only a ``broadcast``, the same
mail to every player of a game (round reports, game over, a moved deadline),
carries ``List-Id`` (RFC 2919: it is one distribution to the game's players,
which a player may file in one folder) and ``Precedence: bulk`` (older vacation
programs check only that; RFC 3834 responders skip both).

Player-supplied text never reaches a header unchecked: CR/LF are removed and
the length is capped.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from email.header import Header
from email.utils import format_datetime, formataddr
from functools import lru_cache

MAX_HEADER_TEXT = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def header_text(value: str, limit: int = MAX_HEADER_TEXT) -> str:
    """Text safe for a header: control characters (CR, LF, ...) folded to spaces, capped."""
    return _CONTROL.sub(" ", value).strip()[:limit]


@lru_cache(maxsize=16)
def _from(name: str, address: str) -> str:
    """The From field: the server's name and address, the same in every mail (2.5 us to
    make anew)."""
    return formataddr((header_text(name), address))


@lru_cache(maxsize=16)
def _date(now: datetime, offset: timedelta | None) -> str:
    """The Date field: a round's reports, made at one time, share it (4 us to make). By
    its offset too: to ``now`` alone one instant in two zones is one key, and so are the
    two times of an hour a clock goes back over (``fold``)."""
    return format_datetime(now)


def new_message_id(domain: str) -> str:
    """A Message-ID unique for ever: 128 random bits from the system's generator
    (make_msgid uses the ``random`` module, which a seeded program would make repeat)."""
    return f"<snl.{_random_bits.hex16()}@{domain}>"


class _RandomBits:
    """The system's random bytes, drawn a few kilobytes at a time: one ``os.urandom`` a
    message gave up the interpreter's lock for each, and the intake's writer waited
    about 85 us a message to take it back (issue 23). Dropped in a forked child, which
    must never hand out the bytes its parent hands out."""

    CHUNK = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = b""
        self._at = 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._bytes, self._at = b"", 0

    def hex16(self) -> str:
        with self._lock:
            if self._at + 16 > len(self._bytes):
                self._bytes, self._at = os.urandom(self.CHUNK), 0
            taken = self._bytes[self._at : self._at + 16]
            self._at += 16
        return taken.hex()


_random_bits = _RandomBits()


def compose(
    *,
    sender: str,
    sender_name: str,
    to: str,
    subject: str,
    body: str,
    now: datetime,
    message_id: str,
    game_name: str | None = None,
    auto_submitted: str = "auto-generated",
    broadcast: bool = False,
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
    attachments: Sequence[tuple[str, str, bytes]] = (),
    language: str | None = None,
) -> bytes:
    """A plain-text message as bytes, ready for SMTP (CRLF lines, UTF-8, quoted-printable).

    ``broadcast``: the same mail goes to every player of the game (list headers, see
    above); otherwise the message is personal.
    ``attachments`` are ``(filename, content type, bytes)``, sent base64 after the text.
    ``language`` (a BCP 47 code: "en", "zh-Hans", "th") is the text's ``Content-Language``.

    Built directly rather than through ``EmailMessage``, which costs more than
    everything else a reply needs; every header value here is ours or cleaned.
    """
    domain = sender.rpartition("@")[2]
    fields = [
        ("From", _from(sender_name, sender)),
        ("To", header_text(to, 254)),
        ("Reply-To", sender),
        ("Subject", _encoded(header_text(subject))),
        ("Date", _date(now, now.utcoffset())),
        ("Message-ID", message_id),
        ("Auto-Submitted", auto_submitted),  # RFC 3834: robots must not answer
        ("X-Auto-Response-Suppress", "OOF, AutoReply"),  # bounces (NDR) still come back
    ]
    if game_name is not None:
        fields.append(("X-SNL-PBEM-Game", header_text(game_name, 100)))
        if broadcast:
            fields.append(("Precedence", "bulk"))
            fields.append(
                ("List-Id", f"Snakes and Ladders game {game_name} <{game_name}.{domain}>")
            )
    if in_reply_to is not None:
        parent = _message_id(in_reply_to)
        if parent is not None:
            chain = [i for i in (_message_id(r) for r in references) if i is not None][-10:]
            fields.append(("In-Reply-To", parent))
            fields.append(("References", "\r\n ".join([*chain, parent])))
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    encoded = binascii.b2a_qp(text.encode("utf-8"), istext=True).replace(b"\n", b"\r\n")
    text_headers = [
        ("Content-Type", 'text/plain; charset="utf-8"'),
        ("Content-Transfer-Encoding", "quoted-printable"),
        *([("Content-Language", header_text(language, 35))] if language else []),
    ]
    if not attachments:
        fields += [("MIME-Version", "1.0"), *text_headers]
        return _headers(fields) + b"\r\n" + encoded
    boundary = f"snl-{secrets.token_hex(12)}"
    fields += [("MIME-Version", "1.0"), ("Content-Type", f'multipart/mixed; boundary="{boundary}"')]
    parts = [_headers(text_headers) + b"\r\n" + encoded]
    for filename, content_type, data in attachments:
        name = header_text(filename, 100).replace('"', "")
        b64 = base64.encodebytes(data).replace(b"\n", b"\r\n")
        parts.append(
            _headers(
                [
                    ("Content-Type", f'{content_type}; name="{name}"'),
                    ("Content-Disposition", f'attachment; filename="{name}"'),
                    ("Content-Transfer-Encoding", "base64"),
                ]
            )
            + b"\r\n"
            + b64
        )
    mark = f"--{boundary}".encode()
    body_bytes = b"".join(mark + b"\r\n" + part + b"\r\n" for part in parts) + mark + b"--\r\n"
    return _headers(fields) + b"\r\n" + body_bytes


def _headers(fields: Sequence[tuple[str, str]]) -> bytes:
    return "".join(f"{name}: {value}\r\n" for name, value in fields).encode("ascii")


def _encoded(text: str) -> str:
    """A header value, RFC 2047-encoded (and folded) only when it is not plain ASCII."""
    if text.isascii():
        return text
    return Header(text, "utf-8", header_name="Subject").encode(linesep="\r\n")


_MSGID = re.compile(r"<[\x21-\x3b\x3d\x3f-\x7e]{1,250}@[\x21-\x3b\x3d\x3f-\x7e]{1,250}>")
"""ASCII only: a UTF-8 Message-ID (RFC 6532) of incoming mail is not put in our headers,
which are ASCII; the reply then threads by its subject alone."""


def _message_id(value: str) -> str | None:
    """A message id as it may be put in a header; None for anything else."""
    match = _MSGID.search(value)
    return match.group(0) if match else None
