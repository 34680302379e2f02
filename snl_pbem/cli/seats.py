"""The referee's commands about who plays: seats, replace, approve, refuse. Each takes
``--config FILE`` and does what the same command by mail does (snl_pbem.app.membership),
recorded in the audit log as done by the referee on the command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from snl_pbem.app.games import game_by_id, game_time
from snl_pbem.app.membership import (
    approve_signup,
    observers,
    refuse_signup,
    replace_seat,
    signups,
)
from snl_pbem.cli.referee import _config, _database, _run
from snl_pbem.config import Config
from snl_pbem.store import Database, Player
from snl_pbem.store.states import SignupState
from snl_pbem.timeutil import utcnow

ACTOR = "referee"
VIA = "cli"


def add_commands(sub: Any) -> None:
    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
        parser.add_argument(
            "--config",
            metavar="FILE",
            help="the config file (default: $SNL_PBEM_CONFIG, then /etc/snl-pbem/config.toml)",
        )
        parser.add_argument("game", help="the game's id")
        parser.set_defaults(handler=handler)
        return parser

    command(
        "seats",
        cmd_seats,
        "who plays a game: seats (resigned, absent), sign-ups waiting, standby, observers",
    )
    rep = command(
        "replace",
        cmd_replace,
        "give a player's seat (position and dice history) to another address, with a new key",
    )
    rep.add_argument("player", help="the seat's player name")
    rep.add_argument("email", help="the new player's address")
    for name, handler, help in (
        ("approve", cmd_approve, 'accept a sign-up waiting for approval (signup = "approval")'),
        ("refuse", cmd_refuse, "refuse a sign-up waiting for approval (they are told)"),
    ):
        parser = command(name, handler, help)
        parser.add_argument("name", help="the name they signed up with")


def _in_game(args: argparse.Namespace, action: Callable[..., str]) -> int:
    """Run ``action(session, config, game, now)`` with the game row locked; print its line."""
    config = _config(args)
    db = _database(config)
    try:
        line = _run(lambda: _locked(db, config, args.game, action))
    finally:
        db.dispose()
    print(line)
    return 0


def _locked(db: Database, config: Config, game_id: str, action: Callable[..., str]) -> str:
    with db.transaction() as session:
        game = game_by_id(session, game_id, lock=True)
        return action(session, config, game, utcnow())


def cmd_replace(args: argparse.Namespace) -> int:
    return _in_game(
        args,
        lambda s, c, g, now: replace_seat(
            s, c, g, args.player, args.email, now, actor=ACTOR, via=VIA
        ),
    )


def cmd_approve(args: argparse.Namespace) -> int:
    return _in_game(
        args, lambda s, c, g, now: approve_signup(s, c, g, args.name, now, actor=ACTOR, via=VIA)
    )


def cmd_refuse(args: argparse.Namespace) -> int:
    return _in_game(
        args, lambda s, c, g, now: refuse_signup(s, c, g, args.name, now, actor=ACTOR, via=VIA)
    )


def cmd_seats(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    try:
        with db.transaction() as session:
            game = _run(lambda: game_by_id(session, args.game))
            now = utcnow()
            print(f"{game.name} ({game.state})")
            for player in session.scalars(
                select(Player).where(Player.game_id == game.id).order_by(Player.id)
            ):
                notes = [f"by {player.managed_by}"]
                if player.resigned_at is not None:
                    notes.append(f"resigned {game_time(game, player.resigned_at)}")
                elif not player.active:
                    notes.append("not in the config")
                if player.absent_until is not None and player.absent_until > now:
                    notes.append(f"absent until {game_time(game, player.absent_until)}")
                print(f"  {player.name:<20} {player.email:<32} {', '.join(notes)}")
            for state, title in (
                (SignupState.WAITING, "waiting for approval"),
                (SignupState.STANDBY, "standby"),
            ):
                rows = signups(session, game, state)
                if rows:
                    print(f"{title}:")
                    for row in rows:
                        print(f"  {row.name:<20} {row.email}")
            watching = observers(session, game)
            print(f"observers: {len(watching)}")
    finally:
        db.dispose()
    return 0
