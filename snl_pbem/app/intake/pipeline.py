"""The intake's pipeline: every message, however it came (IMAP, LMTP, a file), is stored,
then run through named steps in order, each with one job (after GNU Mailman 3's
pipelines):

    store         stored and committed before its source is acknowledged (store.py);
                  then read in the sandbox (reading.py) and, in one transaction:
    dedupe        a Message-ID already processed is not applied again (dedupe.py)
    bounce        automated mail is never answered; bounces are recorded (bounce.py)
    too large     one stored as its headers only is refused with a notice (store.py)
    authenticate  the referee's mail is known by its key (authenticate.py) ...
    commands      ... and its words run (commands.py); then the words anyone may send
    authenticate  the game, then the order key: who may do what (authenticate.py)
    commands      a player's words, the order set, STATUS, HELP, through the registry
    reply         the final answer, and the redacted copy kept (reply.py)

(``STEPS`` below is that list; batch.py runs it for several messages in one transaction,
and again with a savepoint each should one of them fail.)

A step may end the message with an ``Outcome``. Each message is read (parsed) first, in
the sandbox and outside any transaction (reading.py), then processed in one transaction
with its row locked and its status checked: applied once, replied once, however many
processes reach it. A message whose processing fails is kept with its traceback, set
aside for the referee, and the server carries on.

No one message can cost other players their orders: it is read in a worker process
bounded in time and memory (``snl_pbem.mail.sandbox``); what the database cannot hold (a
NUL, a lone surrogate) is cleaned before it is written; a message that cannot be stored as
received is stored as a stub and set aside; and a flood from one address is kept trimmed.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

import snl_pbem.app.intake.authenticate as authenticate
import snl_pbem.app.intake.bounce as bounce
import snl_pbem.app.intake.commands as commands
import snl_pbem.app.intake.dedupe as dedupe
import snl_pbem.app.intake.reply as reply
import snl_pbem.app.intake.store as store
import snl_pbem.app.txcache as txcache
from snl_pbem.app.commands import read as read_commands
from snl_pbem.app.intake.context import IngestResult, Message, Outcome, what_it_did
from snl_pbem.app.intake.reading import _read, _sent_to
from snl_pbem.app.intake.reply import kept_after_reading
from snl_pbem.app.intake.store import TOO_LARGE
from snl_pbem.app.lookup import audit
from snl_pbem.app.replies import Context
from snl_pbem.config import Config
from snl_pbem.errors import NotFound
from snl_pbem.mail import sandbox
from snl_pbem.mail.parse import ParsedMail, clean_text, envelope_of
from snl_pbem.store import Database, Game, InboundMessage
from snl_pbem.store.states import InboundStatus

log = logging.getLogger("snl_pbem.intake")

MAX_ATTEMPTS = 5
"""Restarts that may find a message still unprocessed before it is set aside (a message
that kills the server every time must not keep it in a crash loop; a server killed by
something else now and then must not lose an order)."""

Step = Callable[[Message], Outcome | None]
STEPS: tuple[tuple[str, Step], ...] = (
    ("dedupe", dedupe.already_processed),
    ("bounce", bounce.automated),
    ("store: too large", store.too_large),
    ("authenticate: referee", authenticate.referee),
    ("commands: referee", commands.referee_words),
    ("commands: open", commands.open_words),
    ("authenticate: game", authenticate.game),
    ("authenticate: key", authenticate.key),
    ("commands: keyed", commands.keyed),
    ("reply", reply.final),
)
"""The steps after storing and reading, in order: the first that returns an Outcome ends
the message (the reply step always does). Words anyone may send come before the game is
looked for, as they need none."""


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
    """Store, then process, one message. Raises only if it could not be stored at all (the
    database is down): a message the database refuses as it is, is stored as a stub and set
    aside, so that no message stops the mailbox. ``size``: ``raw`` is only the header of a
    message that large (the IMAP poller never fetches one over the limit whole).
    ``process=False`` only stores it (status ``new``): the intakes have it read by parallel
    workers (``snl_pbem.runners.mailboxes.Readers``), so a slow one never holds the next."""
    result, kept = store.store(
        db, config, raw, received_at, source, uidvalidity=uidvalidity, uid=uid, size=size
    )
    if kept is None or not process or result.inbound_id is None:
        return result
    return _process_row(db, config, result.inbound_id, kept)


def process_pending(
    db: Database, config: Config, workers: int = sandbox.MAX_WORKERS
) -> list[IngestResult]:
    """Process messages stored but not processed (the server stopped in between). Several
    senders' messages are read at once (``workers``), each sender's one at a time in the
    order they came: a slow message holds one worker, not the start-up, and a player's
    later message still replaces their earlier one. Results in stored order."""
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


def _process_row(
    db: Database,
    config: Config,
    inbound_id: int,
    stored: tuple[bytes, str | None] | None = None,
    mail: ParsedMail | str | None = None,
) -> IngestResult:
    """Process one stored message; any failure is recorded on it, never raised.

    The message is read (parsed) first, outside any transaction, so no lock is held while a
    hostile message is taken apart. Then the row is locked and its status checked in the
    processing transaction, so that a message is processed once even when two processes
    reach it together (one server's poller and another's start-up ``process_pending``, or a
    referee's ``ingest``). That same transaction keeps the message as it may be kept
    (``reply.kept_after_reading``). ``stored``: the row's raw bytes and note, ``mail``: its
    reading, when the caller has them already (``batch.read_batch``)."""
    if stored is None:
        with db.reading() as session:
            row = session.get(InboundMessage, inbound_id)
            assert row is not None
            status, raw, note = row.status, row.raw, row.error
        if status != InboundStatus.NEW:
            return IngestResult(inbound_id, InboundStatus.DUPLICATE, f"already handled: {status}")
    else:
        raw, note = stored
    if mail is None:
        too_large = bool(note and note.startswith(TOO_LARGE))
        sender = None if too_large else envelope_of(raw)[1]  # as ingest stored it on the row
        mail = _read(raw, config, _sent_to(db, config, sender))
    try:
        with db.transaction() as session:
            found = _process_in(session, config, inbound_id, raw, note, mail)
    except Exception as exc:  # kept with its traceback for the referee; the server carries on
        return _set_aside(db, inbound_id, exc)
    _log_result(found)
    return found


def _process_in(
    session: Session,
    config: Config,
    inbound_id: int,
    raw: bytes,
    note: str | None,
    mail: ParsedMail | str,
    locked: bool = False,
) -> IngestResult:
    """Process one read message in ``session``: its row locked and its status checked
    (processed once however many processes reach it), the steps run, the copy kept."""
    too_large = bool(note and note.startswith(TOO_LARGE))
    txcache.start(session)  # the game, its round, the keys: read once a batch
    row = session.get(InboundMessage, inbound_id, with_for_update=None if locked else True)
    assert row is not None
    if row.status != InboundStatus.NEW:
        handled = f"already handled: {row.status}"
        return IngestResult(inbound_id, InboundStatus.DUPLICATE, handled)
    if isinstance(mail, str):
        row.status, row.error = InboundStatus.SET_ASIDE, mail
        log.error("inbound %d %s", inbound_id, mail)
        return IngestResult(inbound_id, InboundStatus.SET_ASIDE, mail)
    msg, outcome, secrets = _process(session, config, row, mail, note if too_large else None)
    status, detail = outcome.status, outcome.detail
    row.status, row.error = status, clean_text(detail) or None
    try:  # never costs the message its processing (its query has a savepoint of its own)
        kept_after_reading(session, config, row, raw, mail, secrets)
    except Exception as exc:
        log.error("inbound %d: keeping a redacted copy failed: %s", inbound_id, exc)
    return what_it_did(session, msg, status, detail)


def _set_aside(db: Database, inbound_id: int, exc: Exception) -> IngestResult:
    """A message whose processing failed: kept with its traceback for the referee."""
    trace = clean_text(traceback.format_exc(limit=20)[-8000:])
    with db.transaction() as session:
        row = session.get(InboundMessage, inbound_id)
        assert row is not None
        row.status, row.error = InboundStatus.SET_ASIDE, trace
    log.error("inbound %d set aside for the referee: %s: %s", inbound_id, type(exc).__name__, exc)
    return IngestResult(inbound_id, InboundStatus.SET_ASIDE, f"{type(exc).__name__}: {exc}")


def _log_result(found: IngestResult) -> None:
    if found.status != InboundStatus.SET_ASIDE and not found.detail.startswith("already"):
        log.info(
            "inbound %d %s%s",
            found.inbound_id,
            found.status,
            f": {found.detail}" * bool(found.detail),
        )


def _process(
    session: Session,
    config: Config,
    row: InboundMessage,
    mail: ParsedMail,
    too_large: str | None,
) -> tuple[Message, Outcome, tuple[str, ...]]:
    """Run one parsed message through the steps: (it, its outcome, the keys it gave)."""
    mail_settings = config.settings.mail
    row.sender = mail.sender
    if mail_settings.authserv_id:
        ours = [
            a
            for a in mail.authentication_results
            if a.split(";")[0].strip().lower() == mail_settings.authserv_id.lower()
        ]
        row.auth_results = "\n".join(ours) or None
    read = read_commands(mail)  # with the registry: a command registered here is read
    msg = Message(Context(session, config, row, mail, read, row.received_at), too_large)
    outcome = _dispatch(msg)
    secrets = outcome.secrets
    if secrets is None:
        secrets = tuple(sorted({*read.order_keys, *mail.quoted_keys}))
    return msg, outcome, secrets


def _dispatch(msg: Message) -> Outcome:
    """The steps in order, until one ends the message; its detail says what was done."""
    for name, step in STEPS:
        outcome = step(msg)
        if outcome is not None:
            log.debug("inbound %d: %s at the step %s", msg.ctx.row.id, outcome.status, name)
            detail = "; ".join(x for x in (*msg.done, outcome.detail) if x)
            return Outcome(outcome.status, detail, outcome.secrets)
    raise AssertionError("the reply step ends every message")
