"""HELP: how to send orders (the game's ruleset's help text), to anyone who asks."""

from __future__ import annotations

from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.app.links import guide_urls
from snl_pbem.app.replies import Context, guest_help, help_template, reply
from snl_pbem.mail.commands import READERS
from snl_pbem.store import Game, Player
from snl_pbem.store.states import MailKind


def run(ctx: Context, game: Game | None, player: Player | None, other: str | None) -> None:
    """HELP: to a player (their key checked) within their replies; to anyone else within
    the guests' budget (``game``: the game it named, if any)."""
    if player is None:
        guest_help(ctx, game)
        return
    assert game is not None
    reply(
        ctx,
        game,
        player,
        MailKind.HELP,
        help_template(game),
        other_sender=other,
        guides=guide_urls(ctx.config),
    )


register(
    Command(
        word="HELP",
        who=Who.ANYONE,
        read=READERS["HELP"],
        help="HELP               how to send orders (this text)",
        run=run,
        group="help",
    )
)
