"""The mail a round close sends: each player's report, the referee's summary, game over;
and the notice of a moved deadline.

Enqueued in the close's own transaction, so a round is never closed without
its reports, nor reported without being closed. A player's report holds only
what R19 allows: every position, the next round's kind and deadline, and the
reader's own dice of the current set. The referee's summary holds everything.
A deadline notice holds the game, the round, the old and new deadline and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.config import Config
from snl_pbem.rules import Board, Position, RoundResult
from snl_pbem.rules.postal.dice import lowest_legal_dice, open_values, used_in_set
from snl_pbem.store import (
    AuditEntry,
    Game,
    InboundMessage,
    OutboxMessage,
    Player,
    Round,
    RoundTally,
    TurnRecord,
)
from snl_pbem.timeutil import show, zone
from snl_pbem.views.board import render_svg, render_text


@dataclass(frozen=True)
class Standing:
    place: str
    name: str
    position: Position


def standings(positions: dict[str, Position]) -> list[Standing]:
    """Furthest first; equal positions share a place (``2=``)."""
    ordered = sorted(positions.items(), key=lambda item: (-item[1], item[0]))
    rows = []
    for _index, (name, position) in enumerate(ordered):
        first = next(i for i, (_, p) in enumerate(ordered) if p == position)
        shared = sum(1 for _, p in ordered if p == position) > 1
        rows.append(Standing(f"{first + 1}{'=' if shared else ''}", name, position))
    return rows


DEADLINE_REASONS = ("extended", "earlier", "resumed", "closed")
"""Why a deadline moved: extended (or moved ``earlier``) by the referee, the game paused
and resumed, or the round closed before its deadline by the referee."""


def enqueue_deadline_notice(
    session: Session,
    config: Config,
    game: Game,
    round_: Round,
    *,
    old: datetime,
    new: datetime,
    reason: str,
    now: datetime,
) -> int:
    """Tell every active player, in one message each, that the open round's deadline moved
    from ``old`` to ``new`` (for ``closed``: the round closed at ``new``). Nothing is sent
    when the deadline did not change. Returns how many messages were queued."""
    if reason not in DEADLINE_REASONS:
        raise ValueError(f"unknown reason for a deadline notice: {reason!r}")
    if old == new:
        return 0
    tz = zone(game.timezone)
    players = session.scalars(
        select(Player).where(Player.game_id == game.id, Player.active).order_by(Player.id)
    ).all()
    for player in players:
        enqueue_mail(
            session,
            config,
            game=game,
            kind="deadline",
            to=player.email,
            now=now,
            template="player/deadline.txt.j2",
            broadcast=True,
            player=player,
            round=round_.number,
            reason=reason,
            old=show(old, tz),
            new=show(new, tz),
        )
    return len(players)


def enqueue_round_mail(
    session: Session,
    config: Config,
    game: Game,
    round_: Round,
    result: RoundResult,
    *,
    played: dict[str, tuple[int, ...]],
    next_round: int | None,
    next_turns: int | None,
    next_deadline: datetime | None,
    actor: str,
    now: datetime,
) -> None:
    """Every player's report (or game-over mail), and the referee's summary."""
    tz = zone(game.timezone)
    positions = dict(result.positions)
    rows = standings(positions)
    width = max(len(name) for name in positions)
    players = session.scalars(
        select(Player).where(Player.game_id == game.id).order_by(Player.id)
    ).all()
    over = result.result is not None
    headline = ""
    if result.result is not None:
        winners = result.result.winners
        headline = (
            f"a draw between {', '.join(winners)}"
            if result.result.is_draw
            else f"{winners[0]} wins"
        )
    reveal: dict[str, Any] = {"reveal": False}
    attachments: tuple[tuple[str, str, bytes], ...] = ()
    if over and game.reveal_after_game:
        board = Board.from_mapping(game.board)
        reveal = {
            "reveal": True,
            "board_text": render_text(board),
            "history": history_lines(session, game),
        }
        svg = render_svg(board, title=f"{game.title or game.key}: the board")
        attachments = (("board.svg", "image/svg+xml", svg.encode()),)
    for player in players:
        if not player.active:
            continue
        if over:
            enqueue_mail(
                session,
                config,
                game=game,
                kind="game-over",
                to=player.email,
                now=now,
                template="player/game_over.txt.j2",
                broadcast=True,
                player=player,
                round=round_.number,
                headline=headline,
                standings=rows,
                width=width,
                attachments=attachments,
                **reveal,
            )
            continue
        mine = played[player.name]
        enqueue_mail(
            session,
            config,
            game=game,
            kind="report",
            to=player.email,
            now=now,
            template="player/round_report.txt.j2",
            broadcast=True,
            player=player,
            round=round_.number,
            over=False,
            standings=rows,
            width=width,
            next_round=next_round,
            next_turns=next_turns,
            deadline=show(next_deadline, tz) if next_deadline else "",
            used=", ".join(map(str, used_in_set(mine))) or "none (a new set starts)",
            open_values=", ".join(map(str, open_values(mine))),
            example_dice=" ".join(map(str, lowest_legal_dice(mine, next_turns or 1))),
        )
    enqueue_referee_summary(
        session,
        config,
        game,
        round_,
        result,
        actor=actor,
        now=now,
        next_round=next_round,
        next_deadline=next_deadline,
        headline=headline,
    )


def enqueue_referee_summary(
    session: Session,
    config: Config,
    game: Game,
    round_: Round,
    result: RoundResult,
    *,
    actor: str,
    now: datetime,
    next_round: int | None,
    next_deadline: datetime | None,
    headline: str,
) -> None:
    tz = zone(game.timezone)
    moves = []
    for name in sorted(result.positions):
        steps = []
        for turn in result.turns:
            move = turn.moves[name]
            path = "".join(f", {e}" for e in move.events)
            steps.append(
                f"turn {turn.turn}: {move.die} {move.start}->{move.target}{path} = {move.final}"
            )
        nominated = result.nominations[name]
        vote = "-" if nominated is None else str(nominated)
        if name in result.defaulted:
            vote += " (default)"
        moves.append(f"{name}: " + "; ".join(steps) + f"; nominated {vote}")
    previous_close = session.scalar(
        select(func.max(Round.closed_at)).where(
            Round.game_id == game.id, Round.number < round_.number
        )
    )
    rejected_query = select(InboundMessage).where(
        InboundMessage.game_id == game.id, InboundMessage.status.in_(("rejected", "failed"))
    )
    if previous_close is not None:
        rejected_query = rejected_query.where(InboundMessage.received_at > previous_close)
    rejected = [
        f"#{m.id} from {m.sender or 'unknown'}: {m.status}: "
        f"{(m.error or '').splitlines()[0][:120] if m.error else ''}"
        for m in session.scalars(rejected_query.order_by(InboundMessage.id).limit(50))
    ]
    since = previous_close or round_.opened_at
    key_uses = session.scalars(
        select(AuditEntry)
        .where(
            AuditEntry.game_id == game.id,
            AuditEntry.action.in_(("key-elsewhere", "wrong-key")),
            AuditEntry.at > since,
        )
        .order_by(AuditEntry.id)
    ).all()
    elsewhere = [
        f"{e.detail.get('player')}'s key from {e.detail.get('address')} (inbound "
        f"#{e.detail.get('inbound')})"
        for e in key_uses
        if e.action == "key-elsewhere"
    ][:50]
    wrong_keys = sum(1 for e in key_uses if e.action == "wrong-key")
    failed_mail = (
        session.scalar(
            select(func.count())
            .select_from(OutboxMessage)
            .where(OutboxMessage.game_id == game.id, OutboxMessage.status == "failed")
        )
        or 0
    )
    enqueue_mail(
        session,
        config,
        game=game,
        kind="referee-summary",
        to=config.settings.mail.referee,
        now=now,
        template="referee/round_summary.txt.j2",
        round=round_.number,
        over=result.result is not None,
        turns_ordered=result.turns_ordered,
        closed=show(now, tz),
        actor=actor,
        threshold=result.tally.threshold,
        votes=", ".join(f"{s}: {n}" for s, n in result.tally.votes.items()),
        trapdoors=", ".join(map(str, result.trapdoors)),
        by_lot=result.tally.by_lot,
        moves=moves,
        nmr=sorted((n, str(why)) for n, why in result.nmr.items()),
        rejected=rejected,
        elsewhere=elsewhere,
        wrong_keys=wrong_keys,
        failed_mail=failed_mail,
        positions=", ".join(f"{r.name} {r.position}" for r in standings(dict(result.positions))),
        result=headline,
        next_round=next_round,
        deadline=show(next_deadline, tz) if next_deadline else "",
    )


def history_lines(session: Session, game: Game) -> list[str]:
    """The whole game, round by round, for the post-game reveal."""
    names = dict(
        session.execute(select(Player.id, Player.name).where(Player.game_id == game.id)).all()
    )
    lines = []
    rounds = session.scalars(
        select(Round)
        .where(Round.game_id == game.id, Round.state == "closed")
        .order_by(Round.number)
    ).all()
    for round_ in rounds:
        tally = session.scalar(select(RoundTally).where(RoundTally.round_id == round_.id))
        traps = ", ".join(map(str, tally.trapdoors)) if tally and tally.trapdoors else "none"
        dice: dict[str, list[str]] = {}
        for player_id, die in session.execute(
            select(TurnRecord.player_id, TurnRecord.die)
            .where(TurnRecord.round_id == round_.id)
            .order_by(TurnRecord.turn, TurnRecord.player_id)
        ).all():
            dice.setdefault(names[player_id], []).append(str(die))
        played = "; ".join(f"{n} {' '.join(d)}" for n, d in sorted(dice.items()))
        lines.append(f"  Round {round_.number}: {played} (trapdoors: {traps})")
    return lines
