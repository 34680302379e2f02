"""Batches: several stored messages processed in one transaction (the readers' batches,
``snl_pbem.runners.mailboxes``); should one fail, written again with a savepoint each.
One commit for the batch instead of one per message, and what the messages share (the
game, its round, its players) read once.
Each message's guarantees are those of ``pipeline``: processed once (its row locked and its
status checked), and a crash at any point loses nothing and applies nothing twice (nothing
is committed before the whole batch is)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, func, inspect, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.state import InstanceState

import snl_pbem.app.intake.dedupe as dedupe
from snl_pbem.app import txcache
from snl_pbem.app.ahead import LOCKED
from snl_pbem.app.intake.authenticate import read_ahead
from snl_pbem.app.intake.context import IngestResult, Results
from snl_pbem.app.intake.pipeline import _log_result, _process_in, _process_row
from snl_pbem.app.intake.reading import _read, _sent_to, _sent_to_many
from snl_pbem.app.intake.store import TOO_LARGE
from snl_pbem.config import Config
from snl_pbem.mail import sandbox
from snl_pbem.mail.parse import ParsedMail, ParseTimeout
from snl_pbem.store import Database, InboundMessage, deferred
from snl_pbem.store.db import TransactionUndone
from snl_pbem.store.states import InboundStatus
from snl_pbem.store.unnest import update_all

log = logging.getLogger("snl_pbem.intake")


@dataclass(eq=False)
class ReadBatch:
    """A batch read (``read_batch``) and waiting for its transaction (``apply_batch``).
    Reading takes no lock and writes nothing, so the readers read the next batch while this
    one is written (``snl_pbem.runners.mailboxes.Readers``)."""

    ids: list[int]
    known: dict[int, IngestResult] = field(default_factory=dict)
    """Messages found handled already (another reader, another process)."""
    todo: list[tuple[int, bytes, str | None]] = field(default_factory=list)
    """(id, raw, note) of each message to process, in the order given."""
    read: list[ParsedMail | str | Exception] = field(default_factory=list)
    """Each one's reading, as ``todo``: the mail, or why it could not be read."""


def process_batch(db: Database, config: Config, inbound_ids: list[int]) -> Results:
    """Process several stored messages in one transaction, in the order given:
    ``read_batch`` then ``apply_batch``."""
    return apply_batch(db, config, read_batch(db, config, inbound_ids))


def read_batch(db: Database, config: Config, inbound_ids: list[int]) -> ReadBatch:
    """Read stored messages for their processing, outside any transaction that writes:
    their rows, the fingerprints of what we sent their senders, and each one parsed in the
    sandbox (one round trip for all). Raises only if the database is away."""
    batch = ReadBatch(list(inbound_ids))
    with db.reading() as session:
        stored = {
            inbound_id: (status, raw, note, sender)
            for inbound_id, status, raw, note, sender in session.execute(
                select(
                    InboundMessage.id,
                    InboundMessage.status,
                    InboundMessage.raw,
                    InboundMessage.error,
                    InboundMessage.sender,  # envelope_of(raw)'s, as store wrote it
                ).where(InboundMessage.id.in_(inbound_ids))
            )
        }
    senders: list[str | None] = []
    for inbound_id in inbound_ids:
        status, raw, note, sender = stored[inbound_id]
        if status != InboundStatus.NEW:
            handled = f"already handled: {status}"
            batch.known[inbound_id] = IngestResult(inbound_id, InboundStatus.DUPLICATE, handled)
        else:
            batch.todo.append((inbound_id, raw, note))
            senders.append(None if note and note.startswith(TOO_LARGE) else sender)
    if not batch.todo:
        return batch
    if len(inbound_ids) == 1:  # alone: read as ``_process_row`` reads (set aside if unread)
        (_, raw, _), sender = batch.todo[0], senders[0]
        batch.read = [_read(raw, config, _sent_to(db, config, sender))]
        return batch
    sent = _sent_to_many(db, config, senders)
    batch.read = list(
        sandbox.parse_many(
            [raw for _, raw, _ in batch.todo],
            config.settings.mail.address,
            [sent[s] for s in senders],
        )
    )
    return batch


