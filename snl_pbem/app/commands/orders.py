"""The order words: each ruleset's own (``Ruleset.order_words``: postal DICE and TRAPDOOR,
classic ROLL), registered from the rulesets, and CLEAR, which takes back a round's orders
in every game. ``run`` (CLEAR's) is what the order set does: the ruleset's order
words are read into one order set, run once per message."""

from __future__ import annotations

from datetime import timedelta

from snl_pbem.app.commands.registry import Command, Who, register, register_order_words
from snl_pbem.app.lookup import game_time, open_round_for_orders, ruleset_of
from snl_pbem.app.replies import Context, redact, redacted, reply
from snl_pbem.app.rounds import submit_orders
from snl_pbem.mail.commands import READERS, LineProblem
from snl_pbem.rules.words import tr
from snl_pbem.store import Game, Player
from snl_pbem.store.states import GamePhase, InboundStatus, MailKind

RECEIPT_RESOLUTION = timedelta(seconds=1)


def run(ctx: Context, game: Game, player: Player, other: str | None) -> tuple[str, str]:
    """The order set (or CLEAR): refused with the reason, or stored and acknowledged;
    (status, what was done)."""
    session, commands = ctx.session, ctx.commands
    round_ = open_round_for_orders(session, game)
    refusal = None
    if game.state == GamePhase.PAUSED:
        refusal = tr("The game is paused: orders cannot be accepted until the referee resumes it.")
    elif game.state == GamePhase.OVER:
        refusal = tr("The game is over: there is no round to send orders for.")
    elif game.state != GamePhase.RUNNING or round_ is None:
        refusal = tr("The game is not running: there is no round to send orders for.")
    elif commands.round is not None and commands.round != round_.number:
        refusal = tr(
            "Your orders are for round {sent}, but the round open now is round {open}. Send "
            "them again with ROUND {open} (or without a ROUND line).",
            sent=commands.round,
            open=round_.number,
        )
    elif ctx.now + RECEIPT_RESOLUTION <= round_.opened_at:  # IMAP dates are whole seconds
        refusal = tr(
            "Your message reached us before round {round} opened, so it was meant for an "
            "earlier round, which is closed now. Send your orders for round {round} again.",
            round=round_.number,
        )
    elif ctx.now > round_.deadline:
        refusal = tr(
            "Your orders arrived after round {round}'s deadline ({deadline}), so they do not "
            "count.",
            round=round_.number,
            deadline=game_time(game, round_.deadline),
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


register_order_words()
register(
    Command(
        word="CLEAR",
        who=Who.PLAYER,
        read=READERS["CLEAR"],
        help="CLEAR              withdraw this round's orders",
        run=run,
        group="orders",
    )
)
