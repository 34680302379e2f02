"""The outbox: mail is written in the same transaction as the change it reports,
and sent by ``drain_outbox``.

A message is rendered from its template, given its Message-ID and stored;
the sender marks it sent only after the server's 250, retries temporary
failures with exponential backoff until a give-up time, and records
permanent ones for the referee (who is mailed about each). When the SMTP
server itself cannot be reached, a drain stops at the first message, hands
the rest of its batch back untouched and says so (``DrainReport.unreachable``):
the caller waits for the server, and nothing is counted against the messages,
so an outage costs only its own length and mail still goes in order.

Over 500 lines: the claim, the send and the record are one protocol whose guarantees,
at most once more per crash and in order per recipient, are read together here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, partial
from typing import Any, Concatenate, ParamSpec, cast

from sqlalchemy import (
    Connection,
    Executable,
    Table,
    and_,
    bindparam,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from snl_pbem.app import txcache
from snl_pbem.app.state import holder_name, holder_names
from snl_pbem.app.turns import sending_turn
from snl_pbem.config import Config
from snl_pbem.crashpoints import crash_point
from snl_pbem.i18n import DEFAULT as DEFAULT_LANGUAGE
from snl_pbem.i18n import LANGUAGES
from snl_pbem.mail.compose import compose, new_message_id
from snl_pbem.mail.dkim import sign as dkim_sign
from snl_pbem.mail.ours import fingerprint, scrubbed
from snl_pbem.mail.render import greeting, render
from snl_pbem.mail.smtp import Sender, SendError
from snl_pbem.procs import dead_here
from snl_pbem.rules.errors import RulesetError
from snl_pbem.rules.words import agree
from snl_pbem.store import Database, Game, OutboxMessage, Player, deferred
from snl_pbem.store.bulk import among, among_param
from snl_pbem.store.states import MailKind, OutboxStatus
from snl_pbem.store.unnest import insert_all

log = logging.getLogger("snl_pbem.outbox")

SENDER_NAME = "Snakes and Ladders referee"
P = ParamSpec("P")


def mail_row(
    session: Session,
    config: Config,
    /,
    *,
    game: Game | None,
    kind: str,
    to: str,
    now: datetime,
    template: str,
    secret: bool = False,
    auto_submitted: str = "auto-generated",
    broadcast: bool = False,
    in_reply_to: str | None = None,
    references: tuple[str, ...] = (),
    attachments: tuple[tuple[str, str, bytes], ...] = (),
    rules: Mapping[str, Any] | None = None,
    language: str | None = None,
    **context: Any,
) -> dict[str, Any]:
    """Render ``template`` into the outbox row that sends it (its column values).

    ``broadcast`` marks mail that every player of the game gets alike (reports, game
    over, a moved deadline): it carries list headers. Anything else is personal
    (``snl_pbem.mail.compose``). ``rules`` is the ruleset's part of the template's
    context (its views); a name in it that the server sets too is the ruleset's bug,
    refused here by name rather than rendered either way.

    Every template gets ``hello``, the greeting line: mail to a seat's holder (``player``
    in the context, sent to its address) greets them by the name they go by, which after
    a REPLACE is not the seat's (``state.holder_name``); anything else "Hello,".

    It is written in ``language`` when given (a stranger's HELP, in the language they
    wrote in); else in the language of the ``player`` it goes to, or of the game
    (:func:`mail_language`).
    """
    address = config.settings.mail.address
    language = mail_language(config, game, to, template, context.get("player"), language)
    if "hello" not in context:  # (setdefault would look it up even when it is given)
        context["hello"] = _hello(session, game, to, context.get("player"))
    if rules:
        clash = sorted(set(rules) & {"game", *context})
        if clash:
            raise RulesetError(
                f"ruleset {game.ruleset if game else '?'!r}: template "
                f"{agree(len(clash), 'value')} {', '.join(clash)} "
                f"{agree(len(clash), 'clashes', 'clash')} with the server's own for {template}: "
                "rename them in the ruleset's views"
            )
        context = {**context, **rules}
    subject, body = render(template, language=language, game=game, **context)
    message_id = new_message_id(address.rpartition("@")[2])
    raw = compose(
        sender=address,
        sender_name=SENDER_NAME,
        to=to,
        subject=subject,
        body=body,
        now=now,
        message_id=message_id,
        game_name=game.name if game else None,
        auto_submitted=auto_submitted,
        broadcast=broadcast and game is not None,
        in_reply_to=in_reply_to,
        references=references,
        attachments=attachments,
        language=language,
    )
    dkim_settings = config.settings.mail.dkim
    if dkim_settings is not None:  # signed once, at enqueue: a resend is the same bytes
        raw = dkim_sign(
            raw,
            selector=dkim_settings.selector,
            domain=dkim_settings.domain or address.rpartition("@")[2],
            private_key=config.dkim_key() or b"",
        )
    return {
        "game_id": game.id if game else None,
        "kind": kind,
        "recipient": to,
        "message_id": message_id,
        "message": raw,
        "status": OutboxStatus.PENDING,
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
        "secret": secret,
        # what its recipient's replies are compared with, kept with it: worked out from
        # the stored bytes instead, each of a long game's players' forty latest thrashed
        # any memory kept for them (issue 23)
        "fingerprint": fingerprint(body),
    }


def mail_language(
    config: Config,
    game: Game | None,
    to: str,
    template: str,
    player: object = None,
    asked: str | None = None,
) -> str:
    """The language a mail from ``template`` to ``to`` is written in: English to the
    referee (``referee/`` templates); ``asked`` when given; to a player at their address,
    the one they chose by mail (LANGUAGE, JOIN), else their config entry's; else the
    game's (its config table's ``language``)."""
    if template.startswith("referee/"):
        return DEFAULT_LANGUAGE
    if asked in LANGUAGES:
        return asked
    table = config.find(game.name) if game is not None else None
    if isinstance(player, Player) and player.email.lower() == to.lower():
        if player.language in LANGUAGES:
            return player.language
        entry = table.player_languages.get(player.name.lower()) if table is not None else None
        if entry is not None:
            return entry
    return table.settings.language if table is not None else DEFAULT_LANGUAGE


RECENT = "snl_pbem.outbox.recent"
"""txcache: the recent mail of a batch's senders, by address and kind (a reply's rate limit,
``snl_pbem.app.replies._recent``), read once in a transaction and added to by the replies it
writes; any other mail written to the outbox forgets it (``written``)."""


def written(session: Session) -> None:
    """Mail was written to the outbox other than as a reply: counts kept are read anew."""
    txcache.put(session, RECENT, None)


class MailBatch:
    """Outbox rows enqueued together (a round's reports), inserted with one statement: the
    ORM's per-row flush (one INSERT each on SQLite) was a third of a close's SQL."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, session: Session, config: Config, **kwargs: Any) -> None:
        """``enqueue_mail`` into this batch (``mail_row``'s arguments)."""
        self.rows.append(mail_row(session, config, **kwargs))

    def insert(self, session: Session) -> None:
        """Insert the rows, in their order, after whatever the session holds pending (the
        outbox's ids keep the order the mail was written in)."""
        if not self.rows:
            return
        session.flush()
        deferred.write(session)  # (driver SQL on PostgreSQL: ``deferred`` is not told of it)
        insert_all(session.connection(), cast(Table, OutboxMessage.__table__), self.rows)
        written(session)
        self.rows = []


def _stored(
    make: Callable[Concatenate[Session, Config, P], dict[str, Any]],
) -> Callable[Concatenate[Session, Config, P], OutboxMessage]:
    def enqueue(
        session: Session, config: Config, /, *args: P.args, **kwargs: P.kwargs
    ) -> OutboxMessage:
        """Render a template (``mail_row``) and store the message for sending; returns the
        outbox row."""
        row = OutboxMessage(**make(session, config, *args, **kwargs))
        session.add(row)
        written(session)
        return row

    return enqueue


enqueue_mail = _stored(mail_row)
"""Render a template (``mail_row``, with its arguments) and store the message for sending;
returns the outbox row."""


def _hello(session: Session, game: Game | None, to: str, player: object) -> str:
    """The greeting line of a mail to ``to``: "Hello <name>," for a seat's holder by the
    name they go by, "Hello," when the mail is not to a holder or they gave no name."""
    if game is None or not isinstance(player, Player) or player.email.lower() != to.lower():
        return greeting(None)
    return greeting(holder_name(session, game, player))


def greetings(session: Session, game: Game, players: Sequence[Player]) -> dict[int, str]:
    """The greeting line of a mail to each of ``players`` at their own address, by id, in
    two queries: a round's reports pass theirs as ``hello`` (one look-up per mail made a
    close cost grow with the square of the players)."""
    return {pid: greeting(name) for pid, name in holder_names(session, game, players).items()}


# -- sending ------------------------------------------------------------------------------

SCRUBBED = (
    b"\r\n[The body of this message held an order key and was removed once the "
    b"message had been sent.]\r\n"
)
CLAIM = timedelta(minutes=10)
BATCH = 200
"""Messages a sender claims at once (and records in one transaction after sending them)."""
FIRST_RETRY = timedelta(minutes=1)
LONGEST_RETRY = timedelta(hours=6)
ORDER_WAIT = timedelta(minutes=30)
"""How long a recipient's later mail waits for an earlier message that keeps failing.
Mail to one recipient goes in the order it was written (a welcome before the report
that follows it), so a message that failed for the time being holds back the later ones
while its retries come often; once its backoff is longer than this (after about half an
hour of failures), they go without it, however near its next retry: a message the
recipient's server keeps refusing must not hold up their reports for days."""


def _held_attempts() -> int:
    """The most failures after which a message still holds later ones back: its backoff
    (``FIRST_RETRY`` doubled each time) is then at most ``ORDER_WAIT``."""
    attempts = 1
    while FIRST_RETRY * 2**attempts <= ORDER_WAIT:
        attempts += 1
    return attempts


HELD_ATTEMPTS = _held_attempts()


@dataclass
class DrainReport:
    sent: int = 0
    deferred: int = 0
    failed: int = 0
    unreachable: str | None = None
    """Why the SMTP server could not be used (the drain stopped early), or None."""

    @property
    def handled(self) -> int:
        return self.sent + self.deferred + self.failed


@dataclass(frozen=True)
class Claimed:
    id: int
    recipient: str
    message: bytes
    secret: bool = False
    """It holds an order key: once sent, the database forgets its body (``_record``)."""


CLAIMED_COLUMNS = (
    OutboxMessage.id,
    OutboxMessage.recipient,
    OutboxMessage.message,
    OutboxMessage.secret,
)
"""What a claim reads of each message (a :class:`Claimed`)."""


@cache
def _statement(name: str, sqlite: bool) -> Executable:
    """The sender's statements run for every batch, built once: building them anew (their
    clauses coerced, their cache key made) cost a third of the CPU of the thread that
    records a PostgreSQL sender's parts."""
    ids = among_param(OutboxMessage.id, "ids", sqlite=sqlite)
    mine = OutboxMessage.claimed_by == bindparam("worker")
    stamp = OutboxMessage.__table__.c.sent_at.type
    if name == "claim":
        statement = (
            update(OutboxMessage)
            .where(ids)
            .values(claimed_by=bindparam("worker"), claim_until=bindparam("until", type_=stamp))
        )
    elif name == "sent":
        statement = (
            update(OutboxMessage)
            .where(ids, mine)
            .values(
                status=OutboxStatus.SENT,
                sent_at=bindparam("now", type_=stamp),
                last_error=None,
                claimed_by=None,
                claim_until=None,
                attempts=OutboxMessage.attempts + 1,
            )
        )
    else:
        raise KeyError(name)
    return statement.execution_options(synchronize_session=False)


def sent_count(db: Database, kind: str) -> int:
    """How many mails of ``kind`` have been handed to the mail server (the demo waits for
    each player's game-over mail: its subject is in the player's language)."""
    with db.transaction() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(OutboxMessage)
                .where(OutboxMessage.kind == kind, OutboxMessage.status == OutboxStatus.SENT)
            )
            or 0
        )


