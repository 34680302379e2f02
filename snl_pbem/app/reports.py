"""The mail a round close sends: each player's report, the referee's summary, game over;
and the notice of a moved deadline.

Enqueued in the close's own transaction, so a round is never closed without
its reports, nor reported without being closed. A player's report holds only
what R19 allows: every position, the next round's kind and deadline, and the
reader's own dice of the current set; and, when the referee chose the reader's
move (R17, R18) or nomination (R16), what was chosen and why (``own_defaults``):
it is the reader's own move, and a player moved without being told cannot know
to send orders next time. The referee's summary holds everything.
A deadline notice holds the game, the round, the old and new deadline and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.orm import Session

from snl_pbem.app.links import page_url
from snl_pbem.app.lookup import careers, game_time, ruleset_of, settings_of
from snl_pbem.app.outbox import MailBatch, enqueue_mail, greetings
from snl_pbem.app.state import RECEIPT_ORDER, observers_languages
from snl_pbem.app.views import positions_line, seat_lines
from snl_pbem.config import Config
from snl_pbem.rules import Board
from snl_pbem.rules.geometry import Position
from snl_pbem.rules.outcome import ranked
from snl_pbem.rules.ruleset import Adjudication, StoredRound
from snl_pbem.rules.words import joined, ntr, reread, tr
from snl_pbem.store import (
    AuditEntry,
    Game,
    InboundMessage,
    OrderRecord,
    OutboxMessage,
    Player,
    Round,
    RoundTally,
    TurnRecord,
)
from snl_pbem.store.states import InboundStatus, MailKind, OutboxStatus, RoundPhase
from snl_pbem.views.board import render_svg, render_text


@dataclass(frozen=True)
class Standing:
    place: str
    name: str
    position: Position
    line: str = ""  # as the reports print it (name padded to the longest), made once a game


def standings(positions: dict[str, Position]) -> list[Standing]:
    """Furthest first; equal positions share a place (``2=``)."""
    ordered = ranked(positions)
    width = max((len(name) for name in positions), default=0)
    rows = []
    for name, position in ordered:
        first = next(i for i, (_, p) in enumerate(ordered) if p == position)
        place = f"{first + 1}{'=' if sum(1 for _, p in ordered if p == position) > 1 else ''}"
        rows.append(Standing(place, name, position, f"{place:<3} {name:<{width}} {position:4d}"))
    return rows


@dataclass(frozen=True)
class OwnDefaults:
    """What the referee chose for one player in a round, for that player's eyes only."""

    dice: tuple[int, ...]
    """The dice played for the player, turn by turn (whoever chose them)."""
    start: Position
    """Where the player stood before the round's first move (+ the first die: the space
    the move aimed at, which R16 nominates)."""
    played_for: bool
    """The referee chose the dice (R17, or R18 for dice that could not be played)."""
    why: str
    """Why, when ``played_for``: "none" (no orders by the deadline), "withdrawn" (CLEAR
    and nothing after) or "invalid" (R18); "" otherwise."""
    problems: tuple[str, ...]
    """For "invalid": what was wrong with the dice, as the acknowledgement said it."""
    away_until: str | None
    """ABSENT over the deadline: the default is not held against the player."""
    nomination: int | None
    """The nomination the referee made for the player (R16), when it did; None when the
    player's own stood, or when the move aimed past the last space (no nomination)."""
    nomination_defaulted: bool
    nomination_kept: bool
    """The dice were refused but the player's own nomination still counted (R18)."""


