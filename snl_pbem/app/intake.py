"""The one way mail enters: ``ingest(raw, received_at, source)``.

Every intake (IMAP, LMTP/SMTP, a file) calls it. It first stores the raw
message and its identity and commits — only then may the caller acknowledge
it to its source — and then processes it in a second transaction: parse,
authenticate, apply, reply. A message already stored (same bytes, same
mailbox UID, or a Message-ID already processed) is recognised and not applied
twice. A message whose processing fails is kept with its traceback, marked
for the referee, and the server carries on.

No one message can cost other players their orders: it is read in a worker
process bounded in time and memory (``snl_pbem.mail.sandbox``), never inside a
database transaction; what the database cannot hold (a NUL, a lone surrogate)
is cleaned before it is written; a message that cannot be stored as received
is stored as a stub and set aside; and a flood from one address is stored
trimmed, never whole.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, union_all
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError
from sqlalchemy.orm import Session

from snl_pbem.app import membership_mail
from snl_pbem.app.bounces import record_bounce
from snl_pbem.app.lookup import audit, career, game_time, open_round, ruleset_of, settings_of
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.referee_mail import handle_referee_mail, is_referee_mail
from snl_pbem.app.replies import (  # noqa: F401 (the limits, for tests and callers)
    ACKS_PER_HOUR,
    GUEST_REPLIES_PER_ADDRESS_PER_HOUR,
    Context,
    guest_help,
    guest_notice,
    help_template,
    redact,
    redacted,
    reply,
    send,
    subject,
)
from snl_pbem.app.rounds import submit_orders
from snl_pbem.app.state import RECEIPT_ORDER, player_state
from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.errors import NotFound
from snl_pbem.keys import hash_key
from snl_pbem.mail import sandbox
from snl_pbem.mail.commands import Commands, LineProblem, parse_commands
from snl_pbem.mail.ours import fingerprint_of_sent
from snl_pbem.mail.parse import (
    ParsedMail,
    ParseTimeout,
    clean_text,
    envelope_of,
    headers_only,
    redact_in_bytes,
)
from snl_pbem.rules.ruleset import Ruleset
from snl_pbem.store import (
    Database,
    Game,
    InboundMessage,
    OrderRecord,
    OutboxMessage,
    Player,
)
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind, OutboxStatus

log = logging.getLogger("snl_pbem.intake")

MAX_STORED_BYTES = 25 * 1024 * 1024
TRIMMED_BYTES = 64 * 1024
"""What is kept of a message from a sender over their daily cap (any order fits in it)."""
TOO_LARGE = "too large"
"""The start of the error noted on a message stored as its headers only (over the size
limit): processing rejects it with a notice instead of reading it."""
MAX_ATTEMPTS = 5
"""Restarts that may find a message still unprocessed before it is set aside (a message
that kills the server every time must not keep it in a crash loop; a server killed by
something else now and then must not lose an order)."""
WRONG_KEYS_PER_SENDER_PER_HOUR = 5
WRONG_KEYS_PER_GAME_PER_HOUR = 20
"""Past these, wrong keys get no more notices and the referee is told (once an hour)."""
RECEIPT_RESOLUTION = timedelta(seconds=1)
WRONG_KEY = "authentication failed (wrong key)"


@dataclass(frozen=True)
class IngestResult:
    inbound_id: int | None
    status: str
    """stored-and-processed outcome: processed, rejected, ignored, duplicate, set-aside."""
    detail: str = ""

    @property
    def stored(self) -> bool:
        """True once the message is safely in the database (the source may be acknowledged)."""
        return self.inbound_id is not None


def ingest(
    db: Database,
    config: Config,
    raw: bytes,
    received_at: datetime,
    source: str,
    *,
    uidvalidity: int | None = None,
    uid: int | None = None,
    size: int | None = None,
    process: bool = True,
) -> IngestResult:
    """Store, then process, one message. Raises only if it could not be stored at all
    (the database is down): a message the database refuses as it is, is stored as a
    stub and set aside, so that no message stops the mailbox. ``size``: ``raw`` is only
    the header of a message that large (the IMAP poller never fetches one over the
    limit whole). ``process=False`` only stores it (status ``new``): the intakes have it
    read by parallel workers (``snl_pbem.runners.mailboxes.Readers``), so a slow message
    never holds the ones after it."""
    digest = hashlib.sha256(raw).hexdigest()
    message_id, sender = envelope_of(raw)  # headers only, bounded; before any lock
    source = clean_text(source, 200)
    try:
        with db.transaction() as session:
            known = _known(session, digest, source, uidvalidity, uid)
            if known is not None:
                return IngestResult(known.id, InboundStatus.DUPLICATE, "already stored")
            kept, note = _kept_bytes(config, raw, size)
            row = InboundMessage(
                message_id=message_id,
                sha256=digest,
                source=source,
                uidvalidity=uidvalidity,
                uid=uid,
                received_at=received_at,
                raw=kept,
                status=InboundStatus.NEW,
                error=note,
                attempts=0,  # counts the restarts that found it unprocessed
                sender=sender,
            )
            session.add(row)
            session.flush()
            inbound_id = row.id
    except IntegrityError:  # another process stored it at the same moment
        with db.transaction() as session:
            known = _known(session, digest, source, uidvalidity, uid)
            if known is not None:
                return IngestResult(known.id, InboundStatus.DUPLICATE, "already stored")
        return _store_stub(db, raw, digest, source, received_at, uidvalidity, uid)
    except Exception as exc:
        if not _refused_as_data(exc):
            raise  # the database is unreachable or locked: the source keeps the message
        log.error("a message could not be stored as received (%s): storing a stub", exc)
        return _store_stub(db, raw, digest, source, received_at, uidvalidity, uid, exc)
    crash_point("ingest.stored-not-processed")
    if not process:
        return IngestResult(inbound_id, InboundStatus.NEW, "stored")
    return _process_row(db, config, inbound_id, (kept, note))


def _refused_as_data(exc: Exception) -> bool:
    """True when the database refused the row for its content, not for being away."""
    if isinstance(exc, OperationalError):
        return False
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
    with db.transaction() as session:
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


def _over_daily_cap(session: Session, config: Config, row: InboundMessage) -> bool:
    """True when the sender's mail of the last day, this message included, is past
    ``max_stored_per_sender`` or ``max_stored_bytes_per_sender``."""
    if row.sender is None:
        return False
    count, size = session.execute(
        select(func.count(), func.coalesce(func.sum(func.length(InboundMessage.raw)), 0)).where(
            InboundMessage.sender == row.sender,
            InboundMessage.received_at > row.received_at - timedelta(days=1),
            InboundMessage.id <= row.id,
        )
    ).one()
    mail_settings = config.settings.mail
    return bool(
        count > mail_settings.max_stored_per_sender
        or size > mail_settings.max_stored_bytes_per_sender
    )


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


def process_pending(
    db: Database, config: Config, workers: int = sandbox.MAX_WORKERS
) -> list[IngestResult]:
    """Process messages stored but not processed (the server stopped in between).

    Several senders' messages are read at once (``workers``), each sender's one at a time
    in the order they came: a slow message holds one worker, not the start-up, and a
    player's later message still replaces their earlier one. Results in stored order."""
    with db.transaction() as session:
        rows = session.execute(
            select(InboundMessage.id, InboundMessage.sender)
            .where(InboundMessage.status == InboundStatus.NEW)
            .order_by(InboundMessage.id)
        ).all()
    by_sender: dict[str, list[int]] = {}
    for inbound_id, sender in rows:
        by_sender.setdefault(sender or f"#{inbound_id}", []).append(inbound_id)
    results: dict[int, IngestResult] = {}

    def run(ids: list[int]) -> None:
        for inbound_id in ids:
            results[inbound_id] = process_stored(db, config, inbound_id)

    if workers <= 1 or len(by_sender) <= 1:
        for ids in by_sender.values():
            run(ids)
    else:
        with ThreadPoolExecutor(
            min(workers, len(by_sender)), thread_name_prefix="snl-pbem-pending"
        ) as pool:
            for _ in pool.map(run, by_sender.values()):  # raises what a worker raised
                pass
    return [results[inbound_id] for inbound_id, _ in rows]


