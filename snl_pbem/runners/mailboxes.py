"""Wiring the mail intakes to the database: leases, health, and ``ingest``.

The IMAP poller and the LMTP receiver (``snl_pbem.mail``) know nothing of
the database; this module gives them what they call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from snl_pbem.app.intake import IngestResult, ingest
from snl_pbem.config import Config
from snl_pbem.mail.imap import ImapPoller, MailboxConfig
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.mail.received import mta_receipt_time
from snl_pbem.procs import dead_here, identity
from snl_pbem.store import Database, MailboxState
from snl_pbem.timeutil import format_duration, utcnow

log = logging.getLogger("snl_pbem.mailboxes")

LEASE = timedelta(minutes=5)


class DatabaseHooks:
    """The IMAP poller's hooks, backed by the mailbox_state table and ``ingest``."""

    def __init__(
        self,
        db: Database,
        config: Config,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.clock = clock
        self.owner = owner or identity()
        self.results: list[IngestResult] = []
        self._poll_started: datetime | None = None

    def deliver(
        self,
        raw: bytes,
        source: str,
        uidvalidity: int,
        uid: int,
        arrived: datetime | None = None,
        size: int | None = None,
    ) -> bool:
        """Store one message; its receipt time is when our mail server received it (the
        mailbox's INTERNALDATE), so an outage of this server costs no order its deadline."""
        now = self.clock()
        received = min(arrived, now) if arrived is not None else now
        result = ingest(
            self.db,
            self.config,
            raw,
            received,
            source,
            uidvalidity=uidvalidity,
            uid=uid,
            size=size,
        )
        self.results.append(result)
        return result.stored

    def _state(self, source: str) -> None:
        with self.db.transaction() as session:
            if session.get(MailboxState, source) is not None:
                return
        try:
            with self.db.transaction() as session:
                session.add(MailboxState(source=source))
        except IntegrityError:
            pass  # another process created it first

    def acquire(self, source: str) -> bool:
        """Take the lease if it is free, ours, expired, or held by a dead process here.
        Called as each poll starts: that moment is what a good poll records."""
        self._state(source)
        now = self.clock()
        self._poll_started = now
        with self.db.transaction() as session:
            holder = session.scalar(select(MailboxState.owner).where(MailboxState.source == source))
            stale = holder if holder and dead_here(holder) else None
            taken = session.execute(
                update(MailboxState)
                .where(
                    MailboxState.source == source,
                    or_(
                        MailboxState.owner.is_(None),
                        MailboxState.owner == self.owner,
                        MailboxState.owner == stale,
                        MailboxState.lease_until < now,
                    ),
                )
                .values(owner=self.owner, lease_until=now + LEASE)
                .execution_options(synchronize_session=False)
            )
            return bool(taken.rowcount)  # type: ignore[attr-defined]

    def release(self, source: str) -> None:
        with self.db.transaction() as session:
            session.execute(
                update(MailboxState)
                .where(MailboxState.source == source, MailboxState.owner == self.owner)
                .values(owner=None, lease_until=None)
                .execution_options(synchronize_session=False)
            )

    def healthy(self, source: str, uidvalidity: int) -> None:
        """A poll read the mailbox to its end: every message that reached it before the
        poll started is stored and processed. ``last_ok_at`` is that start, so a round
        closes only once a poll that started after its deadline has completed."""
        with self.db.transaction() as session:
            state = session.get(MailboxState, source)
            if state is not None:
                now = self.clock()
                started = min(self._poll_started or now, now)
                state.last_ok_at, state.uidvalidity = started, uidvalidity
                if state.healthy_since is None:
                    state.healthy_since = now

    def failed(self, source: str, error: str) -> None:
        with self.db.transaction() as session:
            state = session.get(MailboxState, source)
            if state is not None:
                state.last_error, state.last_error_at = error[:2000], self.clock()
                state.healthy_since = None

    def uidvalidity_changed(self, source: str, old: int | None, new: int) -> None:
        log.warning("%s: UIDVALIDITY %s -> %s", source, old, new)


def intake_health(db: Database, source: str) -> tuple[datetime | None, datetime | None]:
    """``(last good poll, healthy since)`` of one mailbox."""
    with db.transaction() as session:
        state = session.get(MailboxState, source)
        return (state.last_ok_at, state.healthy_since) if state else (None, None)


def last_good_poll(db: Database, source: str) -> datetime | None:
    with db.transaction() as session:
        return session.scalar(select(MailboxState.last_ok_at).where(MailboxState.source == source))


def imap_poller(
    db: Database, config: Config, hooks: DatabaseHooks | None = None, timeout: float = 30.0
) -> ImapPoller | None:
    """The poller for the configured mailbox, or None when none is configured."""
    imap = config.settings.mail.imap
    if imap is None:
        return None
    password = config.password(imap) or ""
    settings = MailboxConfig(
        host=imap.host,
        port=imap.port,
        tls=imap.tls,
        username=imap.username,
        password=password,
        folder=imap.folder,
        processed_folder=imap.processed_folder,
        poll_interval=imap.poll_interval.total_seconds(),
        timeout=timeout,
        max_message_size=config.settings.mail.max_message_size,
    )
    return ImapPoller(settings, hooks or DatabaseHooks(db, config))


def lmtp_receipt_time(config: Config, raw: bytes, now: datetime) -> datetime:
    """When a message delivered over LMTP counts as received: when the MTA named by
    ``mta_hostname`` received it (its topmost ``Received:`` header, within
    ``max_queue_time``), else ``now``."""
    lmtp = config.settings.mail.lmtp
    if lmtp is None or lmtp.mta_hostname is None:
        return now
    at = mta_receipt_time(raw, lmtp.mta_hostname, now, lmtp.max_queue_time)
    if at is None:
        log.warning(
            "a message over LMTP has no Received header by %s dated within %s: "
            "timed at receipt",
            lmtp.mta_hostname,
            format_duration(lmtp.max_queue_time),
        )
        return now
    return at


def lmtp_receiver(
    db: Database,
    config: Config,
    clock: Callable[[], datetime] = utcnow,
    after: Callable[[IngestResult], None] | None = None,
) -> ReceiverController | None:
    """The LMTP/SMTP receiver for the configured listener, or None when none is configured."""
    lmtp = config.settings.mail.lmtp
    if lmtp is None:
        return None

    def deliver(raw: bytes, source: str) -> IngestResult:
        result = ingest(db, config, raw, lmtp_receipt_time(config, raw, clock()), source)
        if not result.stored:
            raise RuntimeError("message not stored")
        if after is not None:
            after(result)
        return result

    handler = GameAddressHandler(
        config.settings.mail.address, deliver, lmtp=lmtp.protocol == "lmtp"
    )
    return ReceiverController(
        handler,
        lmtp.host,
        lmtp.port,
        max_size=config.settings.mail.max_message_size,
        lmtp=lmtp.protocol == "lmtp",
    )
