"""The IMAP poller (imapclient): fetch new mail, have it stored, then move it away.

A message is fetched with ``BODY.PEEK[]`` (never marked read before it is
stored), handed to ``deliver`` (the service layer's ``ingest``), and only
after that returns — the message committed — moved to the processed folder
(``MOVE`` when the server has it, else copy, flag deleted and expunge). A
crash between the commit and the move costs nothing: the message is fetched
again and recognised as already stored. IDLE is used when the server has it
(re-issued at least every 10 minutes), with polling as the fallback; every
socket has a timeout; a failed connection is retried with exponential backoff
and jitter. The callbacks record health and hold the mailbox's lease, so two
server processes never poll the same mailbox.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from imapclient import IMAPClient

from snl_pbem.crashpoints import crash_point
from snl_pbem.mail import imapfetch

log = logging.getLogger("snl_pbem.imap")
imapfetch.install()  # the poller's FETCH responses read in one pattern a message

IDLE_RENEW_SECONDS = 9 * 60  # RFC 2177: re-issue IDLE at least every 29 minutes; we do 9
BATCH = 100
FETCH_BYTES = 32 * 1024 * 1024
"""At most this much mail is fetched into memory at once."""


def mailbox_source(username: str, host: str, port: int, folder: str) -> str:
    """The name a mailbox is known by in the database (its messages' source, its lease
    and health): computed from the settings alone, so a reader of its health needs no
    connection and no password."""
    return f"imap:{username}@{host}:{port}/{folder}"


@dataclass(frozen=True)
class MailboxConfig:
    host: str
    port: int
    tls: str  # ssl, starttls, none
    username: str
    password: str
    folder: str = "INBOX"
    processed_folder: str = "Processed"
    poll_interval: float = 60.0
    timeout: float = 30.0
    max_message_size: int = 25 * 1024 * 1024
    """Larger messages are fetched as their header only (and refused as too large)."""
    ssl_context: ssl.SSLContext | None = None

    @property
    def source(self) -> str:
        return mailbox_source(self.username, self.host, self.port, self.folder)


class DeliveryFailed(Exception):
    """A fetched message could not be stored (``deliver`` raised): this poll ends here."""


class MailboxHooks(Protocol):
    """What the poller needs from the rest of the server."""

    def deliver(
        self,
        raw: bytes,
        source: str,
        uidvalidity: int,
        uid: int,
        arrived: datetime | None,
        size: int | None = None,
    ) -> bool:
        """Store one message; True once it is committed (then it may be moved).

        ``arrived`` is the mailbox's INTERNALDATE: when our mail server received it.
        ``size`` is given when ``raw`` is only the header of a message over the limit.
        """

    # optional: deliver_many(items) -> (stored flags in order, the failure that stopped it),
    # items as deliver's arguments; one transaction for a fetch (see ImapPoller._deliver)

    def acquire(self, source: str) -> bool:
        """Take or renew this mailbox's lease; False if another process holds it."""

    def healthy(self, source: str, uidvalidity: int) -> None:
        """A poll completed."""

    def failed(self, source: str, error: str) -> None:
        """A poll failed."""

    def uidvalidity_changed(self, source: str, old: int | None, new: int) -> None:
        """The mailbox was recreated; old UIDs mean nothing now."""


