"""Which server closes a game's round when several share one PostgreSQL: a per-game claim.

At a deadline every server tries every due round, each in an order of its own
(``RoundScheduler._spread``). The scheduler's decision (``decide(claim=True)``) and then
``close_round(skip_locked=True)`` take the game's claim without waiting, and a game
another server holds is skipped (``Busy``, ``RoundBusy``) and looked at again shortly,
rather than waited for, so each server gets on with the games nobody has taken. The claim
only spreads the work: the round's guarded state change (``UPDATE ... WHERE state =
'open'``) is what closes it once.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import func, select
from sqlalchemy.orm import Session


def claim_closing(session: Session, game_name: str, *, wait: bool) -> bool:
    """PostgreSQL: take the game's closing claim for this transaction (first thing in it,
    so that waiting for it never holds another lock); without ``wait``, False if another
    close holds it.

    A lock of its own, not the game row's: intake and the referee's commands lock the game
    row for a moment (an order stored, a player added), and a close is to wait for those as
    it always has; SKIP LOCKED on the row would put the close off for them, and for any
    insert that refers to the game (a foreign key's share lock). Released at commit or
    rollback, and with the connection if the server dies."""
    digest = hashlib.sha256(f"snl-pbem close {game_name}".encode()).digest()
    key = int.from_bytes(digest[:8], "big", signed=True)
    take = func.pg_advisory_xact_lock if wait else func.pg_try_advisory_xact_lock
    taken = session.scalar(select(take(key)))
    return wait or bool(taken)  # pg_advisory_xact_lock returns nothing: it has waited