def process_stored(db: Database, config: Config, inbound_id: int) -> IngestResult:
    """Process a stored message again (after a stop); set aside after MAX_ATTEMPTS such
    tries, each committed before it starts, so a try the process did not survive counts."""
    with db.transaction() as session:
        row = session.get(InboundMessage, inbound_id)
        assert row is not None
        if row.status != InboundStatus.NEW:
            return IngestResult(inbound_id, row.status, row.error or "")
        row.attempts += 1
        if row.attempts > MAX_ATTEMPTS:  # it stopped the server every time: set it aside
            row.status = InboundStatus.SET_ASIDE
            row.error = "processing was interrupted several times"
            log.error("inbound %d set aside: %s", inbound_id, row.error)
            return IngestResult(inbound_id, InboundStatus.SET_ASIDE, row.error)
    return _process_row(db, config, inbound_id)


def waiting_sizes(db: Database, ids: list[int]) -> dict[int, tuple[int, str | None]]:
    """(stored size in bytes, sender) of each of these messages still unprocessed: the
    readers read small ones first, whoever sent them."""
    found: dict[int, tuple[int, str | None]] = {}
    size = func.coalesce(func.length(InboundMessage.raw), 0)
    with db.transaction() as session:
        for start in range(0, len(ids), 500):  # bounded IN lists, whatever the flood
            rows = session.execute(
                select(InboundMessage.id, size, InboundMessage.sender).where(
                    InboundMessage.id.in_(ids[start : start + 500]),
                    InboundMessage.status == InboundStatus.NEW,
                )
            ).all()
            found.update((inbound_id, (int(n), sender)) for inbound_id, n, sender in rows)
    return found


