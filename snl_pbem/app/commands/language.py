"""LANGUAGE: the language of a player's mail (issue 25), with their GAME and KEY lines.

``LANGUAGE zh`` (or ``zh-Hans``, ``th``, ``en``, ``Chinese``, ``ไทย``...: snl_pbem.i18n)
makes every mail of the game to them, from the answer to this message on, come in that
language; ``LANGUAGE`` alone answers with the one in use and the ones there are. The choice
is kept in the database and comes before the config's (a player's word about their own
mail is theirs to give). A stranger's ``LANGUAGE`` beside a JOIN is the sign-up's
(commands/signup.py); the command words themselves are the same in every language.
"""

from __future__ import annotations

from snl_pbem.app.commands.answers import player_reply
from snl_pbem.app.commands.registry import Command, Who, register
from snl_pbem.app.lookup import audit
from snl_pbem.app.outbox import mail_language
from snl_pbem.app.replies import Context
from snl_pbem.i18n import LANGUAGES, codes_text
from snl_pbem.mail.commands import READERS, Action
from snl_pbem.rules.words import tr
from snl_pbem.store import Game, Player

HELP_LINE = tr("LANGUAGE zh        your mail in Chinese (zh), Thai (th) or English (en)")


def asked_language(actions: tuple[Action, ...] | list[Action]) -> str | None:
    """The language a message's LANGUAGE line asks for (a JOIN beside it takes it)."""
    return next((a.args[0] for a in actions if a.word == "LANGUAGE" and a.args), None)


def run(ctx: Context, game: Game, player: Player, action: Action) -> str:
    """LANGUAGE: set the player's language (or say which is in use); answered in it."""
    if not action.args:
        code = mail_language(ctx.config, game, player.email, "player/", player)
        player_reply(
            ctx,
            game,
            player,
            tr(
                "Your mail from {game} is in {name} ({code}). To change it, send LANGUAGE "
                "and one of: {codes}.",
                game=game.name,
                name=LANGUAGES[code].name,
                code=code,
                codes=codes_text(),
            ),
        )
        return f"language: {code} (asked)"
    code = action.args[0]
    if player.language != code:
        audit(
            ctx.session,
            ctx.now,
            player.email,
            "language",
            game,
            via="mail",
            player=player.name,
            language=code,
        )
    player.language = code
    player_reply(
        ctx,
        game,
        player,
        tr(
            "From now on your mail from {game} is in {name}. The command words (GAME, KEY, "
            "DICE...) stay as they are.",
            game=game.name,
            name=LANGUAGES[code].name,
        ),
    )
    return f"language: {code}"


LANGUAGE = register(
    Command(
        word="LANGUAGE",
        aliases=("LANG",),
        who=Who.PLAYER,
        read=READERS["LANGUAGE"],
        run=run,
        help=HELP_LINE,
        group="player",
    )
)