def apply_batch(db: Database, config: Config, batch: ReadBatch) -> Results:
    """Process a batch read by ``read_batch`` in one transaction, in the order given: one
    commit for the batch instead of one per message, and the game, its round and its
    players read once (the session keeps them). Each row is locked and its status checked
    again here: a message another reader or process handled since it was read is not
    applied twice. Should a message's processing (or the commit) fail, the transaction is
    rolled back and the batch written again with a savepoint each (a failure is rare: the
    savepoints cost two statements a message, always paid otherwise); there a failure
    rolls back its own savepoint only, and that message is processed again alone once the
    batch is committed (``_process_row``: set aside with its traceback if it fails again),
    so it costs the others nothing. If the batch cannot be committed, each is processed
    alone. Nothing is committed before the batch is, so a crash part-way leaves all of them
    stored, unprocessed (read again at the next start), none applied twice. Per message, its
    result, or the exception that stopped it (the database away: it stays stored,
    unprocessed). A single message is processed as ``process_now`` does (set aside if it fails)."""
    results: Results = dict(batch.known)
    todo, read = batch.todo, batch.read
    if len(batch.ids) == 1:
        for (inbound_id, raw, note), mail in zip(todo, read, strict=True):
            results[inbound_id] = _process_alone(db, config, inbound_id, (raw, note), mail)
        return results
    try:
        try:  # first without savepoints: one failure undoes the batch, then written again
            done, alone = _write(db, config, todo, read, savepoints=False)
        except Exception as exc:  # a message's failure, or one met at the commit
            culprit = f"inbound {exc.inbound_id}" if isinstance(exc, _Failed) else "its commit"
            log.info(
                "a batch written without savepoints failed at %s (%s): the batch is written "
                "again, a savepoint each",
                culprit,
                exc.__cause__ if isinstance(exc, _Failed) else exc,
            )
            done, alone = _write(db, config, todo, read, savepoints=True)
    except Exception as exc:  # the batch was not committed: nothing of it holds
        log.warning("a batch of %d could not be committed (%s): each alone", len(todo), exc)
        done, alone = [], [inbound_id for inbound_id, _, _ in todo]
    for found in done:
        assert found.inbound_id is not None
        results[found.inbound_id] = found
        _log_result(found)
    for inbound_id in alone:
        results[inbound_id] = _process_alone(db, config, inbound_id)
    return {inbound_id: results[inbound_id] for inbound_id in batch.ids}


class _Failed(Exception):
    """A message of a batch written without savepoints failed: the batch is undone."""

    def __init__(self, inbound_id: int) -> None:
        super().__init__(inbound_id)
        self.inbound_id = inbound_id


def _write(
    db: Database,
    config: Config,
    todo: list[tuple[int, bytes, str | None]],
    read: list[ParsedMail | str | Exception],
    *,
    savepoints: bool,
) -> tuple[list[IngestResult], list[int]]:
    """One transaction for the batch, committed: each message's result, and those to be
    processed again alone. Without ``savepoints`` (two statements a message, and a third of
    the ORM's work around them, saved) the first failure raises ``_Failed`` (or, met at the
    end, the failure of the rows written together (``deferred``) or of the commit) and the
    transaction is rolled back; with them a failure undoes its own message only. A message
    whose failure was passed over but undid the transaction (or its savepoint) fails too
    (``TransactionUndone``), never counted as done."""
    done: list[IngestResult] = []
    alone: list[int] = []
    with db.transaction() as session:
        # every row locked at once, before the first message (held to the commit), in id
        # order: two batches sharing messages wait for each other, never deadlock
        ids = [inbound_id for inbound_id, _, _ in todo]
        rows = session.scalars(  # kept referenced: the session's map holds them weakly
            select(InboundMessage)
            .where(InboundMessage.id.in_(ids))
            .order_by(InboundMessage.id)
            .with_for_update()
        ).all()
        parsed = [m for m in read if isinstance(m, ParsedMail)]
        dedupe.look_up(session, [m.message_id for m in parsed])
        read_ahead(session, parsed, savepoint=savepoints)  # their games and seats, at once
        # without savepoints, the messages' order sets and replies are written together,
        # before whatever statement comes next (``deferred``): two statements a message
        # fewer; a row that fails fails there, and the batch is written again
        checked: set[InstanceState[Any]] = set()  # (see _pending_beyond_messages)
        with nullcontext() if savepoints else deferred.deferring(session):
            for (inbound_id, raw, note), mail in zip(todo, read, strict=True):
                try:
                    with session.begin_nested() if savepoints else nullcontext():
                        found = _process_in(
                            session, config, inbound_id, raw, note, as_read(mail), locked=True
                        )
                        if not session.is_active:  # a write it passed over undid the batch's work
                            raise TransactionUndone("its savepoint" if savepoints else "the batch")
                        if not savepoints and _pending_beyond_messages(session, checked):
                            session.flush()  # (see _pending_beyond_messages)
                except Exception as exc:
                    if not savepoints:
                        raise _Failed(inbound_id) from exc
                    # a savepoint rolled back releases the row locks taken in it (PostgreSQL)
                    session.info.pop(LOCKED, None)
                    txcache.forget(session)  # what it read may be undone with it
                    log.warning(
                        "inbound %d failed in a batch (%s: %s): processed again alone",
                        inbound_id,
                        type(exc).__name__,
                        exc,
                    )
                    alone.append(inbound_id)
                else:
                    done.append(found)
                    if isinstance(mail, ParsedMail):
                        dedupe.processed(session, mail.message_id, inbound_id, found.status)
        if not savepoints and not db.is_sqlite:
            _update_messages_rows(session, rows)
        del rows
    return done, alone


