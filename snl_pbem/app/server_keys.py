"""The referee's key (``mail.referee_key``), kept in the database only as a hash.

Referee commands by mail must carry it (``snl_pbem.app.commands.referee``). It is hashed like
an order key (HMAC-SHA256, ``snl_pbem.keys``) under a salt of its own, drawn afresh
whenever the key changes; a config without one deletes the row, and no command by mail is
obeyed. ``sync_games`` keeps the row in step with the config.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from snl_pbem.app.lookup import audit
from snl_pbem.app.txcache import forget, remember
from snl_pbem.config import Config
from snl_pbem.keys import hash_key, new_salt, verify_key
from snl_pbem.store import ServerKey

REFEREE = "referee"
"""``ServerKey.name`` of the referee's key."""


def sync_referee_key(session: Session, config: Config, now: datetime, actor: str) -> str | None:
    """Store the config's referee key (hashed, a new salt when it changed), or delete it
    when the config has none; a line saying what changed, or None when nothing did."""
    key = config.settings.mail.referee_key
    forget(session)  # the key read before may change here
    row = session.get(ServerKey, REFEREE)
    if key is None:
        if row is None:
            return None
        session.delete(row)
        change = "removed from the config: referee commands by mail are off"
    elif row is not None and verify_key(key, row.key_hash, row.salt):
        return None
    else:
        salt = new_salt()
        if row is None:
            row = ServerKey(name=REFEREE, key_hash=hash_key(key, salt), salt=salt, updated_at=now)
            session.add(row)
            change = "set: referee commands by mail are on"
        else:
            row.key_hash, row.salt, row.updated_at = hash_key(key, salt), salt, now
            change = "changed: the old one no longer works"
    audit(session, now, actor, "referee-key", None)
    return f"the referee key (mail.referee_key) {change}"


def is_referee_key(session: Session, key: str | None) -> bool:
    """Whether ``key`` is the referee's key (False when none is set)."""
    if not key:
        return False
    row = remember(session, ("server key", REFEREE), lambda: session.get(ServerKey, REFEREE))
    return row is not None and verify_key(key, row.key_hash, row.salt)
