"""Telling the players that a round is open again, and what now counts: after the
referee's rollback, after a restore from a backup, and when a rolled-back round closes
again.

A rollback withdraws a round's results and a restore takes the whole server back to its
backup: either way the players hold a report, a deadline or answers that no longer count.
Each active player is told, in one notice, which round is open, its deadline (in the
game's time zone), and what became of their own orders (never another's: R19). Observers,
who get the public reports, get the same notice without orders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import audit, game_by_name, game_time, open_round, ruleset_of
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.state import holder_names, observers_languages
from snl_pbem.config import Config
from snl_pbem.store import (
    AuditEntry,
    Database,
    Game,
    InboundMessage,
    OrderRecord,
    OutboxMessage,
    Player,
    Round,
)
from snl_pbem.store.states import GamePhase, MailKind, OutboxStatus

ROLLBACK_TEMPLATE = "player/reopened.txt.j2"
AGAIN_TEMPLATE = "player/closed_again.txt.j2"
RESTORED_TEMPLATE = "player/restored.txt.j2"
RESTORED = "restored"
"""The audit action of :func:`notify_restored`."""


def _players(session: Session, game: Game) -> list[Player]:
    """The players who get the game's mail: in the game, not resigned."""
    return list(
        session.scalars(
            select(Player).where(Player.game_id == game.id, Player.active).order_by(Player.id)
        )
    )


def counting_records(session: Session, round_: Round) -> dict[int, OrderRecord]:
    """Each player's order set that counts if the round closed now (by player id): the
    latest received by the deadline, or entered by the referee."""
    latest: dict[int, OrderRecord] = {}
    for record in session.scalars(
        select(OrderRecord)
        .where(
            OrderRecord.round_id == round_.id,
            or_(OrderRecord.received_at <= round_.deadline, OrderRecord.source == "referee"),
        )
        .order_by(OrderRecord.received_at, OrderRecord.id)
    ):
        latest[record.player_id] = record
    return latest


def _tell(
    session: Session,
    config: Config,
    game: Game,
    now: datetime,
    template: str,
    *,
    orders: dict[int, OrderRecord] | None = None,
    dropped: dict[int, int] | None = None,
    own: Callable[[str, Player | None], dict[str, Any]] | None = None,
    **context: Any,
) -> int:
    """The notice to every active player, with their own orders for the round (``orders``,
    by player id) and how many of their order sets for the next round were dropped
    (``dropped``); and to every observer, without either; ``own`` adds what is one
    recipient's alone (by address and player). How many were queued."""
    ruleset = ruleset_of(game).name
    players = _players(session, game)
    names = holder_names(session, game, players)  # a seat given away: its holder's own name
    for player in players:
        enqueue_mail(
            session,
            config,
            game=game,
            kind=MailKind.DEADLINE,
            to=player.email,
            now=now,
            template=template,
            broadcast=True,
            player=player,
            name=names[player.id],
            ruleset=ruleset,
            orders=(orders or {}).get(player.id),
            dropped=(dropped or {}).get(player.id, 0),
            **context,
            **(own(player.email, player) if own else {}),
        )
    watchers = observers_languages(session, game)
    for address, language in watchers:
        enqueue_mail(
            session,
            config,
            game=game,
            kind=MailKind.DEADLINE,
            to=address,
            now=now,
            language=language,
            template=template,
            broadcast=True,
            player=None,
            name=None,
            ruleset=ruleset,
            orders=None,
            dropped=0,
            **context,
            **(own(address, None) if own else {}),
        )
    return len(players) + len(watchers)


# -- a rollback, and the round closing again ----------------------------------------------


