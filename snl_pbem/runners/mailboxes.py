"""Wiring the mail intakes to the database: leases, health, and ``ingest``.

The IMAP poller and the LMTP receiver (``snl_pbem.mail``) know nothing of
the database; this module gives them what they call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from snl_pbem.app.intake import IngestResult, ingest
from snl_pbem.app.mailbox_state import (
    ensure_state,
    record_failed_poll,
    record_good_poll,
    release_lease,
    take_lease,
)
from snl_pbem.config import Config
from snl_pbem.mail.imap import ImapPoller, MailboxConfig
from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.mail.received import mta_receipt_time
from snl_pbem.procs import dead_here, identity
from snl_pbem.store import Database
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

    def acquire(self, source: str) -> bool:
        """Take the lease if it is free, ours, expired, or held by a dead process here.
        Called as each poll starts: that moment is what a good poll records."""
        ensure_state(self.db, source)
        now = self.clock()
        self._poll_started = now
        return take_lease(self.db, source, self.owner, now, now + LEASE, dead_here)

    def release(self, source: str) -> None:
        release_lease(self.db, source, self.owner)

    def healthy(self, source: str, uidvalidity: int) -> None:
        """A poll read the mailbox to its end: every message that reached it before the
        poll started is stored and processed. ``last_ok_at`` is that start, so a round
        closes only once a poll that started after its deadline has completed."""
        now = self.clock()
        started = min(self._poll_started or now, now)
        record_good_poll(self.db, source, started, now, uidvalidity)

    def failed(self, source: str, error: str) -> None:
        record_failed_poll(self.db, source, error, self.clock())

    def uidvalidity_changed(self, source: str, old: int | None, new: int) -> None:
        log.warning("%s: UIDVALIDITY %s -> %s", source, old, new)


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