def process_now(db: Database, config: Config, inbound_id: int) -> IngestResult:
    """Process a stored message now, if nobody has (a round is about to close and the
    message reached us before its deadline). Safe beside another thread or process
    processing the same message: the row is locked and its status checked."""
    return _process_row(db, config, inbound_id)


def retry_set_aside(
    db: Database,
    config: Config,
    inbound_id: int,
    now: datetime,
    actor: str = "referee",
    *,
    via: str | None = None,
) -> IngestResult:
    """The referee runs a set-aside message again (after fixing what stopped it), judged by
    its original receipt time. Raises NotFound if there is no such set-aside message."""
    with db.transaction() as session:
        row = session.get(InboundMessage, inbound_id, with_for_update=True)
        if row is None or row.status != InboundStatus.SET_ASIDE:
            state = "no such message" if row is None else f"it is {row.status}, not set aside"
            raise NotFound(f"inbound {inbound_id}: {state}")
        row.status, row.error, row.attempts = InboundStatus.NEW, None, 0
        game = session.get(Game, row.game_id) if row.game_id else None
        audit(session, now, actor, "inbound-retry", game, via=via, inbound=inbound_id)
    return _process_row(db, config, inbound_id)


def _read(raw: bytes, config: Config, sent: tuple[str, ...] = ()) -> ParsedMail | str:
    """The parsed message, or why it could not be read (in the sandbox: bounded). ``sent``:
    what we sent its sender (``_sent_to``): lines of it in the message are never orders."""
    try:
        return sandbox.parse(raw, config.settings.mail.address, sent)
    except ParseTimeout as exc:
        return f"set aside: {exc}"
    except sandbox.ParseFailed as exc:
        return f"set aside: it could not be read: {exc}"


SENT_COMPARED = 40
"""Our latest messages to a sender that its message is compared with (``snl_pbem.mail.ours``),
and, however old, the latest SECRET_COMPARED that gave a key or a code: a welcome is what
out-of-office replies paste, weeks into a game."""
SECRET_COMPARED = 5
_FINGERPRINTS_KEPT = 20_000
_fingerprints: dict[str, str] = {}
"""The fingerprint of each message we sent, by its Message-ID (unique for ever, and the
same before and after a scrub): each is worked out once per process."""
_fingerprints_lock = threading.Lock()


