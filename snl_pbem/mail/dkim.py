"""DKIM signatures on outgoing mail (dkimpy), so players' providers trust the referee.

dkimpy reads the message, canonicalises it and builds the header; the RSA step is
OpenSSL's (``cryptography``). dkimpy's own is Python's ``pow``: 6 ms of CPU a signature
(2048-bit key), holding the interpreter, and every mail is signed when it is written, so a
deadline storm's reports (20,000 at 1,000 games) cost two minutes of it (issue 23).
RSASSA-PKCS1-v1_5 signatures are deterministic: OpenSSL's are byte for byte dkimpy's
(``tests/mail/test_compose.py``). A hash or key OpenSSL does not take falls back to
dkimpy's own, which then signs or refuses as it always did. The key file's PEM is parsed
once, not for every mail (dkimpy's parser is Python: 130 us, a quarter of a signature).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import dkim
import dkim.crypto

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

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
_PYTHON_PARSE = dkim.crypto.parse_pem_private_key
"""dkimpy's parse of a PEM key: ``pem -> the key's numbers by name``."""
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
    """dkimpy's RSA step (``RSASSA_PKCS1_v1_5_sign``), done by OpenSSL: the same bytes.
    Anything OpenSSL does not take (a hash other than SHA-256 or SHA-1, a key it refuses:
    too small, inconsistent; ``cryptography`` not importable) is dkimpy's own, which
    signs or raises as it always did (raised outside this ``try``: not chained to it)."""
    try:
        signed = _signed_by_openssl(digest, private_key)
    except Exception:
        signed = None
    if signed is None:
        return bytes(_PYTHON_SIGN(digest, private_key))
    return signed


def _signed_by_openssl(digest: Any, private_key: dict[str, int]) -> bytes | None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, utils

    name = str(getattr(digest, "name", "")).lower()
    algorithm = {"sha256": hashes.SHA256, "sha1": hashes.SHA1}.get(name)
    if algorithm is None:
        return None
    key = _key(tuple(int(private_key[number]) for number in _NUMBERS))
    return key.sign(digest.digest(), padding.PKCS1v15(), utils.Prehashed(algorithm()))


@functools.lru_cache(maxsize=4)
def _key(numbers: tuple[int, ...]) -> RSAPrivateKey:
    """The key, checked once: the config's, or a few if it is changed while running."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    n, e, d, p, q, dp, dq, qi = numbers
    return rsa.RSAPrivateNumbers(p, q, d, dp, dq, qi, rsa.RSAPublicNumbers(e, n)).private_key()


@functools.lru_cache(maxsize=4)
def _parsed(pem: bytes) -> dict[str, int]:
    return dict(_PYTHON_PARSE(pem))


def _parsed_once(pem: bytes) -> dict[str, int]:
    """dkimpy's parse of a PEM key (``parse_pem_private_key``), made once for each key: a
    copy each call (nothing dkimpy does with it reaches the one kept). A key it cannot
    parse raises as before, every time."""
    return dict(_parsed(bytes(pem)))


# what dkimpy's signing calls (dkim.DKIM.sign, dkim.DKIM.gen_header)
dkim.parse_pem_private_key = _parsed_once
dkim.RSASSA_PKCS1_v1_5_sign = _openssl_sign
