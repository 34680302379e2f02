"""The postal game (RULES.md R1-R19) behind the ruleset seam (``snl_pbem.rules.ruleset``).

Everything the application needs to know about chosen dice, sets of six, nominations
and the trapdoor tally is here; the application stores and mails what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from snl_pbem.rules.board import Board
from snl_pbem.rules.errors import GameSetupError
from snl_pbem.rules.outcome import PlayerId
from snl_pbem.rules.postal.dice import (
    SET_SIZE,
    check_dice,
    lowest_legal_dice,
    open_values,
)
from snl_pbem.rules.postal.game import (
    GameRules,
    OrderSet,
    PostalState,
    RoundResult,
    adjudicate_round,
    player_report,
)
from snl_pbem.rules.postal.notes import no_orders_line
from snl_pbem.rules.postal.trapdoors import TrapdoorRule
from snl_pbem.rules.ruleset import (
    Adjudication,
    FinishedGame,
    GameState,
    OrderReading,
    Orders,
    OrderWord,
    RulesetSettings,
    StoredRound,
)
from snl_pbem.rules.words import joined, tr


def _values(values: tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def _postal_state(state: GameState) -> PostalState:
    return PostalState(
        players=state.players,
        positions=state.positions,
        played=state.played,
        rounds_played=state.rounds_played,
        turns_played=state.turns_played,
        played_from=state.played_from,
    )


class PostalRuleset:
    """Chosen dice, each value once per set of six (R6), and nominated trapdoors (R8-R10)."""

    name = "postal"
    option_keys: tuple[str, ...] = ()  # its options are the config's own keys (R7, R9)
    throws_dice = False
    history_public = False  # R19: told only after the game, and only if it reveals
    no_orders: str = tr("(no DICE or TRAPDOOR line).")
    order_words: tuple[OrderWord, ...] = (
        OrderWord(
            "DICE",
            "DICE 4             your die for each turn (DICE 4 2 when a round is two turns)",
            aliases=("DIE",),
        ),
        OrderWord("TRAPDOOR", "TRAPDOOR 37        optional: the space you nominate as a trapdoor"),
    )

    def refuse_word(self, word: str) -> str | None:
        if word == "ROLL":
            return tr("in this game you choose your dice: send them on a DICE line")
        return None

    def read_options(self, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        for key in data:
            raise GameSetupError(
                f"{prefix}{key}: not an option of the postal game (set ruleset = "
                '"classic" for the classic game\'s options)'
            )
        return {}

    def awaiting(self, settings: RulesetSettings, state: GameState) -> tuple[PlayerId, ...]:
        return state.players  # R17: everyone plays every turn

    def rules(self, settings: RulesetSettings) -> GameRules:
        try:
            rule = TrapdoorRule(settings.trapdoor_rule)
        except ValueError:
            raise GameSetupError(
                f"trapdoor_rule: {settings.trapdoor_rule!r} is not one of "
                + ", ".join(f'"{r.value}"' for r in TrapdoorRule)
            ) from None
        return GameRules(
            settings.board,
            double_from_round=settings.double_from_round,
            trapdoor_rule=rule,
            seed=settings.seed,
        )

    def check_settings(self, settings: RulesetSettings) -> None:
        self.rules(settings)

    def turns_in_round(self, settings: RulesetSettings, round_number: int) -> int:
        """R7: one turn before ``double_from_round``, two from it on."""
        return 1 if round_number < settings.double_from_round else 2

    def history_start(self, turns_played: int) -> int:
        """R6 looks back to the start of the current set of six, no further."""
        return turns_played - turns_played % SET_SIZE

    def read_orders(
        self,
        settings: RulesetSettings,
        state: GameState,
        player: PlayerId,
        orders: Orders,
        turns: int,
    ) -> OrderReading:
        last = settings.board.last
        if turns == 2:
            r16 = tr("the space your first move lands on counts as your nomination (rule 16)")
        else:
            r16 = tr("the space your move lands on counts as your nomination (rule 16)")
        line_problems: list[tuple[str, str]] = []
        nomination = orders.nomination
        if nomination is not None and not 1 <= nomination <= last:  # R8: a nomination is a space
            line_problems.append(
                (
                    f"TRAPDOOR {nomination}",
                    tr(
                        "there is no space {space}: the board's spaces are 1 to {last}, so "
                        "this is not a nomination; unless you send another, {rule}",
                        space=nomination,
                        last=last,
                        rule=r16,
                    ),
                )
            )
            nomination = None
        dice = orders.dice if orders.dice is not None else ()
        used = state.played[player]
        check = check_dice(used, dice, turns)  # R6, R18
        problems = tuple(p.text() for p in check.problems)  # stored as their English
        shown: list[str] = list(problems)
        if orders.dice is None and not orders.clear:
            shown.insert(
                0,
                tr(
                    "no DICE line: this message replaces your earlier orders as a whole, so "
                    "it has no dice"
                ),
            )
        if check.valid:
            open_label = tr("Still open in your set of six after these dice")
            still_open = open_values((*used, *dice))
        else:
            open_label = tr("Open in your current set of six")
            still_open = open_values(used)
        first_turn = state.turns_played + 1
        ack = {
            "dice_ok": check.valid and orders.dice is not None,
            "dice_sent": " ".join(map(str, dice)),
            "turns": list(zip(range(first_turn, first_turn + len(dice)), dice, strict=False)),
            "dice_problems": shown,
            "nomination_text": tr("space {space}", space=nomination)
            if nomination is not None
            else tr("none ({rule})", rule=r16),
            "open_label": open_label,
            "open_values": _values(still_open),
        }
        return OrderReading(
            valid=check.valid,
            dice=tuple(dice),
            nomination=nomination,
            problems=problems,
            line_problems=tuple(line_problems),
            ack=ack,
            summary="valid" if check.valid else "invalid dice",
        )

    def default_orders(
        self, settings: RulesetSettings, state: GameState, player: PlayerId, turns: int
    ) -> Orders:
        """R17: the lowest legal dice; the nomination follows the move (R16)."""
        return Orders(dice=lowest_legal_dice(state.played[player], turns))

    def adjudicate(
        self, settings: RulesetSettings, state: GameState, orders: Mapping[PlayerId, Orders]
    ) -> Adjudication:
        postal = _postal_state(state)
        order_sets = {
            name: OrderSet(order.dice or (), order.nomination)
            for name, order in orders.items()
            if not order.withdraw
        }
        result, after = adjudicate_round(
            self.rules(settings), postal, order_sets, keep_history=False
        )
        return Adjudication(
            round=result.round,
            turns=result.turns,
            positions=result.positions,
            result=result.result,
            nmr={name: str(nmr) for name, nmr in result.nmr.items()},
            tally={
                "nominations": dict(result.nominations),
                "defaulted": sorted(result.defaulted),
                "votes": {str(space): n for space, n in result.tally.votes.items()},
                "threshold": result.tally.threshold,
                "trapdoors": list(result.trapdoors),
                "by_lot": result.tally.by_lot,
            },
            after=GameState(
                players=after.players,
                positions=after.positions,
                played=after.played,
                rounds_played=after.rounds_played,
                turns_played=after.turns_played,
                played_from=after.played_from,
            ),
            details=result,
        )

    def player_view(
        self, settings: RulesetSettings, state: GameState, player: PlayerId
    ) -> Mapping[str, Any]:
        """R19 (``player_report``, the one place it is decided): the reader's own dice of
        the current set, and nothing of anyone else's; and the lowest legal dice for the
        next round, as an example the reader may edit."""
        own = GameState(  # the reader alone: R19 needs no one else, and each view costs O(1)
            players=(player,),
            positions={player: state.positions[player]},
            played={player: state.played[player]},
            rounds_played=state.rounds_played,
            turns_played=state.turns_played,
            played_from=state.played_from,
        )
        report = player_report(self.rules(settings), _postal_state(own), player)
        turns = report.next_round_turns or 1
        example = self.default_orders(settings, own, player, turns).dice or ()
        return {
            "used": _values(report.used),
            "open_values": _values(report.open),
            "example_dice": " ".join(map(str, example)),
        }

    def referee_view(self, adjudication: Adjudication) -> Mapping[str, Any]:
        """Every move, nomination and vote of the round (the referee's eyes only)."""
        result = adjudication.details
        assert isinstance(result, RoundResult)
        moves = []
        for name in sorted(result.positions):
            steps = []
            for turn in result.turns:
                move = turn.moves[name]
                path = "".join(f", {e}" for e in move.events)
                steps.append(
                    f"turn {turn.turn}: {move.die} {move.start}->{move.target}{path} = {move.final}"
                )
            nominated = result.nominations[name]
            vote = "-" if nominated is None else str(nominated)
            if name in result.defaulted:
                vote += " (default)"
            moves.append(f"{name}: " + "; ".join(steps) + f"; nominated {vote}")
        return {
            "turns_ordered": result.turns_ordered,
            "threshold": result.tally.threshold,
            "votes": ", ".join(f"{s}: {n}" for s, n in result.tally.votes.items()),
            "trapdoors": ", ".join(map(str, result.trapdoors)),
            "by_lot": result.tally.by_lot,
            "moves": moves,
        }

    def public_table(
        self, settings: RulesetSettings, state: GameState
    ) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
        return None  # R19: positions, and nothing else

    def history(self, rounds: Sequence[StoredRound]) -> tuple[str, ...]:
        """Every round's chosen dice and the trapdoors its tally made, for the reveal after
        the game (reveal_after_game): ``  Round 3: ann 4; bob 6 (trapdoors: 37)``."""
        lines: list[str] = [tr("Round by round (dice per turn; trapdoors active that round):")]
        for round_ in rounds:
            dice = round_.dice
            played = "; ".join(f"{n} {' '.join(map(str, dice[n]))}" for n in sorted(dice))
            traps = list(round_.tally.get("trapdoors") or ()) if round_.tally else []
            shown = ", ".join(map(str, traps)) or tr("none")
            said = tr(
                "Round {round}: {dice} (trapdoors: {trapdoors})",
                round=round_.number,
                dice=played,
                trapdoors=shown,
            )
            lines.append(joined("", ("  ", said)))
        return tuple(lines)

    def career(self, games: Sequence[FinishedGame]) -> Mapping[str, Any]:
        return {}  # the postal game keeps no statistics across games

    def board_notes(self, board: Board) -> tuple[str, ...]:
        return (no_orders_line(board),)


POSTAL = PostalRuleset()
