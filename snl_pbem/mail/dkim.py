"""DKIM signatures on outgoing mail (dkimpy), so players' providers trust the referee.

dkimpy reads the message, canonicalises it and builds the header; the RSA step is
OpenSSL's (``cryptography``). dkimpy's own is Python's ``pow``: 6 ms of CPU a signature
(2048-bit key), holding the interpreter, and every mail is signed when it is written, so a
deadline storm's reports (20,000 at 1,000 games) cost two minutes of it (issue 23).
RSASSA-PKCS1-v1_5 signatures are deterministic: OpenSSL's are byte for byte dkimpy's
(``tests/mail/test_compose.py``). A hash or key OpenSSL does not take falls back to
dkimpy's own, which then signs or refuses as it always did.
"""

from __future__ import annotations

import functools
from typing import Any

import dkim
import dkim.crypto
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

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

_PYTHON_SIGN = dkim.crypto.RSASSA_PKCS1_v1_5_sign
"""dkimpy's RSA step: ``(hash, the key's numbers by name) -> signature``."""
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {"sha256": hashes.SHA256, "sha1": hashes.SHA1}
_NUMBERS = (
    "modulus",
    "publicExponent",
    "privateExponent",
    "prime1",
    "prime2",
    "exponent1",
    "exponent2",
    "coefficient",
)
"""The key's numbers as dkimpy's parser names them (``dkim.crypto.parse_private_key``)."""


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


def _openssl_sign(digest: Any, private_key: dict[str, int]) -> bytes:
    """dkimpy's RSA step (``RSASSA_PKCS1_v1_5_sign``), done by OpenSSL: the same bytes."""
    algorithm = _HASHES.get(str(getattr(digest, "name", "")).lower())
    try:
        if algorithm is None:
            raise ValueError("a hash OpenSSL is not given here")
        key = _key(tuple(int(private_key[name]) for name in _NUMBERS))
        return key.sign(digest.digest(), padding.PKCS1v15(), utils.Prehashed(algorithm()))
    except Exception:  # a key OpenSSL refuses (too small, inconsistent): dkimpy's own way
        return bytes(_PYTHON_SIGN(digest, private_key))


@functools.lru_cache(maxsize=4)
def _key(numbers: tuple[int, ...]) -> rsa.RSAPrivateKey:
    """The key, checked once (the config's; a few if it is changed while running)."""
    n, e, d, p, q, dp, dq, qi = numbers
    return rsa.RSAPrivateNumbers(p, q, d, dp, dq, qi, rsa.RSAPublicNumbers(e, n)).private_key()


dkim.RSASSA_PKCS1_v1_5_sign = _openssl_sign  # what dkimpy's signing calls (dkim.DKIM.gen_header)
