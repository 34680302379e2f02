"""Order keys: generated for players, stored only as salted hashes, never logged.

A generated key is 16 letters and digits in four groups (``k7mq-x2pa-9dfe-tw3h``,
about 79 bits), without look-alikes (0/o, 1/l/i). Keys are not case-sensitive:
phones capitalise. Each player's key is stored as an scrypt hash with its own
salt; a short tag, salted per game, finds the player whose hash to check
without trying every player's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**12, 8, 1


def normalise(key: str) -> str:
    return key.strip().lower()


def generate_key() -> str:
    raw = "".join(secrets.choice(ALPHABET) for _ in range(16))
    return "-".join(raw[i : i + 4] for i in range(0, 16, 4))


def new_salt() -> str:
    return secrets.token_hex(16)


def hash_key(key: str) -> str:
    """``scrypt$n$r$p$salt$hash`` (base64) of the normalised key."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        normalise(key).encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_key(key: str, stored: str | None) -> bool:
    """Whether ``key`` matches a stored hash (constant-time comparison)."""
    if not stored:
        return False
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        computed = hashlib.scrypt(
            normalise(key).encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=32,
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(computed, base64.b64decode(digest))


def key_tag(key: str, game_salt: str) -> str:
    """8 hex characters: enough to find the candidate player, far too few to reveal a key."""
    return hmac.new(bytes.fromhex(game_salt), normalise(key).encode(), "sha256").hexdigest()[:8]
