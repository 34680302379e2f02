"""A toy ruleset, in the test tree only, to show the ruleset seam carries a whole game:
every player moves 1 each round, 2 when they sent orders (any orders); the first on the
last space wins. It has no trapdoors: a TRAPDOOR line is refused, by the ruleset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snl_pbem.mail.render import add_template_folder
from snl_pbem.rules.board import Board
from snl_pbem.rules.outcome import GameResult, Move, PlayerId, TurnResult
from snl_pbem.rules.ruleset import (
    Adjudication,
    GameState,
    OrderReading,
    Orders,
    OrderWord,
    RulesetSettings,
    StoredRound,
    register,
)

TEMPLATES = Path(__file__).parent / "data" / "rulesets"


class ToyRuleset:
    name = "toy"
    option_keys = ()
    throws_dice = False
    history_public = False
    no_orders = "(no DICE line)."
    order_words: tuple[OrderWord, ...] = (
        OrderWord(
            "DICE", "DICE 4             any DICE line moves you 2 this round", aliases=("DIE",)
        ),
    )

    def refuse_word(self, word: str) -> str | None:
        refused = {"TRAPDOOR": "the toy game has no trapdoors", "ROLL": "the toy game has no ROLL"}
        return refused.get(word)

    def read_options(self, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        return {}

    def awaiting(self, settings: RulesetSettings, state: GameState) -> tuple[PlayerId, ...]:
        return state.players

    def check_settings(self, settings: RulesetSettings) -> None:
        pass

    def turns_in_round(self, settings: RulesetSettings, round_number: int) -> int:
        return 1

    def history_start(self, turns_played: int) -> int:
        return turns_played  # no dice history: positions are the whole state

    def read_orders(
        self,
        settings: RulesetSettings,
        state: GameState,
        player: PlayerId,
        orders: Orders,
        turns: int,
    ) -> OrderReading:
        return OrderReading(
            valid=True,
            dice=orders.dice or (),
            nomination=None,
            problems=(),
            line_problems=(),
            ack={"steps": 2},
            summary="valid",
        )

    def default_orders(
        self, settings: RulesetSettings, state: GameState, player: PlayerId, turns: int
    ) -> Orders:
        return Orders()

    def adjudicate(
        self, settings: RulesetSettings, state: GameState, orders: Mapping[PlayerId, Orders]
    ) -> Adjudication:
        last = settings.board.last
        turn = state.turns_played + 1
        moves = {}
        for name in state.players:
            steps = 2 if name in orders else 1
            start = state.positions[name]
            moves[name] = Move(steps, start, start + steps, min(start + steps, last), ())
        positions = {name: move.final for name, move in moves.items()}
        winners = tuple(sorted(n for n, p in positions.items() if p == last))
        return Adjudication(
            round=state.rounds_played + 1,
            turns=(TurnResult(turn, moves),),
            positions=positions,
            result=GameResult(winners, turn) if winners else None,
            nmr={n: "no orders: moved 1" for n in state.players if n not in orders},
            tally={},
            after=GameState(
                players=state.players,
                positions=positions,
                played=dict.fromkeys(state.players, ()),
                rounds_played=state.rounds_played + 1,
                turns_played=turn,
                played_from=turn,
            ),
            details="toy",
        )

    def player_view(
        self, settings: RulesetSettings, state: GameState, player: PlayerId
    ) -> Mapping[str, Any]:
        return {"steps": 2}

    def referee_view(self, adjudication: Adjudication) -> Mapping[str, Any]:
        return {
            "moves": [
                f"{name}: {move.start} -> {move.final}"
                for turn in adjudication.turns
                for name, move in sorted(turn.moves.items())
            ]
        }

    def public_table(
        self, settings: RulesetSettings, state: GameState
    ) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
        return None

    def history(self, rounds: Sequence[StoredRound]) -> tuple[str, ...]:
        return ("The toy game, round by round:", *(f"  Round {r.number}" for r in rounds))

    def career(self, games):
        return {}

    def board_notes(self, board: Board) -> tuple[str, ...]:
        return (f"Toy game: {board.last} rounds at most",)


def install() -> ToyRuleset:
    """Register the toy ruleset and its templates (idempotent)."""
    add_template_folder(str(TEMPLATES))
    toy = ToyRuleset()
    register(toy)
    return toy
