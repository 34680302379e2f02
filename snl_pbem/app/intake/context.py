"""What passes along the intake's pipeline: the message being processed (``Message``),
how a step ends it (``Outcome``), and what the caller learns (``IngestResult``, worked
out by ``what_it_did`` in the processing transaction)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import open_round_for_orders
from snl_pbem.app.replies import Context
from snl_pbem.app.schedule import all_in_locked
from snl_pbem.store import Database, Game, InboundMessage, Player
from snl_pbem.store.states import GamePhase, InboundStatus

log = logging.getLogger("snl_pbem.intake")


@dataclass(frozen=True)
class IngestResult:
    inbound_id: int | None
    status: str
    """stored-and-processed outcome: processed, rejected, ignored, duplicate, set-aside."""
    detail: str = ""
    """What was done, for the logs (never matched on: the fields below say it)."""
    game: str | None = None
    """The name of the game the message was for, when one was found."""
    started: bool = False
    """A sign-up or START in it filled or started a game (``game``): plan its round 1."""
    all_in: bool = False
    """Every order of ``game``'s open round is now in (worked out only for a game that
    closes when all are in): check its early close."""

    @property
    def stored(self) -> bool:
        """True once the message is safely in the database (the source may be acknowledged)."""
        return self.inbound_id is not None


@dataclass(frozen=True)
class Outcome:
    """How a step ended the message: its status and what was done (for the logs)."""

    status: str
    detail: str
    secrets: tuple[str, ...] | None = None
    """The keys to redact from the copy kept; None: those it gave and quoted."""


@dataclass
class Message:
    """One message on its way through the steps, in the processing transaction."""

    ctx: Context
    """Session, config, stored row, parsed mail, commands, receipt time, games started:
    what the reply and command handlers take."""
    too_large: str | None = None
    """The note of a message stored as its headers only (over the size limit)."""
    referee: bool = False
    """The referee's mail, with the referee key (authenticate)."""
    game: Game | None = None
    player: Player | None = None
    """The player whose key it carries (authenticate)."""
    other: str | None = None
    """The address the key was used from, when it is not plainly the player's own."""
    done: list[str] = field(default_factory=list)
    """What was done so far, for the outcome's detail."""


def what_it_did(session: Session, msg: Message, status: str, detail: str) -> IngestResult:
    """The typed result: the game, whether the message started it, and, for a game that
    closes when all are in, whether every order of its open round is now in (read in
    this same transaction)."""
    ctx = msg.ctx
    game = msg.game
    if ctx.started:
        name = sorted(ctx.started)[0]
        if game is None or game.name not in ctx.started:
            game = session.scalar(select(Game).where(Game.name == name))
    elif game is None and ctx.row.game_id is not None:
        game = session.get(Game, ctx.row.game_id)
    all_in = False
    if (
        game is not None
        and status == InboundStatus.PROCESSED
        and game.close_when_all_in
        and game.state == GamePhase.RUNNING
    ):
        try:  # a savepoint: a failure here never costs the message what it did
            with session.begin_nested():
                round_ = open_round_for_orders(session, game)
                all_in = round_ is not None and all_in_locked(session, game, round_)
        except Exception as exc:  # the deadline's job still closes the round
            log.error("%s: could not tell whether all orders are in: %s", game.name, exc)
            all_in = False
    return IngestResult(
        ctx.row.id,
        status,
        detail,
        game=game.name if game is not None else None,
        started=bool(ctx.started),
        all_in=all_in,
    )


Results = dict[int, IngestResult | Exception]
"""Each message's result, or the exception that stopped it (the database away)."""


def told_again(db: Database, new: Collection[int], results: Results, why: str) -> Results:
    """The results of a batch written again after whatever wrote it first ended without
    its word (``snl_pbem.runners.applier``): a message of ``new`` (new when the batch was
    read) found handled was handled then, and what it did is lost. Its result is what its
    row says (``why`` its detail), as if it may have filled a game or made a round all in:
    the server then checks both, and the checks change nothing when they are not so."""
    lost = [
        inbound_id
        for inbound_id, result in results.items()
        if inbound_id in new
        and isinstance(result, IngestResult)
        and result.status == InboundStatus.DUPLICATE
    ]
    if not lost:
        return results
    with db.reading() as session:
        rows = session.execute(
            select(InboundMessage.id, InboundMessage.status, Game.name)
            .outerjoin(Game, Game.id == InboundMessage.game_id)
            .where(InboundMessage.id.in_(lost))
        ).all()
    for inbound_id, status, game in rows:
        found = game is not None
        results[inbound_id] = IngestResult(
            inbound_id, status, why, game=game, started=found, all_in=found
        )
    return results
