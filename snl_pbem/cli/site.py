"""``snl-pbem site build``: write the game pages ([web]) now, every game's (after an
upgrade, a restore, or to see them before the server runs). The server keeps them up to
date by itself."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from snl_pbem.cli.referee import _config, _database
from snl_pbem.errors import CommandError
from snl_pbem.rules.words import counted
from snl_pbem.site.writer import Site
from snl_pbem.timeutil import utcnow


def add_commands(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "site",
        help="the game pages ([web]): site build rewrites them all",
        description="Write the game pages ([web] dir): the index, and each game's page, "
        "race chart, feed and (after a revealing postal game) its board.",
    )
    parser.add_argument("action", choices=["build"], help="build: rewrite every page now")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the config file (default: $SNL_PBEM_CONFIG, then /etc/snl-pbem/config.toml)",
    )
    parser.set_defaults(handler=cmd_site)


def cmd_site(args: argparse.Namespace) -> int:
    config = _config(args)
    if config.settings.web is None:
        raise CommandError(
            f'{config.path}: no [web] table: add one with dir = "/var/lib/snl-pbem/site" '
            '(where to write the pages; deploy/README.md, "Game pages")'
        )
    db = _database(config)
    try:
        report = Site(db, config, utcnow).update(everything=True)
    finally:
        db.dispose()
    index = config.settings.web.dir / "index.html"
    print(
        f"{counted(report.games, 'game page')} written in {report.seconds:.2f} s; "
        f"the index: file://{index}"
    )
    if config.settings.web.base_url:
        print(f"players reach it at {config.settings.web.base_url}")
    for game, why in report.failed.items():
        print(f"snl-pbem site: {game}: its pages could not be made: {why}", file=sys.stderr)
    return 1 if report.failed else 0
