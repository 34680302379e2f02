"""The referee's commands about who plays: seats, replace, approve, refuse. Each takes
``--config FILE`` and does what the same command by mail does (snl_pbem.app.signup, seats, views),
recorded in the audit log as done by the referee on the command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from snl_pbem.app.seats import replace_seat
from snl_pbem.app.signup import approve_signup, refuse_signup
from snl_pbem.app.views import in_game, seats_of
from snl_pbem.cli.referee import _config, _database, _run
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
        line = _run(lambda: in_game(db, config, args.game, utcnow(), action))
    finally:
        db.dispose()
    print(line)
    return 0


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
        seats = _run(lambda: seats_of(db, args.game, utcnow()))
    finally:
        db.dispose()
    print(f"{seats.game} ({seats.state})")
    for row in seats.players:
        print(f"  {row.name:<20} {row.email:<32} {', '.join(row.notes)}")
    for title, rows in (("waiting for approval", seats.waiting), ("standby", seats.standby)):
        if rows:
            print(f"{title}:")
            for name, email in rows:
                print(f"  {name:<20} {email}")
    print(f"observers: {seats.observers}")
    return 0
