"""The fingerprints of the mail we sent (``snl_pbem.mail.ours``) written before each was
kept with its outbox row (``OutboxMessage.fingerprint``, migration 0011), kept in memory by
Message-ID once worked out from the stored bytes: unique for ever, and the same before and
after a scrub, so each is worked out once per process (``reading._fingerprints``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

KEPT = 20_000
"""Fingerprints kept; past it the older half is forgotten (worked out again if needed)."""

_prints: dict[str, str] = {}
_lock = threading.Lock()


def remember(message_id: str, value: str) -> None:
    with _lock:
        if len(_prints) >= KEPT:
            for old in list(_prints)[: KEPT // 2]:
                del _prints[old]
        _prints[message_id] = value


def kept(message_ids: Iterable[str]) -> dict[str, str]:
    """The fingerprints kept of these ``message_ids`` (those not kept are left out): a
    reader works with this copy, which a write forgetting the older half cannot empty."""
    with _lock:
        return {m: _prints[m] for m in message_ids if m in _prints}
