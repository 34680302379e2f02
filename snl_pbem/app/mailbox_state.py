"""A mailbox's state in the database: who polls it (a lease, so two servers never read
one mailbox at once), and its health (the last good poll, the last failure), which the
circuit breaker and the closes read. The poller's hooks (``snl_pbem.runners.mailboxes``)
call these at the right moments."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from snl_pbem.store import Database, MailboxState


def ensure_state(db: Database, source: str) -> None:
    """The mailbox's row, created once (by whichever process comes first)."""
    with db.transaction() as session:
        if session.get(MailboxState, source) is not None:
            return
    try:
        with db.transaction() as session:
            session.add(MailboxState(source=source))
    except IntegrityError:
        pass  # another process created it first


def take_lease(
    db: Database,
    source: str,
    owner: str,
    now: datetime,
    until: datetime,
    dead: Callable[[str], bool],
) -> bool:
    """Take the lease if it is free, ``owner``'s, expired, or held by a process ``dead``
    says is gone; True when ``owner`` holds it until ``until``."""
    with db.transaction() as session:
        holder = session.scalar(select(MailboxState.owner).where(MailboxState.source == source))
        stale = holder if holder and dead(holder) else None
        taken = session.execute(
            update(MailboxState)
            .where(
                MailboxState.source == source,
                or_(
                    MailboxState.owner.is_(None),
                    MailboxState.owner == owner,
                    MailboxState.owner == stale,
                    MailboxState.lease_until < now,
                ),
            )
            .values(owner=owner, lease_until=until)
            .execution_options(synchronize_session=False)
        )
        return bool(taken.rowcount)  # type: ignore[attr-defined]


def release_lease(db: Database, source: str, owner: str) -> None:
    with db.transaction() as session:
        session.execute(
            update(MailboxState)
            .where(MailboxState.source == source, MailboxState.owner == owner)
            .values(owner=None, lease_until=None)
            .execution_options(synchronize_session=False)
        )


def record_good_poll(
    db: Database, source: str, started: datetime, now: datetime, uidvalidity: int
) -> None:
    """A poll that began at ``started`` read the mailbox to its end."""
    with db.transaction() as session:
        state = session.get(MailboxState, source)
        if state is not None:
            state.last_ok_at, state.uidvalidity = started, uidvalidity
            if state.healthy_since is None:
                state.healthy_since = now


def record_failed_poll(db: Database, source: str, error: str, now: datetime) -> None:
    with db.transaction() as session:
        state = session.get(MailboxState, source)
        if state is not None:
            state.last_error, state.last_error_at = error[:2000], now
            state.healthy_since = None


def intake_health(db: Database, source: str) -> tuple[datetime | None, datetime | None]:
    """``(last good poll, healthy since)`` of one mailbox."""
    with db.transaction() as session:
        state = session.get(MailboxState, source)
        return (state.last_ok_at, state.healthy_since) if state else (None, None)


def last_good_poll(db: Database, source: str) -> datetime | None:
    with db.transaction() as session:
        return session.scalar(select(MailboxState.last_ok_at).where(MailboxState.source == source))