def claim_due(db: Database, now: datetime, worker: str, limit: int) -> list[Claimed]:
    """Claim due messages: the oldest waiting for each recipient, then, with room left,
    the run of mail that follows it to the same recipient (``_runs``).

    A recipient's mail is taken only from its oldest waiting message on (one that has
    failed for longer than ``ORDER_WAIT`` aside, unless it is due now), and only by one
    sender at a time: the next message to a recipient is claimed only once everything
    before it is claimed in the same claim or marked sent. So mail reaches every player in
    the order it was written (a sender stops a recipient's run at its first failure, and
    hands the rest back), and no two senders (threads or processes) work on the same
    recipient at once. PostgreSQL skips rows another process has locked; a claim expires if
    its sender dies (and a live sender stops using its claims well before they do).
    """
    with sending_turn(db), db.transaction() as session:
        return _claim(session, db.is_sqlite, now, worker, limit, free_dead=True)


SEEN_SKIPPED = 2000
"""A claim's next window leaves out the recipients of the windows before it, up to this many:
each of them had its oldest waiting message taken, or held back by an older one, so nothing
later of theirs can go in this claim. A backlog to one address (the referee's summary of
each of thousands of games) was read window after window, for one message a claim."""


def _claim(
    session: Session, sqlite: bool, now: datetime, worker: str, limit: int, *, free_dead: bool
) -> list[Claimed]:
    """:func:`claim_due` in ``session``; ``free_dead`` first frees the claims of killed
    senders on this host (once per drain is enough: a claim also lapses by itself).

    Window by window in id order: the next waiting messages, then the oldest message that
    holds each of their recipients back, then a lock on those that nothing older holds.
    As one query (NOT EXISTS an older one, LIMIT, SKIP LOCKED) PostgreSQL planned it from
    statistics that said nothing was pending, taken before a storm of reports, and scanned
    every pending row for each one (488 s at 105,000 mails); each step here is at worst
    one scan of the pending rows, whatever the statistics.
    """
    if free_dead:
        holders = session.scalars(
            select(OutboxMessage.claimed_by)
            .distinct()
            .where(OutboxMessage.status == OutboxStatus.PENDING, OutboxMessage.claim_until >= now)
        ).all()
        gone = [h for h in holders if h and h != worker and dead_here(h.split("/")[0])]
        if gone:  # claims of a killed sender on this host: free them at once
            session.execute(
                update(OutboxMessage)
                .where(OutboxMessage.claimed_by.in_(gone))
                .values(claimed_by=None, claim_until=None)
                .execution_options(synchronize_session=False)
            )
    waiting = (
        OutboxMessage.status == OutboxStatus.PENDING,
        OutboxMessage.next_attempt_at <= now,
        or_(OutboxMessage.claim_until.is_(None), OutboxMessage.claim_until < now),
    )
    claimed: list[Claimed] = []
    after = 0
    seen: set[str] = set()  # recipients a window had: none of their later mail can go now
    while len(claimed) < limit:
        later = select(OutboxMessage.id, OutboxMessage.recipient).where(
            OutboxMessage.id > after, *waiting
        )
        if seen and len(seen) <= SEEN_SKIPPED:  # (past it: looked at again, never wrong)
            later = later.where(
                among(OutboxMessage.recipient, sorted(seen), sqlite=sqlite, negate=True)
            )
        window = session.execute(later.order_by(OutboxMessage.id).limit(max(2 * limit, 50))).all()
        if not window:
            break
        after = window[-1][0]
        # the oldest pending message to each recipient that still holds the later ones:
        # by its failures, not by how near its next retry is (one retried every 6 hours
        # would hold the later mail in the half hour before each retry); due now, it goes
        # first (after an outage, which counts a try per drain)
        first: dict[str, int] = {
            recipient: row_id
            for recipient, row_id in session.execute(
                select(OutboxMessage.recipient, func.min(OutboxMessage.id))
                .where(
                    among(
                        OutboxMessage.recipient,
                        sorted({recipient for _, recipient in window}),
                        sqlite=sqlite,
                    ),
                    OutboxMessage.status == OutboxStatus.PENDING,
                    OutboxMessage.id <= after,
                    or_(
                        OutboxMessage.attempts <= HELD_ATTEMPTS,
                        OutboxMessage.next_attempt_at <= now,
                    ),
                )
                .group_by(OutboxMessage.recipient)
            )
        }
        chosen = [row_id for row_id, recipient in window if first.get(recipient, row_id) >= row_id]
        if len(chosen) > limit - len(claimed):  # the rest are looked at again, in order
            chosen = chosen[: limit - len(claimed)]
            after = chosen[-1]
        seen.update(recipient for row_id, recipient in window if row_id <= after)
        if not chosen:
            continue
        # another sender's are skipped, as are the later ones to their recipients
        claimed += _lock(session, sqlite, chosen, waiting)
    if claimed and len(claimed) < limit:
        claimed = sorted(
            claimed + _runs(session, sqlite, now, claimed, limit - len(claimed), waiting),
            key=lambda item: item.id,
        )
    if claimed:
        session.execute(
            _statement("claim", sqlite),
            {"ids": [item.id for item in claimed], "worker": worker, "until": now + CLAIM},
        )
    return claimed


