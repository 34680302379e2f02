"""What to do when a round's close job runs: close it, hold it, wait, or re-plan.

``decide`` reads every fact it needs (the game, the round, its players' orders for an
early close, the mailbox's health) in one transaction and returns a typed decision; the
scheduler (``snl_pbem.runners.scheduler``) only acts on it: it closes the round, holds it,
plans a job, or re-plans from the rounds table. The times that are the scheduler's own
(the start-up redelivery grace, which ends on the LMTP receiver's word) come in as
arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import and_, bindparam, select
from sqlalchemy.orm import Session

from snl_pbem.app.close_claim import claim_closing
from snl_pbem.app.schedule import all_in_locked, waiting_by
from snl_pbem.config import Config, ImapSettings
from snl_pbem.mail.imap import mailbox_source
from snl_pbem.store import Database, Game, MailboxState, Round
from snl_pbem.store.states import GamePhase, RoundPhase
from snl_pbem.timeutil import format_duration


@dataclass(frozen=True)
class Close:
    """Close the round now (the stored messages received before its deadline read first)."""

    deadline: datetime
    """The round's deadline (a backup written since holds the game as it stood then)."""
    waiting: tuple[int, ...] = field(default=(), compare=False)
    """Stored messages received by the deadline and not yet processed (read in the same
    transaction as the rest: one fewer per close)."""


class HoldWhy(StrEnum):
    INTAKE_UNHEALTHY = "intake unhealthy"
    """The circuit breaker: the round is held (the referee told) until intake has been
    healthy again for ``healthy_within``, or the referee closes it."""
    MAILBOX_BEHIND = "mailbox behind"
    """No poll begun after the deadline has read the mailbox to its end yet: ask for a
    poll and look again in a moment (mail that came before the deadline counts)."""


@dataclass(frozen=True)
class Hold:
    """Do not close yet, for a reason that is not a time."""

    why: HoldWhy
    problem: str
    """What is wrong, in words (for the log and the referee's mail)."""


@dataclass(frozen=True)
class Wait:
    """An early close (close-when-all-in) during the start-up redelivery grace: an order may
    still be in the MTA's queue, so it is tried again ``until`` then (or once the MTA has
    delivered its queue)."""

    until: datetime


class ReplanWhy(StrEnum):
    NOT_RUNNING = "the game is not running"
    """Paused, finished or unknown: the referee may still close-round it."""
    NOT_OPEN = "the round is not open, or is held"
    """Closed meanwhile (close-round, another server), or held (check_held releases it)."""
    NOT_ALL_IN = "not every player's orders are in"
    """An early close whose round is no longer all in: the deadline's job closes it."""
    NOT_DUE = "not due yet"
    """The deadline moved later (``extend``), or the start-up redelivery grace runs."""


@dataclass(frozen=True)
class Replan:
    """Do not close: the rounds table says what is planned. ``close_at`` is when this
    round's close is now due (NOT_DUE), None when this job has nothing to plan."""

    why: ReplanWhy
    close_at: datetime | None = None


@dataclass(frozen=True)
class Busy:
    """Another process holds the game's close claim (several servers on one PostgreSQL:
    another server closing the round or deciding whether to, or the referee's
    close-round): look again shortly, in case it dies before it commits or does not close.
    Found by taking the claim first thing in ``decide``'s transaction (``claim``), so such
    a game costs one transaction, not this one and then a close's that finds it taken."""


Decision = Close | Hold | Wait | Replan | Busy


def decide(
    db: Database,
    config: Config,
    game_name: str,
    round_number: int,
    now: datetime,
    *,
    early: bool = False,
    all_in: bool = False,
    redelivery_until: datetime | None = None,
    claim: bool = False,
) -> Decision:
    """What the close job of round ``round_number`` does at ``now``. ``early`` is
    close-when-all-in's job, which closes before the deadline on purpose (its settle time
    has passed). ``all_in``: close only if every order is still in (the settle time's job;
    a job re-planned past the start-up grace closes as planned). ``redelivery_until`` is
    the end of the start-up grace with LMTP (None: none, or it is over), before which no
    round closes. ``claim`` (the scheduler's jobs; PostgreSQL only): Busy if another
    server holds the game's close claim (``claim_closing``) at this moment."""
    with db.transaction() as session:
        if claim and not db.is_sqlite and not claim_closing(session, game_name, wait=False):
            return Busy()
        return _decide_locked(
            session, config, game_name, round_number, now, early, all_in, redelivery_until
        )