class ImapPoller:
    def __init__(
        self,
        config: MailboxConfig,
        hooks: MailboxHooks,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.hooks = hooks
        self.client: IMAPClient | None = None
        self.uidvalidity: int | None = None
        self.last_uid = 0
        self._sleep = sleep
        self._has_move = False
        self.wake = threading.Event()
        """Set to have the poller read the mailbox now (a deadline passed: read it to its
        end before the round closes), without waiting for IDLE news or the interval."""

    # -- connection -------------------------------------------------------------------

    def connect(self) -> IMAPClient:
        cfg = self.config
        context = cfg.ssl_context or ssl.create_default_context()
        client = IMAPClient(
            cfg.host,
            port=cfg.port,
            ssl=cfg.tls == "ssl",
            ssl_context=context if cfg.tls == "ssl" else None,
            timeout=cfg.timeout,
            use_uid=True,
        )
        client.normalise_times = False  # INTERNALDATE with its zone
        quiet(client)
        try:
            if cfg.tls == "starttls":
                client.starttls(context)
            client.login(cfg.username, cfg.password)
            if not client.folder_exists(cfg.processed_folder):
                client.create_folder(cfg.processed_folder)
            selected = client.select_folder(cfg.folder)
            capabilities = client.capabilities()
        except Exception:
            _close(client)
            raise
        uidvalidity = int(selected[b"UIDVALIDITY"])
        if self.uidvalidity is not None and uidvalidity != self.uidvalidity:
            log.warning(
                "%s: UIDVALIDITY changed %s -> %s; old messages are recognised by their content",
                cfg.source,
                self.uidvalidity,
                uidvalidity,
            )
            self.hooks.uidvalidity_changed(cfg.source, self.uidvalidity, uidvalidity)
            self.last_uid = 0
        self.uidvalidity = uidvalidity
        self._has_move = b"MOVE" in capabilities
        self.client = client
        return client

    def close(self) -> None:
        if self.client is not None:
            _close(self.client)
            self.client = None

    # -- one poll ---------------------------------------------------------------------

    def poll_once(self) -> int:
        """Fetch, store and move every new message; returns how many were stored."""
        if not self.hooks.acquire(self.config.source):
            log.info("%s: another process holds this mailbox", self.config.source)
            return 0
        if self.client is None:
            client = self.connect()
        else:
            client = self.client
            client.noop()  # let the server tell this session about mail that arrived since
        assert self.uidvalidity is not None
        uids = [
            u for u in client.search(["UID", f"{self.last_uid + 1}:*"]) if u > self.last_uid
        ]  # "n:*" also returns the last UID when none is newer
        stored_total = 0
        for batch in self._batches(client, sorted(uids)):
            fetched = list(self._fetch(client, batch))
            stored, failure = self._deliver(fetched)
            for _ in stored:
                crash_point("imap.stored-not-moved")
            last = max(stored, default=0)
            uid = next((u for u, *_ in fetched if u > last), 0)  # where it stopped
            self._move(client, stored)
            if failure is not None:
                if stored:
                    self.last_uid = max(self.last_uid, *stored)
                raise DeliveryFailed(
                    f"could not store UID {uid}: {type(failure).__name__}: {failure}"
                ) from failure
            stored_total += len(stored)
            if stored:
                self.last_uid = max(self.last_uid, *stored)
        self.hooks.healthy(self.config.source, self.uidvalidity)
        return stored_total

    def _deliver(
        self, fetched: list[tuple[int, bytes, datetime | None, int | None]]
    ) -> tuple[list[int], Exception | None]:
        """Store a fetch's messages: the UIDs stored (committed: they may be moved), in
        order, and the failure that stopped it (the rest waits in the mailbox, in order, for
        the next poll). Through ``deliver_many`` when the hooks have it (one transaction
        for the fetch), else one ``deliver`` each."""
        assert self.uidvalidity is not None
        many = getattr(self.hooks, "deliver_many", None)
        if many is not None and fetched:
            items = [
                (raw, self.config.source, self.uidvalidity, uid, arrived, size)
                for uid, raw, arrived, size in fetched
            ]
            delivered, failure = many(items)
            return [u for (u, *_), ok in zip(fetched, delivered, strict=False) if ok], failure
        stored: list[int] = []
        for uid, raw, arrived, size in fetched:
            try:
                delivered_one = self.hooks.deliver(
                    raw, self.config.source, self.uidvalidity, uid, arrived, size
                )
            except Exception as exc:  # could not even be set aside: the database is away
                return stored, exc
            if delivered_one:
                stored.append(uid)
        return stored, None

    def _batches(self, client: IMAPClient, uids: list[int]) -> Iterator[dict[int, int]]:
        """{uid: size} in fetches of at most BATCH messages and FETCH_BYTES (sizes asked
        first, so a mailbox of large messages never fills the server's memory)."""
        for start in range(0, len(uids), BATCH):
            chunk = uids[start : start + BATCH]
            sizes = client.fetch(chunk, ["RFC822.SIZE"])
            batch: dict[int, int] = {}
            total = 0
            for uid in chunk:
                if uid not in sizes:
                    continue  # expunged meanwhile
                size = int(sizes[uid].get(b"RFC822.SIZE", 0))
                fetched = min(size, self.config.max_message_size)
                if batch and total + fetched > FETCH_BYTES:
                    yield batch
                    batch, total = {}, 0
                batch[uid] = size
                total += fetched
            if batch:
                yield batch

    def _fetch(
        self, client: IMAPClient, batch: dict[int, int]
    ) -> Iterator[tuple[int, bytes, datetime | None, int | None]]:
        """(uid, bytes, arrival, size) in UID order; a message over the size limit comes as
        its header only, with its size, and is stored as such (never read whole)."""
        big = [u for u, size in batch.items() if size > self.config.max_message_size]
        small = [u for u in batch if u not in big]
        fetched = client.fetch(small, ["BODY.PEEK[]", "INTERNALDATE"]) if small else {}
        if big:
            fetched.update(client.fetch(big, ["BODY.PEEK[HEADER]", "INTERNALDATE"]))
        for uid in sorted(batch):
            item = fetched.get(uid)
            if not item:
                continue  # expunged meanwhile
            raw = item.get(b"BODY[HEADER]") if uid in big else item.get(b"BODY[]")
            if raw is None:
                continue
            size = batch[uid] if uid in big else None
            yield uid, bytes(raw), _aware(item.get(b"INTERNALDATE")), size

    def _move(self, client: IMAPClient, uids: Sequence[int]) -> None:
        if not uids:
            return
        target = self.config.processed_folder
        if self._has_move:
            client.move(uids, target)
        else:
            client.copy(uids, target)
            client.add_flags(uids, [b"\\Deleted"])
            if client.has_capability("UIDPLUS"):
                client.uid_expunge(uids)
            else:
                client.expunge()

    # -- running ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set: IDLE when possible, reconnecting with backoff."""
        failures = 0
        while not stop.is_set():
            try:
                self.poll_once()
                failures = 0
                self._wait_for_mail(stop)
            except Exception as exc:  # any failure: never a dead thread, always reported
                failures += 1
                self.close()
                message = f"{type(exc).__name__}: {exc}"
                try:
                    self.hooks.failed(self.config.source, message)
                except Exception as report:  # the database is away too: logged below
                    log.error("%s: could not record the failure: %s", self.config.source, report)
                delay = min(300.0, 2.0 ** min(failures, 8)) * random.uniform(0.5, 1.0)
                log.warning("%s: %s; reconnecting in %.0fs", self.config.source, message, delay)
                stop.wait(delay)
        self.close()

    def _wait_for_mail(self, stop: threading.Event) -> None:
        client = self.client
        interval = self.config.poll_interval
        if self.wake.is_set():
            self.wake.clear()
            return
        if client is None or not client.has_capability("IDLE"):
            started = time.monotonic()
            while not stop.is_set() and time.monotonic() - started < interval:
                if self.wake.wait(min(1.0, interval)):
                    self.wake.clear()
                    return
            return
        client.idle()
        try:
            started = time.monotonic()
            while not stop.is_set() and time.monotonic() - started < IDLE_RENEW_SECONDS:
                if client.idle_check(timeout=min(interval, 1.0)):
                    break  # something arrived
                if self.wake.is_set():
                    self.wake.clear()
                    break  # asked to read now
                if time.monotonic() - started >= interval:
                    break  # poll anyway now and then (and renew the lease)
        finally:
            client.idle_done()


def _aware(value: object) -> datetime | None:
    """An INTERNALDATE as an aware UTC datetime (None if the server gave none)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.astimezone()  # naive means local time
    return value.astimezone(UTC)


IMAPLIB_LOGGER = "imapclient.imaplib"
"""The logger imapclient gives imaplib's protocol trace to (every line, at DEBUG)."""


def quiet(client: IMAPClient) -> None:
    """imaplib's protocol trace left off while its logger drops it. imapclient turns it on
    for every connection (imaplib's ``debug`` 5) and sends it to its logger, which drops it
    below DEBUG; but imaplib writes each entry first: every line and every match read, and
    each message of a FETCH in full twice (its bytes' repr, as it arrives and in the
    response as a whole). That was 11 us of the server's CPU a message fetched, of 36
    (issue 23). Off, imaplib keeps only its last few lines in memory, as it always does
    (its ``_cmd_log``, never written). With that logger set to DEBUG when the connection
    is made, the trace is written as before (``serve`` keeps imapclient's loggers at
    WARNING or above, whatever its ``log_level``: set one to DEBUG to see the protocol)."""
    if not logging.getLogger(IMAPLIB_LOGGER).isEnabledFor(logging.DEBUG):
        client._imap.debug = 0


def _close(client: IMAPClient) -> None:
    for action in (client.logout, client.shutdown):
        try:
            action()
            return
        except Exception:  # closing a broken connection: nothing more to do
            continue