def own_defaults(
    session: Session, game: Game, round_: Round, decided: Adjudication, players: list[Player]
) -> dict[str, OwnDefaults]:
    """Each player whose move or nomination the referee chose this round (R16-R18), with
    what it chose and why; a player who chose both is not in it. Only the reader's own
    entry is ever given to a reader's template (R19)."""
    defaulted = set(decided.tally.get("defaulted", ()))
    nominations = decided.tally.get("nominations", {})
    concerned = set(decided.nmr) | defaulted
    if not concerned:
        return {}
    latest: dict[int, tuple[bool, bool, list[Any]]] = {}  # the orders that counted, if any
    if decided.nmr:
        for player_id, valid, withdrawn, problems in session.execute(
            select(
                OrderRecord.player_id,
                OrderRecord.valid,
                OrderRecord.withdrawn,
                OrderRecord.problems,
            )
            .where(
                OrderRecord.round_id == round_.id,
                or_(OrderRecord.received_at <= round_.deadline, OrderRecord.source == "referee"),
            )
            .order_by(*RECEIPT_ORDER)
        ):  # later ones replace earlier ones, as a whole
            latest[player_id] = (valid, withdrawn, problems or [])
    found: dict[str, OwnDefaults] = {}
    for player in players:
        name = player.name
        if name not in concerned:
            continue
        moves = [turn.moves[name] for turn in decided.turns if name in turn.moves]
        if not moves:
            continue
        played_for = name in decided.nmr
        if not played_for and nominations.get(name) is None:
            continue  # a default nomination of nothing (the move aimed past the end): no news
        why, problems = "", ()
        if played_for:
            record = latest.get(player.id)
            if record is None:
                why = "none"
            elif record[1]:
                why = "withdrawn"
            else:
                # kept as English: in the reader's words again (snl_pbem.rules.words)
                why, problems = "invalid", tuple(reread(str(p)) for p in record[2])
        away = player.absent_until is not None and player.absent_until > round_.deadline
        found[name] = OwnDefaults(
            dice=tuple(move.die for move in moves),
            start=moves[0].start,
            played_for=played_for,
            why=why,
            problems=problems,
            away_until=game_time(game, player.absent_until)
            if away and player.absent_until is not None
            else None,
            nomination=nominations.get(name) if name in defaulted else None,
            nomination_defaulted=name in defaulted,
            nomination_kept=played_for and why == "invalid" and name not in defaulted,
        )
    return found