def _runs(
    session: Session,
    sqlite: bool,
    now: datetime,
    firsts: list[Claimed],
    room: int,
    waiting: tuple[Any, ...],
) -> list[Claimed]:
    """With ``room`` left in a claim, the mail that follows each recipient's claimed oldest
    message, in id order: a run of it, sent in order on one connection, each message only
    if everything older to its recipient that holds mail back is claimed before it. A run
    ends at the first such message that is not waiting (backed off, or another sender's).

    A storm's tail is mail to one address (the referee's summary of each game): one
    message a claim, each a round trip of statements, sent it at 6 to 30 a second.
    """
    open_runs = {item.recipient: item.id for item in firsts}
    holds = or_(OutboxMessage.attempts <= HELD_ATTEMPTS, OutboxMessage.next_attempt_at <= now)
    is_waiting = and_(*waiting)
    taken: list[tuple[int, str]] = []
    after = min(open_runs.values())
    while open_runs and len(taken) < room:
        window = session.execute(
            select(OutboxMessage.id, OutboxMessage.recipient, is_waiting)
            .where(
                among(OutboxMessage.recipient, sorted(open_runs), sqlite=sqlite),
                OutboxMessage.status == OutboxStatus.PENDING,
                OutboxMessage.id > after,
                holds,
            )
            .order_by(OutboxMessage.id)
            .limit(max(2 * room, 50))
        ).all()
        if not window:
            break
        after = window[-1][0]
        for row_id, recipient, ready in window:
            if recipient not in open_runs or row_id <= open_runs[recipient]:
                continue  # (a run that ended, or the first itself)
            if not ready:  # holds the rest of this recipient's mail back
                del open_runs[recipient]
            elif len(taken) < room:
                taken.append((row_id, recipient))
            else:
                break
    if not taken:
        return []
    locked = {item.id: item for item in _lock(session, sqlite, [i for i, _ in taken], waiting)}
    runs: list[Claimed] = []
    broken: set[str] = set()  # a run with a message missing goes no further than it
    for row_id, recipient in taken:
        if recipient in broken:
            continue
        if row_id not in locked:
            broken.add(recipient)
            continue
        runs.append(locked[row_id])
    return runs


