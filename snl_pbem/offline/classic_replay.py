"""Replay files of the classic game (RULES-CLASSIC.md, "Offline replay of a classic game").

A file with ``"ruleset": "classic"`` holds a board, the players, the options at top
level, and either ``rolls`` (each player's throws in the order they make them) or a
``seed`` for the server's dice (C11). Every problem with the file is a ReplayError
whose one line names the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from snl_pbem.errors import ReplayError
from snl_pbem.rules import Board, BoardError, GameSetupError, PlayerId
from snl_pbem.rules.boardspec import whole_number
from snl_pbem.rules.classic import (
    OPTION_KEYS,
    ClassicOptions,
    ClassicRound,
    ClassicState,
    Throws,
    board_problems,
    parse_options,
    play_round,
    seeded_throws,
)
from snl_pbem.rules.words import counted

CLASSIC_KEYS = ("ruleset", "board", "players", "rolls", "seed", *OPTION_KEYS)
MAX_ROUNDS = 10_000
"""A seeded game still going after this many rounds stops there, its result null (a board
whose end cannot be reached; with ``rolls`` the lists end play)."""


@dataclass(frozen=True)
class ClassicReplay:
    board: Board
    options: ClassicOptions
    players: tuple[PlayerId, ...]
    rolls: Mapping[PlayerId, tuple[tuple[int, ...], ...]] | None
    """Each player's throws in order; None: the server's dice from ``seed``."""
    seed: int


@dataclass(frozen=True)
class ClassicOutcome:
    rounds: tuple[ClassicRound, ...]
    state: ClassicState
    options: ClassicOptions


def parse_classic_replay(data: Mapping[str, Any], source: str = "replay") -> ClassicReplay:
    def fail(key: str, message: str) -> ReplayError:
        return ReplayError(f"{source}: {key}: {message}")

    for key in data:
        if key not in CLASSIC_KEYS:
            raise fail(key, "unknown key (expected: " + ", ".join(CLASSIC_KEYS) + ")")
    for key in ("board", "players"):
        if key not in data:
            raise fail(key, "missing")
    try:
        board = Board.from_mapping(data["board"], "board")
        options = parse_options(data)
        problems = board_problems(board)
        if problems:
            raise fail("board", problems[0])
        players = data["players"]
        if not isinstance(players, list) or not all(isinstance(p, str) for p in players):
            raise fail("players", "expected a list of player names")
        ClassicState.start(players)
    except (BoardError, GameSetupError) as exc:
        raise ReplayError(f"{source}: {exc}") from None
    seed = whole_number(data.get("seed", 0))
    if seed is None:
        raise fail("seed", f"{data['seed']!r} is not a whole number")
    rolls = None
    if "rolls" in data:
        raw = data["rolls"]
        if not isinstance(raw, Mapping):
            raise fail("rolls", "expected a table of player = list of throws")
        rolls = {}
        for name, throws in raw.items():
            if name not in players:
                raise fail(f"rolls.{name}", f"{name!r} is not one of the players")
            if not isinstance(throws, list):
                raise fail(f"rolls.{name}", "expected a list of throws")
            rolls[name] = tuple(
                _throw(t, f"rolls.{name}[{i}]", options, fail) for i, t in enumerate(throws)
            )
    return ClassicReplay(board, options, tuple(players), rolls, seed)


def _throw(raw: Any, key: str, options: ClassicOptions, fail: Any) -> tuple[int, ...]:
    dice = options.dice
    values = raw if isinstance(raw, list) else [raw]
    if len(values) != dice.count:
        raise fail(key, f"{raw!r} is not a throw of {counted(dice.count, 'die', 'dice')} ({dice})")
    throw = []
    for i, value in enumerate(values):
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if number is None or not 1 <= number <= dice.sides:
            where = f"{key}[{i}]" if isinstance(raw, list) else key
            raise fail(where, f"{value!r} is not a die value 1 to {dice.sides} ({dice})")
        throw.append(number)
    return tuple(throw)


def run_classic(replay: ClassicReplay) -> ClassicOutcome:
    """Play until the game ends, a player must throw and has no throw left (that round is
    left out), or MAX_ROUNDS."""
    state = ClassicState.start(replay.players)
    played: list[ClassicRound] = []
    queues = {p: list(replay.rolls.get(p, ())) for p in replay.players} if replay.rolls else {}

    def from_file(player: PlayerId) -> tuple[int, ...] | None:
        queue = queues.get(player)
        return queue.pop(0) if queue else None

    while not state.over and (replay.rolls is not None or len(played) < MAX_ROUNDS):
        throws: Throws = (
            from_file
            if replay.rolls is not None
            else seeded_throws(replay.seed, state.rounds_played + 1, replay.options.dice)
        )
        result = play_round(replay.board, replay.options, state, throws)
        if result is None:
            break
        played.append(result[0])
        state = result[1]
    return ClassicOutcome(tuple(played), state, replay.options)


def classic_outcome_json(outcome: ClassicOutcome) -> dict[str, Any]:
    state = outcome.state
    return {
        "rounds": [r.as_json() for r in outcome.rounds],
        "result": state.result(outcome.options),
        "stats": {p: state.record(p).as_json() for p in state.players},
    }


def classic_outcome_text(outcome: ClassicOutcome) -> str:
    """The same game for a person: each round's throws, then the result."""
    lines = []
    for rnd in outcome.rounds:
        lines.append(f"Round {rnd.round}")
        for t in rnd.throws:
            what = f" ({', '.join(t.events)})" if t.events else ""
            lines.append(
                f"  {t.player} threw {'+'.join(map(str, t.dice))}: {t.start} -> {t.end}{what}"
            )
        lines.append("  positions: " + ", ".join(f"{p} {at}" for p, at in rnd.positions.items()))
    result = outcome.state.result(outcome.options)
    if result is None:
        lines.append("No result: the game had not ended.")
    elif "winner" in result:
        lines.append(f"Winner: {result['winner']}")
    else:
        lines.append(
            "Finishing order: "
            + ", ".join(
                f"{o['player']} (round {o['round']}, {counted(o['rolls'], 'roll')})"
                for o in result["order"]
            )
        )
    return "\n".join(lines) + "\n"
