"""The ``snl-pbem`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from snl_pbem import __version__
from snl_pbem.boards import UnknownBoard, bundled_names, bundled_table, description, locate
from snl_pbem.cli import seats, site
from snl_pbem.cli.demo import run_demo
from snl_pbem.cli.referee import add_commands
from snl_pbem.config import game_files, game_table
from snl_pbem.errors import CommandError, ReplayError, SnlError
from snl_pbem.offline.classic_replay import (
    classic_outcome_json,
    classic_outcome_text,
    parse_classic_replay,
    run_classic,
)
from snl_pbem.offline.replay import (
    dump_json,
    outcome_json,
    parse_replay,
    read_document,
    run_replay,
)
from snl_pbem.offline.replaytext import render_outcome_text
from snl_pbem.rules import Board, BoardError, GameSetupError
from snl_pbem.rules.boardspec import BOARD_KEYS
from snl_pbem.rules.ruleset import DEFAULT_RULESET, get_ruleset
from snl_pbem.rules.words import agree, counted
from snl_pbem.views.board import render_svg, render_text

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="snl-pbem", description="A play-by-email referee for Postal Snakes and Ladders."
    )
    parser.add_argument("--version", action="version", version=f"snl-pbem {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    adj = sub.add_parser(
        "adjudicate",
        help="play a replay file and print the whole game as JSON",
        description="Read a replay file (JSON or TOML) and print every round as JSON: a "
        'postal game, or a classic one ("ruleset": "classic", RULES-CLASSIC.md).',
    )
    adj.add_argument("file", type=Path, help="the replay file")
    adj.add_argument(
        "--detail", action="store_true", help="add votes, NMR reasons and each move's path"
    )
    adj.add_argument(
        "--text", action="store_true", help="print a readable round-by-round account instead"
    )
    adj.set_defaults(handler=cmd_adjudicate)

    board = sub.add_parser(
        "board",
        help="show a board as a text grid (and as SVG with --svg)",
        description="Show the board of a board, replay or config file, or a bundled board.",
    )
    board.add_argument(
        "file",
        type=Path,
        help="a file holding a [board] table, or a bundled board's name (see: snl-pbem boards)",
    )
    board.add_argument("--svg", type=Path, metavar="OUT.svg", help="also draw it as SVG")
    board.add_argument("--game", help="in a config file, the game whose board to show")
    board.set_defaults(handler=cmd_board)

    bundled = sub.add_parser(
        "boards",
        help='list the bundled boards a config can name (board = "standard")',
        description="List the bundled boards: name, size, ladders, snakes, what each is.",
    )
    bundled.set_defaults(handler=cmd_boards)

    example = sub.add_parser(
        "example",
        help="show the bundled example game: its board and every round, adjudicated",
        description="Adjudicate the bundled example game and show the result.",
    )
    example.set_defaults(handler=cmd_example)

    demo = sub.add_parser(
        "demo",
        help="play a whole game by email on this machine (under a minute)",
        description="Run the real server on embedded defaults with scripted players.",
    )
    demo.add_argument(
        "--dir",
        type=Path,
        help="where to put the database and the mail (default: a new temporary folder)",
    )
    demo.add_argument("--players", type=int, default=4, help="2 to 8 (default 4)")
    demo.add_argument(
        "--seed", type=int, default=1, help="vary the players' choices (classic: the dice too)"
    )
    demo.add_argument(
        "--ruleset",
        choices=["postal", "classic"],
        default="postal",
        help="the postal game (default) or the classic dice-rolled game (RULES-CLASSIC.md)",
    )
    demo.set_defaults(handler=cmd_demo)
    add_commands(sub)
    seats.add_commands(sub)
    site.add_commands(sub)
    return parser


EXIT_TEMPORARY = 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    try:
        code: int = args.handler(args)
    except SnlError as exc:  # every problem meant for the user: one line, exit 2
        print(f"snl-pbem {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except DBAPIError as exc:
        if not is_lock_timeout(exc):
            raise
        print(
            f"snl-pbem {args.command}: the database is locked by another process (waited "
            f"{time.monotonic() - started:.1f} s); try again",
            file=sys.stderr,
        )
        return EXIT_TEMPORARY
    return code


def is_lock_timeout(exc: DBAPIError) -> bool:
    """SQLite's "database is locked" (its busy timeout ran out) or PostgreSQL's
    lock_timeout (SQLSTATE 55P03, lock_not_available)."""
    original = exc.orig
    if getattr(original, "sqlstate", None) == "55P03":
        return True
    text = str(original).lower()
    return "database is locked" in text or "database table is locked" in text


def _write(data: bytes | str) -> None:
    sys.stdout.buffer.write(data.encode("utf-8") if isinstance(data, str) else data)
    sys.stdout.flush()


def cmd_adjudicate(args: argparse.Namespace) -> int:
    data = read_document(args.file)
    ruleset = data.get("ruleset", DEFAULT_RULESET) if isinstance(data, Mapping) else None
    if ruleset == "classic":  # RULES-CLASSIC.md, "Offline replay of a classic game"
        classic = run_classic(parse_classic_replay(data, str(args.file)))
        text = classic_outcome_text(classic) if args.text else None
        _write(text or dump_json(classic_outcome_json(classic)))
        return 0
    if ruleset not in (None, DEFAULT_RULESET):
        raise ReplayError(f'{args.file}: ruleset: {ruleset!r} is not "postal" or "classic"')
    if isinstance(data, Mapping):
        data = {key: value for key, value in data.items() if key != "ruleset"}
    replay = parse_replay(data, str(args.file))
    outcome = run_replay(replay)
    if args.text:
        _write(render_outcome_text(replay, outcome))
    else:
        _write(dump_json(outcome_json(outcome, detail=args.detail)))
    if outcome.unplayed:
        print(
            f"snl-pbem adjudicate: the game ended in round {len(outcome.rounds)}; "
            f"{counted(outcome.unplayed, 'later round')} in the file "
            f"{agree(outcome.unplayed, 'was', 'were')} not played",
            file=sys.stderr,
        )
    return 0


def cmd_board(args: argparse.Namespace) -> int:
    boards = boards_in_file(args.file, args.game)
    if args.svg is not None and len(boards) > 1:
        raise CommandError(
            "the file holds several games' boards; choose one with --game "
            + "("
            + ", ".join(name for name, _ in boards)
            + ")"
        )
    for name, board in boards:
        if len(boards) > 1:
            _write(f"== {name} ==\n")
        _write(render_text(board))
        try:
            ruleset = get_ruleset(_ruleset_in_file(args.file, name))
        except GameSetupError as exc:
            raise CommandError(f"{args.file}: game {name}: {exc}") from None
        for note in ruleset.board_notes(board):
            _write(note + "\n")
    if args.svg is not None:
        name, board = boards[0]
        try:
            args.svg.write_text(render_svg(board, title=name), encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"{args.svg}: cannot write: {exc.strerror or exc}") from None
        print(f"SVG written to {args.svg}", file=sys.stderr)
    return 0


def cmd_boards(args: argparse.Namespace) -> int:
    lines = []
    for name in bundled_names():
        board = _bundled_board(name)
        size = f"{board.rows} x {board.columns}, last {board.last}"
        ladders, snakes = len(board.ladders), len(board.snakes)
        ladder_word = agree(ladders, "ladder") + ","
        counts = f"{ladders:>2} {ladder_word:<8} {snakes:>2} {agree(snakes, 'snake'):<6}"
        lines.append((name, size, counts, description(name)))
    name_width = max(len(line[0]) for line in lines)
    size_width = max(len(line[1]) for line in lines)
    for name, size, counts, text in lines:
        _write(f"{name:<{name_width}}  {size:<{size_width}}  {counts}  {text}\n")
    return 0


def boards_in_file(path: Path, game: str | None = None) -> list[tuple[str, Board]]:
    """The boards a file holds: a [board] table, a bare board table, or a config's games;
    or, when no such file exists, the bundled board of that name (snl_pbem.boards)."""
    try:
        where = locate(str(path), Path(), "the current folder")
    except UnknownBoard as exc:
        raise CommandError(str(exc)) from None
    if isinstance(where, str):
        return [(where, _bundled_board(where))]
    data = read_document(path)
    if not isinstance(data, Mapping):
        raise CommandError(f"{path}: expected a table holding a board")
    if "board" in data:
        return [(path.stem, _board(data["board"], path, "board"))]
    if isinstance(data.get("games"), list) or isinstance(data.get("games_dir"), str):
        found = []
        for where, entry in _config_games(path, data):
            if "board" not in entry:
                continue
            name = str(entry.get("id", where.rstrip(".: ")))
            if game is None or name == game:
                found.append((name, _board(entry["board"], path, f"{where}board")))
        if not found:
            raise CommandError(
                f"{path}: no game {game!r} with a board" if game else f"{path}: no game has a board"
            )
        return found
    if data and all(key in BOARD_KEYS for key in data):
        return [(path.stem, _board(data, path, "board"))]
    raise CommandError(f"{path}: no [board] table found (keys: {', '.join(map(str, data))})")


def _config_games(path: Path, data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A config's game tables, each with what its keys are prefixed with (``games[2].``,
    ``games.d/club-7.toml: ``): its ``[[games]]``, then
    those of the files in its ``games_dir`` (a board path in one is relative to the
    config file, as load_config reads it)."""
    games = data.get("games")
    found = [
        (f"games[{index}].", entry)
        for index, entry in enumerate(games if isinstance(games, list) else [])
        if isinstance(entry, Mapping)
    ]
    folder = data.get("games_dir")
    if isinstance(folder, str) and folder:
        try:
            files = game_files(path.parent / folder)
        except OSError as exc:
            raise CommandError(f"{path}: games_dir: {exc.strerror or exc}") from None
        for file in files:
            raw = read_document(file)
            entry = game_table(raw) if isinstance(raw, Mapping) else None
            if entry is not None:
                found.append((f"{Path(folder) / file.name}: ", entry))
    return found