def _lock(
    session: Session, sqlite: bool, ids: list[int], waiting: tuple[Any, ...]
) -> list[Claimed]:
    """The messages of ``ids`` still waiting, locked (PostgreSQL: another sender's are
    skipped), in id order. They are looked up by id alone, and whether each is waiting is
    read as a column: with that test in the WHERE clause, PostgreSQL, told by statistics
    taken before a storm that nothing was pending, read every pending message through the
    status index for each claim (5,000 rows to lock 200: 8 ms, a third of a sender's
    statements' time). A row locked and found not waiting is left alone, its lock let go
    at the commit."""
    lock = (
        select(*CLAIMED_COLUMNS, and_(*waiting))
        .where(among(OutboxMessage.id, ids, sqlite=sqlite))
        .order_by(OutboxMessage.id)
    )
    if not sqlite:
        lock = lock.with_for_update(skip_locked=True, of=OutboxMessage)
    return [Claimed(*row[:-1]) for row in session.execute(lock) if row[-1]]


def drain_outbox(
    db: Database,
    config: Config,
    sender: Sender,
    clock: Callable[[], datetime],
    *,
    worker: str,
    batch: int = BATCH,
    give_up_after: timedelta = timedelta(days=3),
    stop: Callable[[], bool] = lambda: False,
) -> DrainReport:
    """Send everything due, batch by batch, until nothing is left to claim now, or until
    ``stop`` says so: then the part going out is sent and recorded, and the rest handed
    back (a sender told to stop, or to make way for new mail settings, is done in one
    part, not after the whole backlog).

    A batch goes out in parts (``RECORDED_EVERY``), and each part's results are written
    after its messages went out (in one transaction, or one statement: ``_Ledger``); a
    sender killed in between sends those again later (same Message-IDs), never fewer.
    A batch whose sending outlasts half of ``CLAIM`` (a slow server) hands the rest back
    and claims again, so no message is sent on a claim that may have lapsed: another
    sender could have sent it, and the mail after it, by then.

    The database work is done beside the sending, a part at a time (a thread of its own):
    while a part goes out, the one before is recorded, and beside the batch's first part
    the next batch is claimed (``_send_parts``). The next batch never holds mail to a
    recipient of the one going out (their later mail waits behind a claimed message,
    ``claim_due``), so mail still goes in order; the SMTP connection does not wait for
    commits.
    """
    report = DrainReport()
    claimed_at = clock()
    claimed = claim_due(db, claimed_at, worker, batch)
    previous: _Sent | None = None
    ledger = _Ledger(db)
    book = partial(_book, db, config, clock, worker, batch, give_up_after, report, ledger)
    with closing(ledger), ThreadPoolExecutor(1, thread_name_prefix=f"outbox-{worker}") as books:
        while claimed:
            claimed_at, claimed, previous = _send_parts(
                books, book, sender, clock, report, claimed, claimed_at, previous, stop
            )
            release: list[int] = []
            ending = previous.down is not None or stop()
            if ending:  # the batch claimed ahead goes back untouched
                release, claimed = [item.id for item in claimed], []
            if not claimed:  # the last one's results may free more: claim once more after them
                claimed_at, claimed = book(previous, claim=not ending, release=release)
                previous = None
    return report