def tell_rolled_back(
    session: Session,
    config: Config,
    game: Game,
    round_: Round,
    now: datetime,
    *,
    was_over: bool,
    dropped: dict[int, int],
) -> int:
    """After a rollback (``game`` paused, ``round_`` open again): each player is told that
    its report no longer counts, its deadline, that their own orders for it are kept
    (restated), and, when ``rollback --force`` dropped the next round's, that theirs for it
    (``dropped``: order sets by player id) must be sent again."""
    return _tell(
        session,
        config,
        game,
        now,
        ROLLBACK_TEMPLATE,
        orders=counting_records(session, round_),
        dropped=dropped,
        round=round_.number,
        deadline=game_time(game, round_.deadline),
        passed=round_.deadline <= now,
        was_over=was_over,
    )


def rolled_back(session: Session, game: Game, number: int, now: datetime) -> str:
    """What a rollback of round ``number`` did, for the referee's reply."""
    round_ = open_round(session, game)
    text = (
        f"round {number} reopened (results discarded, its orders kept); the game is paused; "
        "the players are told"
    )
    if round_ is None:
        return text
    deadline = game_time(game, round_.deadline)
    if round_.deadline <= now:
        return text + f"; its deadline {deadline} has passed: it closes again at once on RESUME"
    return text + f"; its deadline {deadline} is stopped until RESUME"


def rolled_back_before(session: Session, game: Game, number: int) -> bool:
    """Whether round ``number`` was closed before and rolled back (its players then hold
    a report of it that no longer counts)."""
    details = session.scalars(
        select(AuditEntry.detail).where(
            AuditEntry.game_id == game.id, AuditEntry.action == "rollback"
        )
    )
    return any(isinstance(d, dict) and d.get("round") == number for d in details)


def tell_closed_again(
    session: Session, config: Config, game: Game, round_: Round, now: datetime, *, over: bool
) -> int:
    """A rolled-back round closed again: told before its new report, which replaces the
    one the players had (instead of a second "closed early" notice)."""
    return _tell(
        session,
        config,
        game,
        now,
        AGAIN_TEMPLATE,
        round=round_.number,
        closed=game_time(game, now),
        over=over,
    )


# -- a restore from a backup ---------------------------------------------------------------


@dataclass(frozen=True)
class Restored:
    """What :func:`notify_restored` told about one game, for the command's output."""

    game: str
    told: int
    round: int | None = None
    deadline: datetime | None = None
    passed: bool = False
    skipped: str | None = None
    """Why nobody was told (a game not started, or over)."""
    told_before: datetime | None = None
    """When its players were told of this same restore already (so not again)."""


@dataclass(frozen=True)
class RestoreReport:
    """What :func:`notify_restored` found and did."""

    records_end: datetime | None
    waiting: int
    """Messages the backup holds unsent: they go out when the service starts (the lost
    time may have sent some of them already)."""
    games: list[Restored]


def records_end(session: Session) -> datetime | None:
    """The time of the last thing the database recorded (an order, a message in or out,
    an action): a restored database knows nothing after it. Notices of a restore are left
    out (deadline notices, which the audit log times anyway), so that telling the players
    twice gives the same time."""
    times = [
        session.scalar(select(func.max(AuditEntry.at)).where(AuditEntry.action != RESTORED)),
        session.scalar(select(func.max(InboundMessage.received_at))),
        session.scalar(select(func.max(OrderRecord.received_at))),
        session.scalar(
            select(func.max(OutboxMessage.created_at)).where(
                OutboxMessage.kind != MailKind.DEADLINE
            )
        ),
        session.scalar(select(func.max(Round.opened_at))),
        session.scalar(select(func.max(Round.closed_at))),
    ]
    found = [t for t in times if t is not None]
    return max(found) if found else None