DEADLINE_REASONS = ("extended", "earlier", "paused", "resumed", "closed")
"""Why a deadline moved: extended (or moved ``earlier``) by the referee, the game paused
(the deadline stops: ``old`` and ``new`` are the same) and resumed, or the round closed
before its deadline by the referee."""


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
    from ``old`` to ``new`` (for ``closed``: the round closed at ``new``; for ``paused``:
    the deadline ``old`` stopped). Nothing is sent when the deadline did not change, but
    a pause and a resume are always told (players told the game is paused must hear that
    it runs again, even when the pause lasted less than a second). Returns how many
    messages were queued."""
    if reason not in DEADLINE_REASONS:
        raise ValueError(f"unknown reason for a deadline notice: {reason!r}")
    if old == new and reason not in ("paused", "resumed"):
        return 0
    players = session.scalars(
        select(Player).where(Player.game_id == game.id, Player.active).order_by(Player.id)
    ).all()
    hello = greetings(session, game, players)
    for player in players:
        enqueue_mail(
            session,
            config,
            game=game,
            kind=MailKind.DEADLINE,
            to=player.email,
            now=now,
            template="player/deadline.txt.j2",
            broadcast=True,
            player=player,
            hello=hello[player.id],
            round=round_.number,
            reason=reason,
            old=game_time(game, old),
            new=game_time(game, new),
        )
    return len(players)


def enqueue_round_mail(
    session: Session,
    config: Config,
    game: Game,
    round_: Round,
    decided: Adjudication,
    *,
    next_round: int | None,
    next_turns: int | None,
    next_deadline: datetime | None,
    actor: str,
    now: datetime,
    replaces: bool = False,
) -> None:
    """Every player's report (or game-over mail), and the referee's summary. ``replaces``:
    the round was closed before and rolled back, so each mail says it replaces that one."""
    positions = dict(decided.positions)
    rows = standings(positions)
    width = max(len(name) for name in positions)
    players = session.scalars(_PLAYERS, {"game": game.id}).all()
    deadline = game_time(game, next_deadline) if next_deadline else ""  # the same for all
    over = decided.result is not None
    headline = ""
    if decided.result is not None:
        winners = decided.result.winners
        order = (decided.result.summary or {}).get("order")
        if order:  # the classic game's finish = "all": everyone's place
            places = (
                tr(
                    "{player} (round {round}, {rolls})",
                    player=o["player"],
                    round=o["round"],
                    rolls=ntr("{n} roll", "{n} rolls", o["rolls"]),
                )
                for o in order
            )
            headline = tr("the finishing order is {order}", order=joined(tr(", "), places))
        elif decided.result.is_draw:
            headline = tr("a draw between {names}", names=joined(tr(", "), winners))
        else:
            headline = tr("{name} wins", name=winners[0])
    ruleset, settings = ruleset_of(game), settings_of(game)
    reveal: dict[str, Any] = {"reveal": False}
    attachments: tuple[tuple[str, str, bytes], ...] = ()
    if over and game.reveal_after_game:
        board = Board.from_mapping(game.board)
        reveal = {
            "reveal": True,
            "board_text": render_text(board),
            "history": history_lines(session, game),
        }
        svg = render_svg(board, title=f"{game.title or game.name}: the board")
        attachments = (("board.svg", "image/svg+xml", svg.encode()),)
    records = careers(session, game, [p for p in players if p.active]) if over else {}
    defaults = own_defaults(session, game, round_, decided, [p for p in players if p.active])
    hello = greetings(session, game, [p for p in players if p.active])
    page = page_url(config, game.name)  # the game's web page, when the site has an address
    batch = MailBatch()  # the close's mail in one INSERT
    for player in players:
        if not player.active:
            continue
        if over:
            batch.add(
                session,
                config,
                game=game,
                kind=MailKind.GAME_OVER,
                to=player.email,
                now=now,
                template=f"{ruleset.name}/game_over.txt.j2",
                broadcast=True,
                player=player,
                hello=hello[player.id],
                round=round_.number,
                replaces=replaces,
                headline=headline,
                standings=rows,
                width=width,
                attachments=attachments,
                rules=ruleset.player_view(settings, decided.after, player.name),
                career=records[player.email.lower()],
                your_move=defaults.get(player.name),  # R19: the reader's own, nobody else's
                page=page,
                **reveal,
            )
            continue
        batch.add(
            session,
            config,
            game=game,
            kind=MailKind.REPORT,
            to=player.email,
            now=now,
            template=f"{ruleset.name}/round_report.txt.j2",
            broadcast=True,
            player=player,
            hello=hello[player.id],
            round=round_.number,
            replaces=replaces,
            over=False,
            standings=rows,
            width=width,
            next_round=next_round,
            next_turns=next_turns,
            deadline=deadline,
            rules=ruleset.player_view(settings, decided.after, player.name),  # R19: own only
            your_move=defaults.get(player.name),  # R19: the reader's own, nobody else's
            page=page,
        )
    for address, language in observers_languages(session, game):  # the public report (R19)
        batch.add(
            session,
            config,
            game=game,
            kind=MailKind.OBSERVER_REPORT,
            to=address,
            now=now,
            language=language,
            template="player/observer_report.txt.j2",
            broadcast=True,
            round=round_.number,
            replaces=replaces,
            over=over,
            headline=headline,
            standings=rows,
            width=width,
            next_round=next_round,
            next_turns=next_turns,
            deadline=deadline,
            page=page,
        )
    enqueue_referee_summary(
        session,
        config,
        game,
        round_,
        decided,
        actor=actor,
        now=now,
        next_round=next_round,
        next_deadline=next_deadline,
        headline=headline,
        batch=batch,
        players=players,
    )
    batch.insert(session)


_LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)
_PLAYERS = select(Player).where(Player.game_id == bindparam("game")).order_by(Player.id)
# The summary's reads, built once (building a statement cost more than running it):
_PREVIOUS_CLOSE_AND_FAILED = select(
    select(func.max(Round.closed_at))
    .where(Round.game_id == bindparam("game"), Round.number < bindparam("number"))
    .scalar_subquery(),
    select(func.count())
    .select_from(OutboxMessage)
    .where(OutboxMessage.game_id == bindparam("game"), OutboxMessage.status == OutboxStatus.FAILED)
    .scalar_subquery(),
)
_REJECTED = (
    select(InboundMessage.id, InboundMessage.sender, InboundMessage.status, InboundMessage.error)
    .where(
        InboundMessage.game_id == bindparam("game"),
        InboundMessage.status.in_((InboundStatus.REJECTED, InboundStatus.SET_ASIDE)),
        InboundMessage.received_at > bindparam("since"),  # since the round before closed
    )
    .order_by(InboundMessage.id)
    .limit(50)
)
_UNREAD = (
    select(InboundMessage.id, InboundMessage.sender)
    .where(
        InboundMessage.status == InboundStatus.NEW,
        InboundMessage.received_at <= bindparam("until"),
    )
    .order_by(InboundMessage.id)
    .limit(50)
)
_KEY_USES = (
    select(AuditEntry.action, AuditEntry.detail)
    .where(
        AuditEntry.game_id == bindparam("game"),
        AuditEntry.action.in_(("key-elsewhere", "wrong-key")),
        AuditEntry.at > bindparam("since"),
    )
    .order_by(AuditEntry.id)
)


def enqueue_referee_summary(
    session: Session,
    config: Config,
    game: Game,
    round_: Round,
    decided: Adjudication,
    *,
    actor: str,
    now: datetime,
    next_round: int | None,
    next_deadline: datetime | None,
    headline: str,
    batch: MailBatch | None = None,
    players: Sequence[Player] = (),
) -> None:
    """The referee's summary of everything; ``players``: each one's language is shown."""
    ruleset = ruleset_of(game)
    previous_close, failed_mail = session.execute(
        _PREVIOUS_CLOSE_AND_FAILED, {"game": game.id, "number": round_.number}
    ).one()
    rejected = [
        f"#{inbound_id} from {sender or 'unknown'}: {status}: "
        f"{(error or '').splitlines()[0][:120] if error else ''}"
        for inbound_id, sender, status, error in session.execute(
            _REJECTED, {"game": game.id, "since": previous_close or _LONG_AGO}
        )
    ]
    # stored before the deadline but still being read when the close stopped waiting for
    # it (snl_pbem.runners.scheduler.CLOSE_WAIT_SECONDS): its game is not known yet
    rejected += [
        f"#{inbound_id} from {sender or 'unknown'}: received before the deadline, not yet "
        "read at the close: orders in it will be refused as late"
        for inbound_id, sender in session.execute(_UNREAD, {"until": min(round_.deadline, now)})
    ]
    since = previous_close or round_.opened_at
    key_uses = session.execute(_KEY_USES, {"game": game.id, "since": since}).all()
    elsewhere = [
        f"{detail.get('player')}'s key from {detail.get('address')} (inbound "
        f"#{detail.get('inbound')})"
        for action, detail in key_uses
        if action == "key-elsewhere"
    ][:50]
    wrong_keys = sum(1 for action, _ in key_uses if action == "wrong-key")
    own = batch is None
    batch = MailBatch() if batch is None else batch
    batch.add(
        session,
        config,
        game=game,
        kind=MailKind.REFEREE_SUMMARY,
        to=config.settings.mail.referee,
        now=now,
        template=f"{ruleset.name}/round_summary.txt.j2",
        round=round_.number,
        over=decided.result is not None,
        closed=game_time(game, now),
        actor=actor,
        rules=ruleset.referee_view(decided),
        nmr=sorted(decided.nmr.items()),
        rejected=rejected,
        elsewhere=elsewhere,
        wrong_keys=wrong_keys,
        failed_mail=failed_mail,
        seats=seat_lines(session, game, now),
        positions=positions_line(config, game, players, ranked(decided.positions)),
        result=headline,
        next_round=next_round,
        deadline=game_time(game, next_deadline) if next_deadline else "",
    )
    if own:
        batch.insert(session)


def history_lines(session: Session, game: Game) -> tuple[str, ...]:
    """The whole game, round by round, for the post-game reveal (in the ruleset's words)."""
    names = dict(
        session.execute(select(Player.id, Player.name).where(Player.game_id == game.id)).all()
    )
    rounds = []
    for round_ in session.scalars(
        select(Round)
        .where(Round.game_id == game.id, Round.state == RoundPhase.CLOSED)
        .order_by(Round.number)
    ).all():
        row = session.scalar(select(RoundTally).where(RoundTally.round_id == round_.id))
        dice: dict[str, list[int]] = {}
        for player_id, die in session.execute(
            select(TurnRecord.player_id, TurnRecord.die)
            .where(TurnRecord.round_id == round_.id)
            .order_by(TurnRecord.turn, TurnRecord.player_id)
        ).all():
            dice.setdefault(names[player_id], []).append(die)
        tally = None
        if row is not None:
            kept = ("nominations", "defaulted", "votes", "threshold", "trapdoors", "by_lot")
            tally = {key: getattr(row, key) for key in kept}
        record = row.record if row is not None else None
        rounds.append(StoredRound(round_.number, dice, tally, record))
    return ruleset_of(game).history(rounds)