RECORDED_EVERY = 25
"""A claimed batch is sent in parts of this many, each part's results recorded while the
next goes out: a sender killed mid-batch sends again only the part going out and the one
being recorded. Recorded as a whole, a batch of 200 was sent again whole after a kill; at a
kill every twentieth message (the crash test's), no batch was ever recorded."""


def _send_parts(
    books: ThreadPoolExecutor,
    book: Callable[..., tuple[datetime, list[Claimed]]],
    sender: Sender,
    clock: Callable[[], datetime],
    report: DrainReport,
    claimed: list[Claimed],
    claimed_at: datetime,
    previous: _Sent | None,
    stop: Callable[[], bool],
) -> tuple[datetime, list[Claimed], _Sent]:
    """Send a claimed batch part by part; ``books`` records each part (and ``previous``,
    the batch before) while the next part goes out, and claims the next batch beside the
    first part (``book``: ``_book`` with the drain's arguments). Returns that claim and the
    last part's results (not yet recorded). A part that finds the server away hands back
    the parts after it with its own untried; once ``stop`` says so, so does each part.

    The claim goes beside the first part, not the last: beside the last, on PostgreSQL, a
    claim (about 25 ms) outlasted the part (25 messages, 16 ms), and the SMTP connection
    waited for it every batch. Either way the next batch holds no later mail to a recipient of
    this one: this one is claimed when it is made (``claim_due``). But a batch that took a
    quarter of the claim's time (a slow mail server) would leave the next one, claimed that
    long before its turn, past half its claim before it was sent: it would be handed back
    whole, batch after batch, while newer mail went. Then the next batch is claimed again
    beside the last part, fresh, as the oldest waiting mail (the claim ahead handed back in
    the same transaction)."""
    parts = [claimed[i : i + RECORDED_EVERY] for i in range(0, len(claimed), RECORDED_EVERY)]
    stopped: set[str] = set()  # recipients whose mail failed: their later mail waits
    claimed_next: tuple[datetime, list[Claimed]] = (claimed_at, [])
    sent: _Sent | None = None
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        again = index > 0 and last and clock() - claimed_next[0] >= CLAIM / 4
        claiming = index == 0 or again
        stale = [item.id for item in claimed_next[1]] if again else []
        ahead = books.submit(book, previous, claim=claiming, release=stale)
        if again:
            claimed_next = (claimed_next[0], [])  # (handed back by that book)
        later = [item.id for rest in parts[index + 1 :] for item in rest]
        try:
            sent = _send_batch(sender, clock, part, claimed_at, report, stopped)
        except BaseException:  # not the mail's fault: hand back what was claimed and not tried
            _, ahead_claimed = ahead.result()  # (the next batch: claimed now, or before)
            unsent = [item.id for item in ahead_claimed + claimed_next[1]] + later
            book(None, claim=False, release=unsent)
            raise
        booked = ahead.result()
        if claiming:
            claimed_next = booked
        previous = sent
        if sent.down is not None or stop():
            sent.untried += later
            break
    assert sent is not None  # (a claim is never empty here)
    return claimed_next[0], claimed_next[1], sent