def records_end_for(
    session: Session, game: Game, address: str, player: Player | None
) -> datetime | None:
    """The time of the last mail between one recipient and the server that a restored
    database still has: what they sent (their orders, their messages) and what it sent
    them, and the game's rounds opening and closing, which every player hears of. This is
    what the restore notice shows them, rather than :func:`records_end`: the server's
    last record may be another player's message, whose time is theirs alone (R19). The
    restore notices themselves are left out, so that telling twice gives the same time."""
    told = select(AuditEntry.at).where(AuditEntry.action == RESTORED)
    times = [
        session.scalar(
            select(func.max(InboundMessage.received_at)).where(
                func.lower(InboundMessage.sender) == address.lower()
            )
        ),
        session.scalar(
            select(func.max(OutboxMessage.created_at)).where(
                func.lower(OutboxMessage.recipient) == address.lower(),
                OutboxMessage.created_at.not_in(told),
            )
        ),
        session.scalar(select(func.max(Round.opened_at)).where(Round.game_id == game.id)),
        session.scalar(select(func.max(Round.closed_at)).where(Round.game_id == game.id)),
    ]
    if player is not None:
        times.append(
            session.scalar(
                select(func.max(OrderRecord.received_at)).where(OrderRecord.player_id == player.id)
            )
        )
    found = [t for t in times if t is not None]
    return max(found) if found else None


def notify_restored(
    db: Database,
    config: Config,
    now: datetime,
    game_name: str | None = None,
    *,
    actor: str = "referee",
    via: str | None = None,
    again: bool = False,
) -> RestoreReport:
    """After the database was restored from a backup: every player (and observer) of each
    game in play (or of ``game_name``) is told what the server now knows (the last of their
    own mail it has: :func:`records_end_for`), which round is open and its deadline, their
    own orders for it as the server has them, and that whatever they sent later must be
    sent again. The report has the server's own end (:func:`records_end`), for the GM.
    A game whose players were told of this restore already (a notice with the same end)
    is not told twice, unless ``again``."""
    with db.transaction() as session:
        end = records_end(session)
        waiting = (
            session.scalar(
                select(func.count())
                .select_from(OutboxMessage)
                .where(OutboxMessage.status == OutboxStatus.PENDING)
            )
            or 0
        )
        if game_name is not None:
            games = [game_by_name(session, game_name, lock=True)]
        else:
            # locked in the order of their ids, as the intake's batches lock theirs (two
            # orders, and each could hold a game the other waits for); told by name
            games = list(session.scalars(select(Game).order_by(Game.id).with_for_update()))
            games.sort(key=lambda game: game.name)
        done = [
            _notify_restored(session, config, game, now, end, actor, via, again) for game in games
        ]
        return RestoreReport(end, waiting, done)


def _notify_restored(
    session: Session,
    config: Config,
    game: Game,
    now: datetime,
    end: datetime | None,
    actor: str,
    via: str | None,
    again: bool,
) -> Restored:
    round_ = open_round(session, game)
    if game.state not in (GamePhase.RUNNING, GamePhase.PAUSED) or round_ is None:
        why = "not started" if game.state == GamePhase.NEW else f"{game.state}"
        return Restored(game.name, 0, skipped=why)
    stamp = end.isoformat() if end is not None else None
    before = [
        entry.at
        for entry in session.scalars(
            select(AuditEntry)
            .where(AuditEntry.game_id == game.id, AuditEntry.action == RESTORED)
            .order_by(AuditEntry.at)
        )
        if isinstance(entry.detail, dict) and entry.detail.get("records_end") == stamp
    ]
    if before and not again:  # a second run would only repeat it, with a new Message-ID
        return Restored(game.name, 0, round_.number, round_.deadline, told_before=before[-1])
    passed = round_.deadline <= now
    told = _tell(
        session,
        config,
        game,
        now,
        RESTORED_TEMPLATE,
        orders=counting_records(session, round_),
        round=round_.number,
        deadline=game_time(game, round_.deadline),
        passed=passed,
        paused=game.state == GamePhase.PAUSED,
        own=lambda address, player: {"records_end": _shown(game, session, address, player)},
    )
    audit(
        session,
        now,
        actor,
        RESTORED,
        game,
        via=via,
        round=round_.number,
        records_end=stamp,
        told=told,
    )
    return Restored(game.name, told, round_.number, round_.deadline, passed)


def _shown(game: Game, session: Session, address: str, player: Player | None) -> str | None:
    end = records_end_for(session, game, address, player)
    return game_time(game, end) if end is not None else None