def _sent_to(db: Database, config: Config, sender: str | None) -> tuple[str, ...]:
    """The fingerprints of the mail we sent to ``sender`` (as the address is spelt in
    players' rows or the referee's setting too), newest first, bounded: the latest
    SENT_COMPARED and the latest SECRET_COMPARED that held a key or code. Mail that failed
    or bounced never reached the sender. Two small indexed queries, and a third for the
    messages not fingerprinted yet (usually one: the last reply)."""
    if sender is None:
        return ()
    columns = (OutboxMessage.id, OutboxMessage.message_id, OutboxMessage.secret)
    with db.transaction() as session:
        addresses = {sender, config.settings.mail.referee}  # as the players' rows spell it
        addresses.update(
            session.scalars(select(Player.email).where(func.lower(Player.email) == sender))
        )
        to_sender = (  # an IN list, not an OR: the (recipient, status, id) index serves it
            OutboxMessage.recipient.in_(sorted(a for a in addresses if a.lower() == sender)),
            OutboxMessage.status.in_((OutboxStatus.SENT, OutboxStatus.PENDING)),
        )
        latest = select(OutboxMessage.status, *columns).order_by(OutboxMessage.id.desc())
        both = union_all(
            latest.where(*to_sender).limit(SENT_COMPARED).subquery().select(),
            latest.where(*to_sender, OutboxMessage.secret)
            .limit(SECRET_COMPARED)
            .subquery()
            .select(),
        )
        rows = {(row.id, row.message_id, row.secret, row.status) for row in session.execute(both)}
        with _fingerprints_lock:
            missing = {row[0]: row for row in rows if row[1] not in _fingerprints}
        if missing:
            for outbox_id, message in session.execute(
                select(OutboxMessage.id, OutboxMessage.message).where(
                    OutboxMessage.id.in_(sorted(missing))
                )
            ):
                _, message_id, is_secret, status = missing[outbox_id]
                scrubbed = is_secret and status == OutboxStatus.SENT  # see drain_outbox
                value = fingerprint_of_sent(message, scrubbed=scrubbed)
                with _fingerprints_lock:
                    if len(_fingerprints) >= _FINGERPRINTS_KEPT:
                        for old in list(_fingerprints)[: _FINGERPRINTS_KEPT // 2]:
                            del _fingerprints[old]
                    _fingerprints[message_id] = value
    with _fingerprints_lock:
        found = [_fingerprints.get(row[1], "") for row in sorted(rows, reverse=True)]
    return tuple(value for value in found if value)


def _process_row(
    db: Database, config: Config, inbound_id: int, stored: tuple[bytes, str | None] | None = None
) -> IngestResult:
    """Process one stored message; any failure is recorded on it, never raised.

    The message is read (parsed) first, outside any transaction, so no lock is held
    while a hostile message is taken apart. Then the row is locked and its status
    checked in the processing transaction, so that a message is processed once even
    when two processes reach it together (one server's poller and another's start-up
    ``process_pending``, or a referee's ``ingest``). That same transaction keeps the
    message as it may be kept (``_kept_after_reading``). ``stored``: the row's raw bytes
    and note, when the caller has just stored them (no need to read them back)."""
    if stored is None:
        with db.transaction() as session:
            row = session.get(InboundMessage, inbound_id)
            assert row is not None
            status, raw, note = row.status, row.raw, row.error
        if status != InboundStatus.NEW:
            return IngestResult(inbound_id, InboundStatus.DUPLICATE, f"already handled: {status}")
    else:
        raw, note = stored
    too_large = bool(note and note.startswith(TOO_LARGE))
    sender = None if too_large else envelope_of(raw)[1]  # as ingest stored it on the row
    mail = _read(raw, config, _sent_to(db, config, sender))
    try:
        with db.transaction() as session:
            row = session.get(InboundMessage, inbound_id, with_for_update=True)
            assert row is not None
            if row.status != InboundStatus.NEW:
                handled = f"already handled: {row.status}"
                return IngestResult(inbound_id, InboundStatus.DUPLICATE, handled)
            if isinstance(mail, str):
                row.status, row.error = InboundStatus.SET_ASIDE, mail
                status, detail = InboundStatus.SET_ASIDE, mail
                log.error("inbound %d %s", inbound_id, mail)
            else:
                status, detail, secrets = _process(
                    session, config, row, mail, note if too_large else None
                )
                row.status, row.error = status, clean_text(detail) or None
                try:  # never costs the message its processing: a savepoint of its own
                    with session.begin_nested():
                        _kept_after_reading(session, config, row, raw, mail, secrets)
                except Exception as exc:
                    log.error("inbound %d: keeping a redacted copy failed: %s", inbound_id, exc)
    except Exception as exc:  # kept with its traceback for the referee; the server carries on
        trace = traceback.format_exc(limit=20)
        with db.transaction() as session:
            row = session.get(InboundMessage, inbound_id)
            assert row is not None
            row.status, row.error = InboundStatus.SET_ASIDE, clean_text(trace[-8000:])
        log.error(
            "inbound %d set aside for the referee: %s: %s", inbound_id, type(exc).__name__, exc
        )
        return IngestResult(inbound_id, InboundStatus.SET_ASIDE, f"{type(exc).__name__}: {exc}")
    if status != InboundStatus.SET_ASIDE:
        log.info("inbound %d %s%s", inbound_id, status, f": {detail}" if detail else "")
    return IngestResult(inbound_id, status, detail)


def _kept_after_reading(
    session: Session,
    config: Config,
    row: InboundMessage,
    raw: bytes,
    mail: ParsedMail,
    secrets: tuple[str, ...],
) -> None:
    """What is kept of a message once it has been read: the copy the sandbox made while
    reading it, in which every key it shows, in any form, is replaced by **** (order keys
    are kept only as hashes) and the bodies of parts nobody reads (attachments, forwarded
    messages) are replaced by a note of their size. Past its sender's daily cap it is cut
    to its first 64 KiB (under an X-SNL-PBEM-Trimmed line). The digest of the original
    bytes stays, so the same message arriving again is still recognised."""
    if mail.redacted is not None:  # and the keys it gave once more, as written (cheap)
        kept = redact_in_bytes(mail.redacted, secrets)
    elif secrets:  # the reading pass left it (a slow message): the keys go from the bytes
        kept = redact_in_bytes(raw, secrets)
    else:
        kept = raw
    if len(kept) > TRIMMED_BYTES and _over_daily_cap(session, config, row):
        mark = f"X-SNL-PBEM-Trimmed: over the sender's daily cap; {len(raw)} bytes\r\n"
        kept = mark.encode() + kept[:TRIMMED_BYTES]
        log.warning("inbound %d: %s over its daily cap: kept trimmed", row.id, row.sender)
    if kept != raw:
        row.raw = kept


def _process(
    session: Session,
    config: Config,
    row: InboundMessage,
    mail: ParsedMail,
    too_large: str | None,
) -> tuple[str, str, tuple[str, ...]]:
    """(status, detail, the keys it gave) for one parsed message."""
    mail_settings = config.settings.mail
    row.sender = mail.sender
    if mail_settings.authserv_id:
        ours = [
            a
            for a in mail.authentication_results
            if a.split(";")[0].strip().lower() == mail_settings.authserv_id.lower()
        ]
        row.auth_results = "\n".join(ours) or None
    if mail.message_id:
        earlier = session.scalar(
            select(InboundMessage.id).where(
                InboundMessage.message_id == mail.message_id,
                InboundMessage.id != row.id,
                InboundMessage.status.in_((InboundStatus.PROCESSED, InboundStatus.REJECTED)),
            )
        )
        if earlier is not None:
            seen = f"Message-ID already seen in inbound {earlier}"
            return InboundStatus.DUPLICATE, seen, mail.quoted_keys
    if mail.automated:
        # a bounce of our own mail tells the referee; keys quoted in robots' mail (a bounced
        # welcome returns its key) are redacted like a player's own
        bounce = record_bounce(session, config, row, mail.delivery_report, row.received_at)
        if bounce is not None:
            return InboundStatus.IGNORED, bounce, mail.quoted_keys
        robot = f"automated mail, not answered: {mail.automated}"
        return InboundStatus.IGNORED, robot, mail.quoted_keys
    commands = mail.commands or parse_commands("", "")
    ctx = Context(session, config, row, mail, commands, row.received_at)
    if too_large is not None:
        guest_notice(
            ctx,
            "Your message was too large to read "
            f"({config.settings.mail.max_message_size // 1024} KiB at most), so nothing in "
            "it was applied. Send your orders as plain text, without attachments.",
        )
        return InboundStatus.REJECTED, too_large, ()
    status, detail = _dispatch(ctx)
    return status, detail, tuple(sorted({*commands.order_keys, *mail.quoted_keys}))


def _dispatch(ctx: Context) -> tuple[str, str]:
    if is_referee_mail(ctx):
        return handle_referee_mail(ctx)
    commands = ctx.commands
    if commands.order_key is None:  # LIST, JOIN, CONFIRM, OBSERVE, UNOBSERVE: no key needed
        handled = membership_mail.handle_open(ctx)
        if handled is not None:
            if not (commands.has_orders or commands.clear or commands.status):
                return handled
            # orders without a key as well: they get the usual answer (no key, not applied)
            status, detail = _dispatch_game(ctx)
            return status, f"{handled[1]}; {detail}"
    return _dispatch_game(ctx)


def _dispatch_game(ctx: Context) -> tuple[str, str]:
    session, mail, commands = ctx.session, ctx.mail, ctx.commands
    game = _find_game(session, commands, mail.sender)
    if game is None:
        if commands.help and commands.order_key is None:
            guest_help(ctx, None)
            return InboundStatus.PROCESSED, "help sent"
        if commands.game is not None and not commands.game_from_subject:
            guest_notice(
                ctx,
                "Your message's GAME line names a game that is not on this server: check "
                "the game id in your welcome message.",
            )
            return InboundStatus.REJECTED, f"unknown game {commands.game!r}"
        guest_notice(
            ctx,
            "Your message did not say which game it is for: add a "
            "line GAME <id> (or put [id] in the subject)." + _cut_note(commands),
        )
        return InboundStatus.REJECTED, "no game given"
    # The game row is locked, as a close locks it, and before anything that refers to it is
    # written (a foreign key's share lock first would let two intakes deadlock): an order is
    # either stored before a close reads the orders (and counts), or looked at after it (and
    # refused with the reason), never stored for a round a concurrent close has adjudicated.
    session.refresh(game, with_for_update=True)
    ctx.row.game_id = game.id
    if commands.conflict is not None:
        guest_notice(
            ctx,
            f"Your message was not applied: {commands.conflict}. Send one order set "
            "per message, with one GAME and one KEY line.",
            game,
        )
        return InboundStatus.REJECTED, f"not one order set: {commands.conflict}"
    if commands.help and commands.order_key is None:
        guest_help(ctx, game)
        return InboundStatus.PROCESSED, "help sent"
    player = None
    if commands.order_key is not None:
        player = session.scalar(
            select(Player).where(
                Player.game_id == game.id,
                Player.active,
                Player.order_key_hash == hash_key(commands.order_key, game.order_key_salt),
            )
        )
    if player is None:
        return _not_authenticated(ctx, game)
    ctx.row.player_id = player.id
    moved = membership_mail.confirm_address(ctx, game, player)  # from the new address
    other = _other_address(mail, player)
    if other:
        log.warning("inbound %d: %s's key used from %s", ctx.row.id, player.name, other)
        audit(
            session,
            ctx.now,
            "intake",
            "key-elsewhere",
            game,
            player=player.name,
            address=other,
            inbound=ctx.row.id,
        )
    done = [moved] if moved else []
    if commands.actions:  # RESIGN, ABSENT, NEW KEY, ADDRESS, HISTORY (and LIST, OBSERVE...)
        done += membership_mail.handle_keyed(ctx, game, player)
    commands = ctx.commands = _in_this_game(commands, ruleset_of(game))
    if commands.help:
        reply(ctx, game, player, MailKind.HELP, help_template(game), other_sender=other)
    if (commands.has_orders or commands.clear) and player.active:  # not just resigned
        status, detail = _orders(ctx, game, player, other)
        return status, "; ".join([*done, detail])
    if commands.status:
        _status_reply(ctx, game, player, other)
        return InboundStatus.PROCESSED, "; ".join([*done, "status sent"])
    if commands.help:
        return InboundStatus.PROCESSED, "; ".join([*done, "help sent"])
    if done:
        return InboundStatus.PROCESSED, "; ".join(done)
    reply(
        ctx,
        game,
        player,
        MailKind.NOTICE,
        "player/notice.txt.j2",
        message=f"Your message had no orders {ruleset_of(game).no_orders}" + _cut_note(commands),
        line_problems=redacted(commands.problems, commands.order_keys),
        other_sender=other,
    )
    return InboundStatus.PROCESSED, "no orders in it"


def _cut_note(commands: Commands) -> str:
    """Why lines were not read, for a notice (without echoing them: it may be forged)."""
    if commands.cut is None:
        return ""
    return (
        ' (Reading stopped at a line that starts quoted text, such as "On ... wrote:"; '
        "nothing below it was read. Write your orders above it, or below the quoted "
        "lines marked with >.)"
    )


def _other_address(mail: ParsedMail, player: Player) -> str | None:
    """The address the key was used from, when it is not plainly the player's own: another
    address, none we could read, or a From header whose name shows another address."""
    if mail.sender is None:
        return f"an address we could not read ({mail.sender_doubt or 'no From address'})"
    if mail.sender != player.email.lower():
        return mail.sender
    if mail.sender_doubt:
        return f"{mail.sender} ({mail.sender_doubt})"
    return None


def _not_authenticated(ctx: Context, game: Game) -> tuple[str, str]:
    """No active player has this key: refused; the registered sender is told (within the
    guests' budget), and key guessing is counted and reported."""
    session, commands, mail = ctx.session, ctx.commands, ctx.mail
    reason = "no KEY line" if commands.order_key is None else "wrong key"
    log.warning(
        "inbound %d for %s: authentication failed (%s) from %s",
        ctx.row.id,
        game.name,
        reason,
        mail.sender,
    )
    quiet = False
    if commands.order_key is not None:
        audit(
            session, ctx.now, "intake", "wrong-key", game, address=mail.sender, inbound=ctx.row.id
        )
        quiet = _key_guessing(ctx, game)
    if not quiet:
        guest_notice(
            ctx,
            f"Your message had {'no' if commands.order_key is None else 'a wrong'} order key, so "
            "nothing in it was applied. Every order needs the line KEY followed by your "
            "order key (see your welcome message)." + _cut_note(commands),
            game,
        )
    return InboundStatus.REJECTED, f"authentication failed ({reason})"


def _key_guessing(ctx: Context, game: Game) -> bool:
    """Count wrong keys; past the limits the sender gets no more notices and the referee
    is told (once an hour per game). True when this message should go unanswered.

    A right key is never refused for it: a forger could otherwise lock a player out by
    sending wrong keys from the player's address. Guessing gains nothing in any case:
    every reply goes to a registered address, never to the guesser."""
    session, sender = ctx.session, ctx.mail.sender
    since = ctx.now - timedelta(hours=1)
    wrong = (
        InboundMessage.game_id == game.id,
        InboundMessage.error == WRONG_KEY,
        InboundMessage.received_at > since,
        InboundMessage.id != ctx.row.id,
    )

    def bounded_count(*conditions: Any, limit: int) -> int:
        """How many (this message included), counted only up to just past ``limit``."""
        ids = select(InboundMessage.id).where(*conditions).limit(limit + 1).subquery()
        return 1 + (session.scalar(select(func.count()).select_from(ids)) or 0)

    over_sender = (
        sender is not None
        and bounded_count(
            *wrong, InboundMessage.sender == sender, limit=WRONG_KEYS_PER_SENDER_PER_HOUR
        )
        > WRONG_KEYS_PER_SENDER_PER_HOUR
    )
    over_game = bounded_count(*wrong, limit=WRONG_KEYS_PER_GAME_PER_HOUR) > (
        WRONG_KEYS_PER_GAME_PER_HOUR
    )
    if not (over_sender or over_game):
        return False
    # past the game's limit the referee is told; only a sender past its own limit is
    # quietened (one guesser must not silence every player's wrong-key notices)
    already = session.scalar(
        select(func.count())
        .select_from(OutboxMessage)
        .where(
            OutboxMessage.game_id == game.id,
            OutboxMessage.kind == MailKind.KEY_GUESSING,
            OutboxMessage.created_at > since,
        )
    )
    if not already:
        counts = session.execute(
            select(InboundMessage.sender, func.count())
            .where(*wrong)
            .group_by(InboundMessage.sender)
            .order_by(func.count().desc())
            .limit(20)
        ).all()
        senders = {address or "(no address)": n for address, n in counts}
        senders[sender or "(no address)"] = senders.get(sender or "(no address)", 0) + 1
        enqueue_mail(
            session,
            ctx.config,
            game=game,
            kind=MailKind.KEY_GUESSING,
            to=ctx.config.settings.mail.referee,
            now=ctx.now,
            template="referee/key_guessing.txt.j2",
            total=sum(senders.values()),
            senders=sorted(senders.items(), key=lambda item: -item[1]),
            per_sender=WRONG_KEYS_PER_SENDER_PER_HOUR,
            per_game=WRONG_KEYS_PER_GAME_PER_HOUR,
        )
        log.warning("%s: many wrong order keys in the last hour: referee told", game.name)
    return over_sender


def _orders(ctx: Context, game: Game, player: Player, other: str | None) -> tuple[str, str]:
    session, commands = ctx.session, ctx.commands
    round_ = open_round(session, game)
    refusal = None
    if game.state == GamePhase.PAUSED:
        refusal = "The game is paused: orders cannot be accepted until the referee resumes it."
    elif game.state != GamePhase.RUNNING or round_ is None:
        refusal = (
            f"The game is {'over' if game.state == GamePhase.OVER else 'not running'}: "
            "there is no round to send orders for."
        )
    elif commands.round is not None and commands.round != round_.number:
        refusal = (
            f"Your orders are for round {commands.round}, but the round open now is "
            f"round {round_.number}. Send them again with ROUND {round_.number} (or "
            "without a ROUND line)."
        )
    elif ctx.now + RECEIPT_RESOLUTION <= round_.opened_at:  # IMAP dates are whole seconds
        refusal = (
            f"Your message reached us before round {round_.number} opened, so it was meant "
            f"for an earlier round, which is closed now. Send your orders for round "
            f"{round_.number} again."
        )
    elif ctx.now > round_.deadline:
        refusal = (
            f"Your orders arrived after round {round_.number}'s deadline "
            f"({game_time(game, round_.deadline)}), so they do not count."
        )
    if refusal is not None:
        reply(
            ctx,
            game,
            player,
            MailKind.NOTICE,
            "player/notice.txt.j2",
            message=refusal,
            line_problems=(),
            other_sender=other,
            always=True,
        )
        return InboundStatus.REJECTED, refusal
    assert round_ is not None
    receipt = submit_orders(
        session,
        game,
        player,
        dice=commands.dice,
        nomination=commands.nomination,
        received_at=ctx.now,
        inbound_id=ctx.row.id,
        withdraw=commands.clear and not commands.has_orders,
        clear=commands.clear,
        roll=commands.roll,
    )
    reading = receipt.reading
    line_problems = [LineProblem(line, why) for line, why in reading.line_problems]
    line_problems += redacted(commands.problems, commands.order_keys)
    reply(
        ctx,
        game,
        player,
        MailKind.ACK,
        f"{ruleset_of(game).name}/orders_ack.txt.j2",
        always=True,
        cleared=commands.clear and not commands.has_orders,
        round=round_,
        rules=reading.ack,
        line_problems=line_problems,
        replaced=[
            (redact(a, commands.order_keys), redact(b, commands.order_keys))
            for a, b in commands.replaced
        ],
        ignored=[redact(x, commands.order_keys) for x in commands.ignored][:20],
        dropped=commands.dropped_lines,
        deadline=game_time(game, round_.deadline),
        other_sender=other,
        note=ctx.mail.note if ctx.mail.note and "attachment" in ctx.mail.note else None,
        cut=redact(commands.cut, commands.order_keys) if commands.cut else None,
    )
    return InboundStatus.PROCESSED, (
        "orders withdrawn"
        if commands.clear and not commands.has_orders
        else f"orders for round {round_.number} ({reading.summary})"
    )


def _status_reply(ctx: Context, game: Game, player: Player, other: str | None) -> None:
    session = ctx.session
    state = player_state(session, game, player)
    round_ = open_round(session, game)
    latest = None  # the orders that count now, worded by the ruleset's template
    if round_ is not None:
        latest = session.scalar(
            select(OrderRecord)
            .where(OrderRecord.round_id == round_.id, OrderRecord.player_id == player.id)
            .order_by(*(column.desc() for column in RECEIPT_ORDER))
            .limit(1)
        )
    states: dict[str, str] = {
        GamePhase.RUNNING: "running",
        GamePhase.PAUSED: "paused by the referee",
        GamePhase.OVER: "over",
        GamePhase.NEW: "not started yet",
    }
    state_text = states[game.state]
    reply(
        ctx,
        game,
        player,
        MailKind.STATUS,
        f"{ruleset_of(game).name}/status.txt.j2",
        state_text=state_text,
        position=state.positions[player.name],
        rules=ruleset_of(game).player_view(settings_of(game), state, player.name),
        career=career(session, game, player),
        round=round_,
        orders=latest,
        deadline=game_time(game, round_.deadline) if round_ else "",
        other_sender=other,
    )


def _in_this_game(commands: Commands, ruleset: Ruleset) -> Commands:
    """The commands as the game's ruleset reads them: an order word it does not read (a
    DICE line in the classic game, ROLL in the postal one) is no order here. Its line
    is refused with the ruleset's reason, once, and what it said is dropped, so it
    neither replaces earlier orders nor counts as sent."""
    problems, refused = [], set()
    for problem in commands.problems:
        word = _word(problem.line)
        why = ruleset.refuse_word(word)
        if why is None:
            problems.append(problem)
        else:
            problems.append(LineProblem(problem.line, why))
            refused.add(word)
    changes: dict[str, Any] = {}
    said = (
        (
            "DICE",
            commands.dice is not None,
            {"dice": None},
            " ".join(["DICE", *map(str, commands.dice or ())]),
        ),
        (
            "TRAPDOOR",
            commands.nomination is not None or commands.no_nomination,
            {"nomination": None, "no_nomination": False},
            f"TRAPDOOR {'NONE' if commands.nomination is None else commands.nomination}",
        ),
        ("ROLL", commands.roll, {"roll": False}, "ROLL"),
    )
    for word, present, dropped, line in said:
        why = ruleset.refuse_word(word) if present else None
        if why is None:
            continue
        changes.update(dropped)
        if word not in refused:
            problems.append(LineProblem(line, why))
    if not changes and len(problems) == len(commands.problems):
        return commands
    return replace(commands, problems=tuple(problems), **changes)


def _word(line: str) -> str:
    """An order line's command word, as the ruleset knows it (DIE is DICE)."""
    word = line.strip().split(maxsplit=1)[0].upper().rstrip(":") if line.strip() else ""
    return "DICE" if word == "DIE" else word


def _find_game(session: Session, commands: Commands, sender: str | None) -> Game | None:
    """The game a GAME line names; else the first [id] of the subject that is a game here
    (a gateway's "[EXTERNAL]" may come first); else the one running game the sender
    plays in."""
    if commands.game is not None and not commands.game_from_subject:
        return session.scalar(select(Game).where(Game.name == commands.game))
    for candidate in commands.subject_games:
        game = session.scalar(select(Game).where(Game.name == candidate))
        if game is not None:
            return game
    if sender is None:
        return None
    games = session.scalars(
        select(Game)
        .join(Player, Player.game_id == Game.id)
        .where(
            func.lower(Player.email) == sender,
            Player.active,
            Game.state.in_((GamePhase.RUNNING, GamePhase.PAUSED)),
        )
    ).all()
    return games[0] if len(set(g.id for g in games)) == 1 else None