@dataclass
class _Sent:
    """What became of a batch: each message tried and its error, the ids not tried, and
    the error that showed the server unreachable (the drain stops)."""

    results: list[tuple[Claimed, SendError | None]]
    untried: list[int]
    down: SendError | None


def _send_batch(
    sender: Sender,
    clock: Callable[[], datetime],
    claimed: list[Claimed],
    claimed_at: datetime,
    report: DrainReport,
    stopped: set[str],
) -> _Sent:
    """Send ``claimed`` (a part of a claim) in order. A recipient whose message failed is
    added to ``stopped``: their later mail in the claim is not tried, but handed back, and
    waits behind the failed one.

    Nothing is sent once half the claim has passed, not even a batch's first message: a
    batch claimed ahead (while the one before went out) may be that old when its turn
    comes, and a message sent then could outlive its claim, be claimed again and go twice.
    It is handed back whole, and the claim made beside it, or after it, is fresh: a drain
    always moves on."""
    results: list[tuple[Claimed, SendError | None]] = []
    untried: list[int] = []
    down: SendError | None = None
    for index, item in enumerate(claimed):
        if clock() >= claimed_at + CLAIM / 2:
            untried += [later.id for later in claimed[index:]]
            break
        if item.recipient in stopped:
            untried.append(item.id)
            continue
        try:
            sender.send(item.recipient, item.message)
            results.append((item, None))
            crash_point("send.sent-not-recorded")
        except SendError as exc:
            results.append((item, exc))
            stopped.add(item.recipient)
            if exc.unreachable:
                report.unreachable, down = str(exc), exc
                untried += [later.id for later in claimed[index + 1 :]]
                break
    return _Sent(results, untried, down)


