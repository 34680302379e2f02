"""DKIM signatures on outgoing mail (dkimpy), so players' providers trust the referee."""

from __future__ import annotations

import dkim

SIGNED_HEADERS = (
    b"from",
    b"to",
    b"subject",
    b"date",
    b"message-id",
    b"reply-to",
    b"in-reply-to",
    b"references",
    b"auto-submitted",
    b"list-id",
    b"mime-version",
    b"content-type",
)


def sign(message: bytes, *, selector: str, domain: str, private_key: bytes) -> bytes:
    """The message with a DKIM-Signature header in front (relaxed/relaxed)."""
    signature = dkim.sign(
        message,
        selector.encode(),
        domain.encode(),
        private_key,
        include_headers=list(SIGNED_HEADERS),
        canonicalize=(b"relaxed", b"relaxed"),
    )
    return bytes(signature) + message