def _decide_locked(
    session: Session,
    config: Config,
    game_name: str,
    number: int,
    now: datetime,
    early: bool,
    all_in: bool,
    redelivery_until: datetime | None,
) -> Decision:
    facts = session.execute(_FACTS, {"name": game_name, "number": number}).first()
    if facts is None or facts.game_state != GamePhase.RUNNING:
        return Replan(ReplanWhy.NOT_RUNNING)
    round_id, state, held_at, deadline = facts.round_id, facts.state, facts.held_at, facts.deadline
    if early:
        if round_id is None or state != RoundPhase.OPEN:
            return Replan(ReplanWhy.NOT_ALL_IN)
        if all_in:
            game, round_ = session.get_one(Game, facts.game_id), session.get_one(Round, round_id)
            if not all_in_locked(session, game, round_):
                return Replan(ReplanWhy.NOT_ALL_IN)
        if redelivery_until is not None and now < redelivery_until:
            return Wait(redelivery_until)
    else:
        if round_id is None or state != RoundPhase.OPEN or held_at is not None:
            return Replan(ReplanWhy.NOT_OPEN)
        due = not_before(deadline + intake_grace(config), redelivery_until)
        if now < due:
            return Replan(ReplanWhy.NOT_DUE, due)
    imap = config.settings.mail.imap
    if imap is None:
        return _close(session, deadline)
    mailbox = session.get(MailboxState, imap_source(imap))
    last_ok, since = (mailbox.last_ok_at, mailbox.healthy_since) if mailbox else (None, None)
    problem = intake_problem(imap, last_ok, since, now)
    if problem is not None:
        return Hold(HoldWhy.INTAKE_UNHEALTHY, problem)
    assert last_ok is not None
    if not early and last_ok < deadline:
        return Hold(HoldWhy.MAILBOX_BEHIND, "the mailbox is not yet read up to the deadline")
    return _close(session, deadline)


_FACTS = (  # one read, built once: the game's state and its round ``number``'s
    select(
        Game.id.label("game_id"),
        Game.state.label("game_state"),
        Round.id.label("round_id"),
        Round.state,
        Round.held_at,
        Round.deadline,
    )
    .outerjoin(Round, and_(Round.game_id == Game.id, Round.number == bindparam("number")))
    .where(Game.name == bindparam("name"))
)


def _close(session: Session, deadline: datetime) -> Close:
    """Close, with the stored messages to read first (``waiting_before_deadline``)."""
    return Close(deadline, waiting=waiting_by(session, deadline))


def intake_grace(config: Config) -> timedelta:
    """How long after a deadline its close is first tried. With IMAP, the close then waits
    until a poll begun after the deadline has read the mailbox to its end (MAILBOX_BEHIND);
    LMTP delivery is synchronous: no wait."""
    return timedelta(0) if config.settings.mail.imap is None else timedelta(seconds=1)


def not_before(at: datetime, redelivery_until: datetime | None) -> datetime:
    """``at``, or the end of the start-up redelivery grace if that is later."""
    return at if redelivery_until is None else max(at, redelivery_until)


def imap_source(imap: ImapSettings) -> str:
    """The configured mailbox's name in the database (as its poller names it)."""
    return mailbox_source(imap.username, imap.host, imap.port, imap.folder)


def intake_problem(
    imap: ImapSettings, last_ok: datetime | None, since: datetime | None, now: datetime
) -> str | None:
    """Why intake cannot be trusted at ``now`` (the circuit breaker), or None: the last good
    poll (``last_ok``) is older than ``healthy_within``, or the latest poll failed
    (``since``, healthy since, is None)."""
    if last_ok is None or now - last_ok > imap.healthy_within:
        when = "never" if last_ok is None else f"{format_duration(now - last_ok)} ago"
        return f"the mailbox was last read successfully {when}"
    if since is None:  # the latest read failed (a message could not be stored, ...)
        return (
            "the last read of the mailbox failed (it was last read successfully "
            f"{format_duration(now - last_ok)} ago)"
        )
    return None