def _update_messages_rows(session: Session, rows: Sequence[InboundMessage]) -> None:
    """The batch's messages' rows (their status, note, redacted bytes, game and player)
    written by one statement a set of columns changed (``unnest.update_all``), not the
    ORM's flush's UPDATE a row: on PostgreSQL 8.3 ms a batch of 100 on the clock, and 2 of
    the server's CPU. What each row changed is taken out of the session's hands (set as
    committed); what else the session holds is written first (as the batch is written
    now, nothing: a message's seats and keys are written as it ends, see
    ``_pending_beyond_messages``), then the rows. A row deleted or expunged meanwhile is
    left to the session as it was. A failure here is the batch's, as one at its commit
    would be: it is written again, a savepoint each, in a new session."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    deleted = session.deleted
    for row in rows:
        state = inspect(row)
        if row not in session or row in deleted or state.was_deleted:
            continue
        if not state.committed_state:
            continue
        names = tuple(sorted(state.committed_state))
        values = {name: state.dict[name] for name in names}
        groups.setdefault(names, []).append({"id": row.id, **values})
        for name, value in values.items():
            set_committed_value(row, name, value)
    session.flush()
    table = cast(Table, InboundMessage.__table__)
    for group in groups.values():
        update_all(session.connection(), table, group)


def _pending_beyond_messages(session: Session, checked: set[InstanceState[Any]]) -> bool:
    """Whether a message written without a savepoint left the session more to write than
    the messages' own rows (their status): a seat, a key, a round. That is written as the
    message ends, as a savepoint's end wrote it, so that what the next message reads
    without flushing (its key's seat, its orders so far) is what the database holds. The
    messages' rows are written together at the commit (one statement for the batch, not
    one a message): what reads them in between (a sender's wrong keys, its mail of the
    day) asks the session, which writes them first, and the reads that do not flush
    never read them (a batch's Message-IDs are looked up at its start). Should one of
    them fail when written, the batch is written again with a savepoint each, where each
    message's own failure is its own. ``checked``: the states of the batch's messages'
    rows found changed already (kept by the caller for the batch), not looked at again."""
    if any(not isinstance(row, InboundMessage) for row in (*session.new, *session.deleted)):
        return True
    # the rows changed, by their states (``Session.dirty`` built a set of the batch's rows
    # at every message; both count a row set back as it was), each looked at once: each
    # message looked at all before it, the batch's square (44 a message at batches of 85)
    fresh = session.identity_map._modified - checked
    if any(state.class_ is not InboundMessage for state in fresh):
        return True
    checked |= fresh
    return False


def _process_alone(
    db: Database,
    config: Config,
    inbound_id: int,
    stored: tuple[bytes, str | None] | None = None,
    mail: ParsedMail | str | Exception | None = None,
) -> IngestResult | Exception:
    try:
        read = None if mail is None else as_read(mail)
        return _process_row(db, config, inbound_id, stored, read)
    except Exception as exc:  # the database away: it stays stored, unprocessed
        return exc


def as_read(read: ParsedMail | str | Exception) -> ParsedMail | str:
    """A batch's reading as ``_read`` gives one: the mail, or why it could not be read."""
    if isinstance(read, str):  # read alone: ``_read`` said why
        return read
    if isinstance(read, ParseTimeout):
        return f"set aside: {read}"
    if isinstance(read, Exception):
        return f"set aside: it could not be read: {read}"
    return read


def waiting_sizes(db: Database, ids: list[int]) -> dict[int, tuple[int, str | None]]:
    """(stored size in bytes, sender) of each of these messages still unprocessed: the
    readers read small ones first, whoever sent them."""
    found: dict[int, tuple[int, str | None]] = {}
    size = func.coalesce(func.length(InboundMessage.raw), 0)
    with db.reading() as session:
        for start in range(0, len(ids), 500):  # bounded IN lists, whatever the flood
            rows = session.execute(
                select(InboundMessage.id, size, InboundMessage.sender).where(
                    InboundMessage.id.in_(ids[start : start + 500]),
                    InboundMessage.status == InboundStatus.NEW,
                )
            ).all()
            found.update((inbound_id, (int(n), sender)) for inbound_id, n, sender in rows)
    return found
