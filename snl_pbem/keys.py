"""Order keys: generated for players, stored only as salted hashes, never logged.

A generated key is 16 letters and digits in four groups (``k7mq-x2pa-9dfe-tw3h``:
about 79 bits), without look-alikes (0/o, 1/l/i). Keys are not case-sensitive:
phones capitalise.

A key is stored as HMAC-SHA256 under a random per-game salt. That is a
*fast* salted hash, chosen on purpose: a 79-bit random key cannot be found by
brute force however fast the hash, and a slow hash (scrypt, ~6 ms) on every
incoming order would cap intake at a few hundred messages a second and buy
nothing for random keys. Because the salt is per game, the hash of a key as
written in an email finds its player with one index lookup. Keys a referee
sets in the config are their choice (they are in the config file in clear
anyway); check-config warns about short ones.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable

ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
SCHEME = "h1"
WEAK_BELOW = 10


def normalise(key: str) -> str:
    return key.strip().lower()


def generate_key(choice: Callable[[str], str] = secrets.choice) -> str:
    """A new key. ``choice`` picks each character (a seeded one, for a test's keys)."""
    raw = "".join(choice(ALPHABET) for _ in range(16))
    return "-".join(raw[i : i + 4] for i in range(0, 16, 4))


def new_salt() -> str:
    return secrets.token_hex(16)


def hash_key(key: str, game_salt: str) -> str:
    """``h1$<hex>``: HMAC-SHA256 of the normalised key under the game's salt."""
    digest = hmac.new(bytes.fromhex(game_salt), normalise(key).encode(), "sha256").hexdigest()
    return f"{SCHEME}${digest}"


def verify_key(key: str, stored: str | None, game_salt: str) -> bool:
    """Whether ``key`` matches a stored hash (constant-time comparison)."""
    if not stored:
        return False
    return hmac.compare_digest(hash_key(key, game_salt), stored)