def _book(
    db: Database,
    config: Config,
    clock: Callable[[], datetime],
    worker: str,
    batch: int,
    give_up_after: timedelta,
    report: DrainReport,
    ledger: _Ledger,
    sent: _Sent | None,
    *,
    claim: bool = True,
    release: Sequence[int] = (),
) -> tuple[datetime, list[Claimed]]:
    """Record a sent part's results (if any), hand back the claims of ``release`` (claimed
    ahead, never tried), then claim the next batch (with ``claim``): in one transaction,
    or, for a part that needs one statement and nothing else, with ``ledger``'s."""
    if sent and not (claim or release) and ledger.record(sent, worker, clock(), report):
        return clock(), []
    ledger.close()  # (back to the pool first: a drain holds one database connection at a time)
    with sending_turn(db), db.transaction() as session:
        if release:
            session.execute(
                update(OutboxMessage)
                .where(
                    among(OutboxMessage.id, release, sqlite=db.is_sqlite),
                    OutboxMessage.claimed_by == worker,
                )
                .values(claimed_by=None, claim_until=None)
                .execution_options(synchronize_session=False)
            )
        if sent is not None:
            _record(
                session,
                config,
                sent.results,
                clock(),
                worker,
                give_up_after,
                report,
                sent.untried,
                sent.down,
            )
        claimed_at = clock()
        if not claim:
            return claimed_at, []
        return claimed_at, _claim(session, db.is_sqlite, claimed_at, worker, batch, free_dead=False)


