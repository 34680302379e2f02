"""STATUS: a player's position and their own dice; the referee's private view of games."""

from __future__ import annotations

from sqlalchemy import select

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.app.lookup import career, game_time, open_round, ruleset_of, settings_of
from snl_pbem.app.replies import Context, reply
from snl_pbem.app.state import RECEIPT_ORDER, player_state
from snl_pbem.mail.commands import READERS
from snl_pbem.rules.words import tr
from snl_pbem.store import Game, OrderRecord, Player
from snl_pbem.store.states import GamePhase, MailKind


def run(ctx: Context, game: Game, player: Player, other: str | None) -> None:
    """A player's STATUS: their position, their own orders this round, their career."""
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
        GamePhase.RUNNING: tr("running"),
        GamePhase.PAUSED: tr("paused by the referee"),
        GamePhase.OVER: tr("over"),
        GamePhase.NEW: tr("not started yet"),
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


register(
    Command(
        word="STATUS",
        who=Who.PLAYER,
        read=READERS["STATUS"],
        help="STATUS             your position and your dice (the referee: every game's)",
        run=run,
        group="status",
    )
)