def _ruleset_in_file(path: Path, game: str) -> str:
    """The ruleset a config file's game names (the default for a bare or bundled board)."""
    if not path.is_file():
        return DEFAULT_RULESET
    data = read_document(path)
    for _, entry in _config_games(path, data) if isinstance(data, Mapping) else ():
        if str(entry.get("id")) == game:
            return str(entry.get("ruleset", DEFAULT_RULESET))
    return DEFAULT_RULESET


def _board(spec: Any, path: Path, where: str) -> Board:
    if isinstance(spec, str):  # a config's board may name a file beside it, or a bundled board
        try:
            found = locate(spec, path.parent)
        except UnknownBoard as exc:
            raise CommandError(f"{path}: {where}: {exc}") from None
        if isinstance(found, str):
            return _bundled_board(found)
        target = found.resolve()
        data = read_document(target)
        if isinstance(data, Mapping) and "board" in data:
            data = data["board"]
        return _board(data, target, "board")
    try:
        return Board.from_mapping(spec, where)
    except BoardError as exc:
        raise CommandError(f"{path}: {exc}") from None


def _bundled_board(name: str) -> Board:
    try:
        return Board.from_mapping(bundled_table(name), "board")
    except BoardError as exc:  # never, as shipped: every bundled board is tested
        raise CommandError(f"(bundled board) {name}: {exc}") from None


EXAMPLE = "example-game.json"


def cmd_example(args: argparse.Namespace) -> int:
    source = resources.files("snl_pbem").joinpath("examples", EXAMPLE)
    replay = parse_replay(read_json_resource(source.read_bytes()), f"(bundled) {EXAMPLE}")
    outcome = run_replay(replay)
    _write(
        f"snl-pbem {__version__}: the bundled example game, adjudicated by the referee\n"
        f"Players: {', '.join(replay.players)}\n\nThe board (secret from players during a game):\n"
    )
    _write(render_text(replay.rules.board))
    _write("\nEvery round, as the referee sees it:\n")
    _write(render_outcome_text(replay, outcome))
    _write(
        "\nPlayers would have seen only the positions after each round (R19).\n"
        "Try: snl-pbem adjudicate FILE | snl-pbem board FILE --svg board.svg\n"
    )
    return 0


def read_json_resource(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"))


def cmd_demo(args: argparse.Namespace) -> int:
    if not 2 <= args.players <= 8:
        raise CommandError("--players must be between 2 and 8")
    return run_demo(args.dir, players=args.players, seed=args.seed, ruleset=args.ruleset)


if __name__ == "__main__":
    sys.exit(main())