class _Ledger:
    """PostgreSQL: a part all sent and holding no key (every part of a storm's batch but its
    last) is recorded with one statement, in autocommit on a connection the drain holds:
    the statement is atomic by itself. In a transaction from the pool it was four round
    trips (the pool's ping, BEGIN, the UPDATE, COMMIT) and 0.7 ms of CPU in the sender's
    process, where the SMTP connection waits for the interpreter; now one, and 0.2 ms.
    Anything more (a failure, a key to scrub, a claim) goes in a transaction, as before."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.connection: Connection | None = None

    def record(self, sent: _Sent, worker: str, now: datetime, report: DrainReport) -> bool:
        """Mark ``sent`` sent if it is such a part; False if it is not, or if the held
        connection was lost (the server restarted): the caller records it in a
        transaction, on a fresh connection (a statement that did reach the server first
        finds nothing claimed by this sender left to mark)."""
        if self.db.is_sqlite or sent.untried or sent.down is not None or not sent.results:
            return False
        if any(error is not None or item.secret for item, error in sent.results):
            return False
        ids = [item.id for item, _ in sent.results]
        try:
            if self.connection is None:
                self.connection = self.db.engine.connect().execution_options(
                    isolation_level="AUTOCOMMIT"
                )
            self.connection.execute(
                _statement("sent", False), {"ids": ids, "worker": worker, "now": now}
            )
        except DBAPIError as exc:
            self.close()
            if exc.connection_invalidated:
                return False
            raise
        report.sent += len(ids)
        return True

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.close()


def _record(
    session: Session,
    config: Config,
    results: list[tuple[Claimed, SendError | None]],
    now: datetime,
    worker: str,
    give_up_after: timedelta,
    report: DrainReport,
    untried: list[int] | None = None,
    down: SendError | None = None,
) -> None:
    """Write a batch's results; ``untried`` are handed back as they were (the server was
    ``down``, not their fault, or the batch ran out of claim time)."""
    sent = [item.id for item, error in results if error is None]
    sqlite = session.get_bind().dialect.name == "sqlite"
    if untried:
        expired: set[int] = set()
        if down is not None:  # waited too long: they fail with the server, not one per try
            expired = set(
                session.scalars(
                    select(OutboxMessage.id).where(
                        OutboxMessage.id.in_(untried),
                        OutboxMessage.created_at <= now - give_up_after,
                    )
                )
            )
            results = results + [(Claimed(i, "", b""), down) for i in sorted(expired)]
        session.execute(
            update(OutboxMessage)
            .where(
                among(OutboxMessage.id, [i for i in untried if i not in expired], sqlite=sqlite),
                OutboxMessage.claimed_by == worker,
            )
            .values(claimed_by=None, claim_until=None)
            .execution_options(synchronize_session=False)
        )
    if sent:  # marked sent only after the server's 250
        session.execute(_statement("sent", sqlite), {"ids": sent, "worker": worker, "now": now})
        report.sent += len(sent)
        keys = [item.id for item, error in results if error is None and item.secret]
        secret = (
            session.scalars(
                select(OutboxMessage).where(
                    among(OutboxMessage.id, keys, sqlite=sqlite), OutboxMessage.secret
                )
            ).all()
            if keys
            else ()
        )
        for scrub in secret:  # the player has the key now: the database forgets it
            # (keeping a fingerprint of what it said, which holds no key: a copy of it
            # pasted in a reply is still known as ours, never orders)
            scrub.message = scrubbed(scrub.message, SCRUBBED)
    lost: dict[int | None, list[dict[str, Any]]] = {}  # failed for good, by game
    for item, error in results:
        if error is None:
            continue
        row = session.get(OutboxMessage, item.id)
        if row is None or row.claimed_by != worker:
            continue
        row.attempts += 1
        row.claimed_by = row.claim_until = None
        row.last_error = str(error)[:2000]
        if error.permanent or now - row.created_at >= give_up_after:
            row.status = OutboxStatus.FAILED
            report.failed += 1
            log.error("mail %s to %s failed for good: %s", row.message_id, row.recipient, error)
            if row.kind != MailKind.DELIVERY_FAILURE:
                lost.setdefault(row.game_id, []).append(
                    {
                        "recipient": row.recipient,
                        "what": row.kind,
                        "error": str(error),
                        "attempts": row.attempts,
                        "message_id": row.message_id,
                    }
                )
            continue
        if error.unreachable:  # due again as soon as the server is back
            report.deferred += 1
            continue
        delay = min(FIRST_RETRY * 2 ** (row.attempts - 1), LONGEST_RETRY)
        row.next_attempt_at = now + delay
        report.deferred += 1
        log.warning("mail %s to %s deferred %s: %s", row.message_id, row.recipient, delay, error)
    for game_id, failures in lost.items():  # one alert per game and batch, not per message
        enqueue_mail(
            session,
            config,
            game=session.get(Game, game_id) if game_id else None,
            kind=MailKind.DELIVERY_FAILURE,
            to=config.settings.mail.referee,
            now=now,
            template="referee/delivery_failure.txt.j2",
            failures=failures,
        )


def drain_parallel(
    db: Database,
    config: Config,
    make_sender: Callable[[], Sender],
    clock: Callable[[], datetime],
    *,
    connections: int,
    worker: str,
    batch: int = BATCH,
    give_up_after: timedelta = timedelta(days=3),
    stop: Callable[[], bool] = lambda: False,
) -> DrainReport:
    """``drain_outbox`` over several SMTP connections at once, one thread each."""
    if connections <= 1:
        sender = make_sender()
        try:
            return drain_outbox(
                db,
                config,
                sender,
                clock,
                worker=worker,
                batch=batch,
                give_up_after=give_up_after,
                stop=stop,
            )
        finally:
            sender.close()
    reports: list[DrainReport] = []

    def run(index: int) -> None:
        sender = make_sender()
        try:
            reports.append(
                drain_outbox(
                    db,
                    config,
                    sender,
                    clock,
                    worker=f"{worker}/{index}",
                    batch=batch,
                    give_up_after=give_up_after,
                    stop=stop,
                )
            )
        finally:
            sender.close()

    threads = [
        threading.Thread(target=run, args=(i,), name=f"smtp-{i}") for i in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = DrainReport()
    for report in reports:
        total.sent += report.sent
        total.deferred += report.deferred
        total.failed += report.failed
        total.unreachable = total.unreachable or report.unreachable
    return total
