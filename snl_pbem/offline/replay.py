"""Replay files (DESIGN.md, "Offline adjudication"): read one, play it, write the JSON result.

A replay file holds a board, the players, and each round's orders. Every
problem with the file is a :class:`ReplayError` whose one-line message names
the file and the key; invalid *orders* are not errors: the referee applies
R17/R18 to them exactly as it would to emailed orders.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snl_pbem.errors import ReplayError
from snl_pbem.rules import (
    Board,
    BoardError,
    GameRules,
    GameSetupError,
    OrderSet,
    PlayerId,
    PostalState,
    RoundResult,
    TrapdoorRule,
    adjudicate_round,
)
from snl_pbem.rules.boardspec import whole_number

REPLAY_KEYS = ("board", "players", "double_from_round", "rounds", "trapdoor_rule", "seed")
ORDER_KEYS = ("dice", "trapdoor")
MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Replay:
    """A parsed replay file: the game's rules, its players and each round's orders."""

    rules: GameRules
    players: tuple[PlayerId, ...]
    rounds: tuple[Mapping[PlayerId, OrderSet | None], ...]


@dataclass(frozen=True)
class ReplayOutcome:
    """The rounds played (rounds after the end are not) and the final state."""

    rounds: tuple[RoundResult, ...]
    state: PostalState
    unplayed: int
    """Rounds in the file after the game ended."""


def read_document(path: Path) -> Any:
    """A JSON or TOML file as plain data (by extension; otherwise JSON, then TOML)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ReplayError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB")
        raw = path.read_bytes()
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ReplayError(f"{path}: not UTF-8 text") from None
    suffix = path.suffix.lower()
    parsers = [_toml, _json] if suffix == ".toml" else [_json, _toml]
    if suffix in (".json", ".toml"):
        parsers = parsers[:1]
    errors = []
    for parse in parsers:
        try:
            return parse(text)
        except ValueError as exc:
            errors.append(str(exc))
    raise ReplayError(f"{path}: " + " / ".join(errors))


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None


def _toml(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from None


def parse_replay(data: Any, source: str = "replay") -> Replay:
    """Check replay data (already parsed from JSON or TOML)."""

    def fail(key: str, message: str) -> ReplayError:
        return ReplayError(f"{source}: {key}: {message}")

    if not isinstance(data, Mapping):
        raise ReplayError(f"{source}: expected a table with board, players and rounds")
    for key in data:
        if key not in REPLAY_KEYS:
            raise fail(key, "unknown key (expected: " + ", ".join(REPLAY_KEYS) + ")")
    for key in ("board", "players"):
        if key not in data:
            raise fail(key, "missing")
    try:
        board = Board.from_mapping(data["board"], "board")
    except BoardError as exc:
        raise ReplayError(f"{source}: {exc}") from None

    players = data["players"]
    if not isinstance(players, list) or not all(isinstance(p, str) for p in players):
        raise fail("players", "expected a list of player names")
    try:
        PostalState.start(players)
    except GameSetupError as exc:
        raise ReplayError(f"{source}: {exc}") from None

    double = whole_number(data.get("double_from_round", 7))
    if double is None or double < 1:
        raise fail("double_from_round", f"{data['double_from_round']!r} is not a round number")
    try:
        rule = TrapdoorRule(data.get("trapdoor_rule", "all"))
    except ValueError:
        raise fail(
            "trapdoor_rule", f"{data['trapdoor_rule']!r} is not 'all' or 'most-voted'"
        ) from None
    seed = whole_number(data.get("seed", 0))
    if seed is None:
        raise fail("seed", f"{data['seed']!r} is not a whole number")

    raw_rounds = data.get("rounds", [])
    if not isinstance(raw_rounds, list):
        raise fail("rounds", "expected a list of rounds")
    rounds = tuple(
        _round(raw, f"rounds[{i}]", set(players), fail) for i, raw in enumerate(raw_rounds)
    )
    rules = GameRules(board, double_from_round=double, trapdoor_rule=rule, seed=seed)
    return Replay(rules, tuple(players), rounds)


def _round(raw: Any, key: str, players: set[str], fail: Any) -> dict[PlayerId, OrderSet | None]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise fail(key, "expected a table of player = orders")
    orders: dict[PlayerId, OrderSet | None] = {}
    for name, order in raw.items():
        where = f"{key}.{name}"
        if name not in players:
            raise fail(where, f"{name!r} is not one of the players")
        if order is None:
            orders[name] = None
            continue
        if not isinstance(order, Mapping):
            raise fail(where, "expected a table with dice and an optional trapdoor, or null")
        for order_key in order:
            if order_key not in ORDER_KEYS:
                raise fail(f"{where}.{order_key}", "unknown key (expected dice, trapdoor)")
        dice = order.get("dice", [])
        if not isinstance(dice, list):
            raise fail(f"{where}.dice", f"expected a list of dice, got {dice!r}")
        values = []
        for i, die in enumerate(dice):
            value = whole_number(die)
            if value is None:
                raise fail(f"{where}.dice[{i}]", f"{die!r} is not a whole number")
            values.append(value)
        trapdoor = order.get("trapdoor")
        if trapdoor is not None:
            trapdoor = whole_number(trapdoor)
            if trapdoor is None:
                raise fail(f"{where}.trapdoor", f"{order['trapdoor']!r} is not a space number")
        orders[name] = OrderSet(tuple(values), trapdoor)
    return orders


def run_replay(replay: Replay) -> ReplayOutcome:
    """Play every round of the file, stopping when the game ends (R5)."""
    state = PostalState.start(replay.players)
    played: list[RoundResult] = []
    for orders in replay.rounds:
        if state.result is not None:
            break
        result, state = adjudicate_round(replay.rules, state, orders, keep_history=False)
        played.append(result)
    return ReplayOutcome(tuple(played), state, len(replay.rounds) - len(played))


def outcome_json(outcome: ReplayOutcome, *, detail: bool = False) -> dict[str, Any]:
    """The JSON document of DESIGN.md; ``detail`` adds votes, reasons and each move's path."""
    rounds = []
    for rnd in outcome.rounds:
        entry: dict[str, Any] = {
            "round": rnd.round,
            "nominations": dict(rnd.nominations),
            "trapdoors": list(rnd.trapdoors),
            "nmr": sorted(rnd.nmr),
            "turns": [
                {"turn": t.turn, "dice": t.dice, "positions": t.positions} for t in rnd.turns
            ],
            "positions": dict(rnd.positions),
        }
        if detail:
            entry["votes"] = {str(s): n for s, n in rnd.tally.votes.items()}
            entry["vote_threshold"] = rnd.tally.threshold
            entry["nmr_reasons"] = {name: str(nmr) for name, nmr in rnd.nmr.items()}
            entry["nominations_defaulted"] = sorted(rnd.defaulted)
            for turn_json, turn in zip(entry["turns"], rnd.turns, strict=True):
                turn_json["moves"] = {
                    name: {
                        "start": m.start,
                        "target": m.target,
                        "final": m.final,
                        "events": [str(e) for e in m.events],
                    }
                    for name, m in turn.moves.items()
                }
        rounds.append(entry)
    result = outcome.state.result
    result_json: dict[str, Any] | None = None
    if result is not None:
        result_json = (
            {"draw": list(result.winners)} if result.is_draw else {"winner": result.winners[0]}
        )
    return {"rounds": rounds, "result": result_json}


def dump_json(document: Any) -> bytes:
    """Sorted keys, stable layout: the same document is the same bytes every time."""
    text = json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False)
    return (text + "\n").encode("utf-8")
