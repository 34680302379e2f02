"""Step one, store: every message is stored and committed before its source is told it
arrived (the IMAP move, the LMTP 250). Its bytes as received (headers only past the size
limit), or a stub set aside when the database will not take them as they are; a message
already stored (same bytes, same mailbox UID) is recognised. Also the step that refuses,
with a notice, a message stored as its headers only (``too_large``)."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError
from sqlalchemy.orm import Session

from snl_pbem.app.intake.context import IngestResult, Message, Outcome
from snl_pbem.app.replies import guest_notice
from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.mail.parse import clean_text, envelope_of, headers_only
from snl_pbem.rules.words import tr
from snl_pbem.store import Database, InboundMessage
from snl_pbem.store.driver import Driver, insert_keyed
from snl_pbem.store.states import InboundStatus

log = logging.getLogger("snl_pbem.intake")

MAX_STORED_BYTES = 25 * 1024 * 1024
TOO_LARGE = "too large"
"""The start of the error noted on a message stored as its headers only (over the size
limit): processing rejects it with a notice instead of reading it."""


def store(
    db: Database,
    config: Config,
    raw: bytes,
    received_at: datetime,
    source: str,
    *,
    uidvalidity: int | None = None,
    uid: int | None = None,
    size: int | None = None,
    envelope: tuple[str | None, str | None] | None = None,
) -> tuple[IngestResult, tuple[bytes, str | None] | None]:
    """Store one message and commit: its result (status ``new`` when stored now), and
    the bytes kept and their note when it is new (None: known already, or a stub set
    aside). Raises only if it could not be stored at all (the database is down): a
    message the database refuses as it is, is stored as a stub and set aside, so that
    no message stops the mailbox. ``size``: ``raw`` is only the header of a message that
    large (the IMAP poller never fetches one over the limit whole). ``envelope``: its
    ``envelope_of``, when the caller has read it (read here otherwise)."""
    digest = hashlib.sha256(raw).hexdigest()
    if envelope is None:
        envelope = envelope_of(raw)  # headers only, bounded; before any lock
    source = clean_text(source, 200)
    try:
        with db.driver_transaction(urgent=True) as driver:
            ((result, kept_note),) = _add_rows(
                driver, config, [(raw, received_at, source, uidvalidity, uid, size)], [envelope]
            )
    except IntegrityError:  # another process stored it at the same moment
        with db.transaction(urgent=True) as session:
            known = _known(session, digest, source, uidvalidity, uid)
            if known is not None:
                return IngestResult(known.id, InboundStatus.DUPLICATE, "already stored"), None
        return _store_stub(db, raw, digest, source, received_at, uidvalidity, uid), None
    except Exception as exc:
        if not _refused_as_data(exc):
            raise  # the database is unreachable or locked: the source keeps the message
        log.error("a message could not be stored as received (%s): storing a stub", exc)
        return _store_stub(db, raw, digest, source, received_at, uidvalidity, uid, exc), None
    if kept_note is not None:
        crash_point("ingest.stored-not-processed")
    return result, kept_note


Incoming = tuple[bytes, datetime, str, int | None, int | None, int | None]
"""One message to store: (raw, received_at, source, uidvalidity, uid, size)."""


def store_many(
    db: Database,
    config: Config,
    messages: list[Incoming],
    envelopes: list[tuple[str | None, str | None]] | None = None,
) -> list[tuple[IngestResult, tuple[bytes, str | None] | None]]:
    """Store several messages in one transaction (an IMAP fetch, what LMTP has queued):
    one commit for all, and only then may their sources be acknowledged. Each is as
    ``store`` stores it; if the batch cannot be written as it is (a message the database
    refuses, another process storing one of them at the same moment), each is stored
    alone, so one message never costs the others their storing. Raises only if the
    database is away (then none of them is acknowledged). ``envelopes``: each message's
    ``envelope_of``, when the caller has read them already (read here otherwise)."""
    if envelopes is None:  # headers only; before any lock
        envelopes = [envelope_of(raw) for raw, *_ in messages]
    if len(messages) <= 1:  # (its errors are handled as one message's)
        return _each_alone(db, config, messages, envelopes)
    try:
        with db.driver_transaction(urgent=True) as driver:
            found = _add_rows(driver, config, messages, envelopes)
    except Exception as exc:
        if isinstance(exc, OperationalError) and not _refused_as_data(exc):
            raise  # the database is unreachable or locked: the sources keep the messages
        log.warning("a batch of %d could not be stored (%s): each alone", len(messages), exc)
        return _each_alone(db, config, messages, envelopes)
    for _ in range(sum(kept is not None for _, kept in found)):
        crash_point("ingest.stored-not-processed")  # passed once per message, as one by one
    return found


def _each_alone(
    db: Database,
    config: Config,
    messages: list[Incoming],
    envelopes: list[tuple[str | None, str | None]],
) -> list[tuple[IngestResult, tuple[bytes, str | None] | None]]:
    return [
        store(db, config, raw, at, source, uidvalidity=validity, uid=uid, size=size, envelope=e)
        for (raw, at, source, validity, uid, size), e in zip(messages, envelopes, strict=True)
    ]


def _add_rows(
    driver: Driver,
    config: Config,
    messages: list[Incoming],
    envelopes: list[tuple[str | None, str | None]],
) -> list[tuple[IngestResult, tuple[bytes, str | None] | None]]:
    """Add the rows of ``messages`` in ``driver``'s transaction: each message's result
    (status ``new`` when added now) and, when new, the bytes kept and their note. Two
    look-ups of what is stored already (by digest, by mailbox UID) and one INSERT of the
    new rows. A message whose bytes or UID an earlier one of the batch has is that one's
    duplicate, as when each was added and flushed in turn. (Per message, the ORM's add and
    flush and the look-ups were a fifth of the intake's time; for LMTP's groups of seven,
    SQLAlchemy's session and statements were two thirds of a group's store.)"""
    digests = [hashlib.sha256(raw).hexdigest() for raw, *_ in messages]
    sources = [clean_text(source, 200) for _, _, source, *_ in messages]
    among, values = driver.among("sha256", sorted(set(digests)))
    known = driver.rows(f"SELECT sha256, id FROM inbound_messages WHERE {among}", values)
    stored: dict[str, int] = {sha: row_id for sha, row_id in known}
    by_box: dict[tuple[str, int | None], set[int]] = {}
    for source, (_, _, _, uidvalidity, uid, _) in zip(sources, messages, strict=True):
        if uid is not None:
            by_box.setdefault((source, uidvalidity), set()).add(uid)
    stored_uids: dict[tuple[str, int | None, int | None], int] = {}
    for (source, uidvalidity), uids in by_box.items():
        among, values = driver.among("uid", sorted(uids))
        validity = f"= {driver.mark}" if uidvalidity is not None else "IS NULL"
        sql = f"SELECT uid, id FROM inbound_messages WHERE source = {driver.mark}"
        sql += f" AND uidvalidity {validity}"  # (never ``= NULL``: a mailbox without one)
        params = [source, *([uidvalidity] if uidvalidity is not None else []), *values]
        for uid, row_id in driver.rows(f"{sql} AND {among}", params):
            stored_uids.setdefault((source, uidvalidity, uid), row_id)
    # each message: ("stored", its row's id), ("repeat", the index of the new row it
    # repeats), or ("new", the index of its new row)
    what: list[tuple[str, int]] = []
    new_rows: list[dict[str, object]] = []
    kept_notes: list[tuple[bytes, str | None]] = []
    new_digest: dict[str, int] = {}
    new_uid: dict[tuple[str, int | None, int | None], int] = {}
    for (raw, received_at, _, uidvalidity, uid, size), envelope, digest, source in zip(
        messages, envelopes, digests, sources, strict=True
    ):
        box = (source, uidvalidity, uid) if uid is not None else None
        # as each row added and flushed in turn found it: the same bytes (stored, or
        # earlier in the batch), then the same UID (stored, or earlier in the batch)
        stored_id, index = stored.get(digest), new_digest.get(digest)
        if stored_id is None and index is None and box is not None:
            stored_id, index = stored_uids.get(box), new_uid.get(box)
        if stored_id is not None:
            what.append(("stored", stored_id))
            continue
        if index is not None:
            what.append(("repeat", index))
            continue
        what.append(("new", len(new_rows)))
        kept, note = _kept_bytes(config, raw, size)
        new_digest[digest] = len(new_rows)
        if box is not None:
            new_uid.setdefault(box, len(new_rows))
        message_id, sender = envelope
        new_rows.append(
            {
                "message_id": message_id,
                "sha256": digest,
                "source": source,
                "uidvalidity": uidvalidity,
                "uid": uid,
                "received_at": received_at,
                "raw": kept,
                "status": InboundStatus.NEW,
                "error": note,
                "attempts": 0,  # counts the restarts that found it unprocessed
                "sender": sender,
            }
        )
        kept_notes.append((kept, note))
    table = cast(Table, InboundMessage.__table__)
    by_digest = insert_keyed(driver, table, new_rows, "sha256")  # (the digest is unique)
    ids = [by_digest[str(row["sha256"])] for row in new_rows]
    found: list[tuple[IngestResult, tuple[bytes, str | None] | None]] = []
    for kind, value in what:
        if kind == "new":
            found.append((IngestResult(ids[value], InboundStatus.NEW, "stored"), kept_notes[value]))
        else:
            same = value if kind == "stored" else ids[value]
            found.append((IngestResult(same, InboundStatus.DUPLICATE, "already stored"), None))
    return found


def _refused_as_data(exc: Exception) -> bool:
    """True when the database refused the row for its content, not for being away.
    PostgreSQL's "program limit exceeded" (SQLSTATE class 54: a value too large for an
    index row, say) comes as an OperationalError, but the row is at fault."""
    if isinstance(exc, OperationalError):
        return str(getattr(exc.orig, "sqlstate", "") or "").startswith("54")
    return isinstance(exc, (DataError, StatementError, ValueError, UnicodeError))


def _store_stub(
    db: Database,
    raw: bytes,
    digest: str,
    source: str,
    received_at: datetime,
    uidvalidity: int | None,
    uid: int | None,
    exc: Exception | None = None,
) -> IngestResult:
    """Store a message the database would not take as it was: its bytes, nothing read from
    them, set aside for the referee. Raises if even that fails (the database is away)."""
    reason = "it could not be stored as received"
    if exc is not None:
        reason += f" ({type(exc).__name__}: {clean_text(str(exc), 300)})"
    with db.transaction(urgent=True) as session:
        known = _known(session, digest, source, uidvalidity, uid)
        if known is not None:
            return IngestResult(known.id, InboundStatus.DUPLICATE, "already stored")
        row = InboundMessage(
            message_id=None,
            sha256=digest,
            source=source,
            uidvalidity=uidvalidity,
            uid=uid,
            received_at=received_at,
            raw=raw[:MAX_STORED_BYTES],
            status=InboundStatus.SET_ASIDE,
            error=f"set aside: {reason}",
            attempts=0,
        )
        session.add(row)
        session.flush()
        log.error("inbound %d set aside: %s", row.id, reason)
        return IngestResult(row.id, InboundStatus.SET_ASIDE, reason)


def _kept_bytes(config: Config, raw: bytes, size: int | None) -> tuple[bytes, str | None]:
    """What is stored of a message, and a note when it is not all of it: a message over
    the size limit keeps its headers only. (A sender's daily cap trims what is kept only
    after the message was read: a forged flood must not cut a player's real orders.)"""
    mail_settings = config.settings.mail
    size = max(len(raw), size or 0)
    if size > mail_settings.max_message_size:
        note = (
            f"{TOO_LARGE} ({size} bytes; the limit is {mail_settings.max_message_size}): "
            "only its headers are kept"
        )
        return headers_only(raw), note
    return raw[:MAX_STORED_BYTES], None


def _known(
    session: Session, digest: str, source: str, uidvalidity: int | None, uid: int | None
) -> InboundMessage | None:
    found = session.scalar(select(InboundMessage).where(InboundMessage.sha256 == digest))
    if found is None and uid is not None:
        found = session.scalar(
            select(InboundMessage).where(
                InboundMessage.source == source,
                InboundMessage.uidvalidity == uidvalidity,
                InboundMessage.uid == uid,
            )
        )
    return found


def too_large(msg: Message) -> Outcome | None:
    """A message stored as its headers only (over the size limit) is refused with a
    notice: nothing in it is read."""
    if msg.too_large is None:
        return None
    guest_notice(
        msg.ctx,
        tr(
            "Your message was too large to read ({size} KiB at most), so nothing in it was "
            "applied. Send your orders as plain text, without attachments.",
            size=msg.ctx.config.settings.mail.max_message_size // 1024,
        ),
    )
    return Outcome(InboundStatus.REJECTED, msg.too_large, ())  # nothing read: no keys
