"""The classic game behind the ruleset seam (snl_pbem.rules.ruleset): the server throws
everyone's dice at the close from the game's seed (C11); players need send nothing, and a
ROLL line says "I am here" (C12). Nothing is secret: reports show every throw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from snl_pbem.rules.board import Board
from snl_pbem.rules.classic.game import (
    BOUNCE,
    BUMPED,
    ENTERED,
    FINISHED,
    FORFEIT,
    LADDER,
    NO_MOVE,
    SNAKE,
    WAITING,
    ClassicState,
    Throw,
    play_round,
    seeded_throws,
)
from snl_pbem.rules.classic.options import (
    OPTION_KEYS,
    ClassicOptions,
    Finish,
    board_problems,
    parse_options,
)
from snl_pbem.rules.errors import GameSetupError
from snl_pbem.rules.outcome import GameResult, Move, PlayerId, TurnResult
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

_SAID = {
    LADDER: tr("up a ladder"),
    SNAKE: tr("down a snake"),
    BOUNCE: tr("bounced back off the end"),
    NO_MOVE: tr("too high to move"),
    WAITING: tr("waiting to enter"),
    ENTERED: tr("entered"),
    FORFEIT: tr("third maximum in a row: forfeit"),
    FINISHED: tr("FINISHED"),
}


def throw_line(throw: Throw) -> str:
    """``ann threw 4+6: 12 -> 31 (up a ladder, bumped bob)``: one throw, in play order
    (in the reader's language: the reports show it to every player)."""
    said = [
        tr("bumped {player} back to the start", player=e[len(BUMPED) :])
        if e.startswith(BUMPED)
        else _SAID[e]
        for e in throw.events
    ]
    dice = "+".join(map(str, throw.dice))
    if said:
        return tr(
            "{player} threw {dice}: {start} -> {end} ({events})",
            player=throw.player,
            dice=dice,
            start=throw.start,
            end=throw.end,
            events=joined(tr(", "), said),
        )
    return tr(
        "{player} threw {dice}: {start} -> {end}",
        player=throw.player,
        dice=dice,
        start=throw.start,
        end=throw.end,
    )


class ClassicRuleset:
    """RULES-CLASSIC.md C1-C12 with the game's options."""

    name = "classic"
    option_keys: tuple[str, ...] = OPTION_KEYS
    throws_dice = True
    history_public = True  # C10: every throw is in every report
    no_orders: str = tr(
        "(no ROLL line); none are needed: the server throws for you at the deadline."
    )
    order_words: tuple[OrderWord, ...] = (
        OrderWord("ROLL", 'ROLL               optional: "I am here" (the server throws the dice)'),
    )

    def refuse_word(self, word: str) -> str | None:
        """C12: "Dice values sent by a player are refused with a reply that explains the
        server throws"; the classic game has no trapdoors."""
        if word == "DICE":
            return tr(
                "in this game the server throws everyone's dice at the deadline (rules C11 "
                "and C12): you cannot choose them; send ROLL to say you are here, or nothing"
            )
        if word == "TRAPDOOR":
            return tr("this game has no trapdoors")
        return None

    def read_options(self, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        for key in data:
            if key not in OPTION_KEYS:
                raise GameSetupError(
                    f"{prefix}{key}: not an option of the classic game (its options: "
                    + ", ".join(OPTION_KEYS)
                    + ")"
                )
        return parse_options(data, prefix).as_mapping()

    def options(self, settings: RulesetSettings) -> ClassicOptions:
        return parse_options(settings.options)

    def check_settings(self, settings: RulesetSettings) -> None:
        self.options(settings)
        problems = board_problems(settings.board)
        if problems:
            raise GameSetupError("board: " + "; ".join(problems))

    def turns_in_round(self, settings: RulesetSettings, round_number: int) -> int:
        return 1  # a round is one turn for every player still racing (C1)

    def history_start(self, turns_played: int) -> int:
        return turns_played  # no dice history: the kept state is the whole state

    def state(self, stored: GameState) -> ClassicState:
        """The classic state kept with the last round (the start before round 1)."""
        kept = stored.extra.get("state")
        return ClassicState.from_json(kept) if kept else ClassicState.start(stored.players)

    def awaiting(self, settings: RulesetSettings, state: GameState) -> tuple[PlayerId, ...]:
        finished = self.state(state).finished
        return tuple(p for p in state.players if p not in finished)

    def read_orders(
        self,
        settings: RulesetSettings,
        state: GameState,
        player: PlayerId,
        orders: Orders,
        turns: int,
    ) -> OrderReading:
        """C12: ROLL is the order (dice and trapdoors are refused before, refuse_word)."""
        finished = self.state(state).finished.get(player)
        valid = orders.roll or finished is not None  # a finished piece throws no more (C9)
        problems = () if valid else (tr("no ROLL line (the server throws for you anyway)"),)
        return OrderReading(
            valid=valid,
            dice=(),
            nomination=None,
            problems=problems,
            line_problems=(),
            ack={"rolled": orders.roll, "finished": finished},
            summary="finished" if finished is not None else "ROLL" if valid else "no ROLL",
        )

    def default_orders(
        self, settings: RulesetSettings, state: GameState, player: PlayerId, turns: int
    ) -> Orders:
        return Orders(roll=True)  # C12: the server throws for everyone either way

    def adjudicate(
        self, settings: RulesetSettings, state: GameState, orders: Mapping[PlayerId, Orders]
    ) -> Adjudication:
        """C1-C11: the round's throws come from the game's seed and the round's number
        alone (C11), so a rolled-back round closed again throws the same."""
        options = self.options(settings)
        before = self.state(state)
        number = before.rounds_played + 1
        played = play_round(
            settings.board, options, before, seeded_throws(settings.seed, number, options.dice)
        )
        assert played is not None  # the server's dice never run out
        round_, after = played
        totals = dict.fromkeys(state.players, 0)
        for throw in round_.throws:
            totals[throw.player] += sum(throw.dice)
        turn = state.turns_played + 1
        moves = {
            p: Move(
                totals[p],
                before.positions[p],
                before.positions[p] + totals[p],
                after.positions[p],
                (),
            )
            for p in state.players
        }
        result = None
        if after.over:
            summary = after.result(options)
            result = GameResult(
                (next(iter(after.finished)),),
                turn,
                summary=summary if options.finish is Finish.ALL else None,
            )
        record = {"state": after.as_json(), "round": round_.as_json()}
        return Adjudication(
            round=number,
            turns=(TurnResult(turn, moves),),
            positions=dict(after.positions),
            result=result,
            nmr={},
            tally={},
            after=GameState(
                players=state.players,
                positions=dict(after.positions),
                played=dict.fromkeys(state.players, ()),
                rounds_played=state.rounds_played + 1,
                turns_played=turn,
                played_from=turn,
                extra=record,
            ),
            details=round_,
            record=record,
        )

    def _view(self, state: GameState) -> dict[str, Any]:
        """The last round's throws and everyone's counts (C10): nothing is secret."""
        classic = self.state(state)
        last = state.extra.get("round")
        throws = [throw_line(_throw(t)) for t in last["throws"]] if last else []
        counts = [
            {"name": p, **classic.record(p).as_json(), "finished": classic.finished.get(p)}
            for p in classic.players
        ]
        return {"throws": throws, "counts": counts, "finished": dict(classic.finished)}

    def player_view(
        self, settings: RulesetSettings, state: GameState, player: PlayerId
    ) -> Mapping[str, Any]:
        view = self._view(state)
        view["mine"] = next((c for c in view["counts"] if c["name"] == player), None)
        return view

    def referee_view(self, adjudication: Adjudication) -> Mapping[str, Any]:
        return self._view(adjudication.after)

    def public_table(
        self, settings: RulesetSettings, state: GameState
    ) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
        """C10's counts, a row per player (the web sheet's statistics panel)."""
        bump = bool(settings.options.get("bump"))
        header: tuple[str, ...] = ("Player", "Rolls", "Ladders", "Snakes")
        header += ("Bumps given", "Bumps taken") if bump else ()
        rows = []
        for c in self._view(state)["counts"]:
            row: tuple[str, ...] = (c["name"], str(c["rolls"]), str(c["ladders"]), str(c["snakes"]))
            row += (str(c["bumps_given"]), str(c["bumps_taken"])) if bump else ()
            finished = c["finished"]
            rows.append((*row, f"round {finished}" if finished else ""))
        return (*header, "Finished"), tuple(rows)

    def history(self, rounds: Sequence[StoredRound]) -> tuple[str, ...]:
        lines: list[str] = [tr("Round by round (every throw):")]
        for round_ in rounds:
            record = round_.record or {}
            lines.append(joined("", ("  ", tr("Round {round}:", round=round_.number))))
            lines.extend(
                joined("", ("    ", throw_line(_throw(t))))
                for t in record.get("round", {}).get("throws", [])
            )
        return tuple(lines)

    def career(self, games: Sequence[FinishedGame]) -> Mapping[str, Any]:
        """The web sheet's statistics panel: games, wins, the fastest win in rounds, ladders
        climbed and snakes slid, across every finished classic game (web: "总局数、赢的局数、
        最快几回合获胜和累计爬梯滑蛇次数")."""
        wins, fastest, ladders, snakes = 0, None, 0, 0
        for game in games:
            state = game.record.get("state") or {}
            counts = (state.get("records") or {}).get(game.player) or {}
            ladders += int(counts.get("ladders", 0))
            snakes += int(counts.get("snakes", 0))
            order = game.result.get("order") or [{}]
            winner = game.result.get("winner") or order[0].get("player")
            if winner == game.player:
                wins += 1
                finished = dict((p, r) for p, r in state.get("finished") or [])
                rounds = finished.get(game.player)
                if rounds is not None:
                    fastest = rounds if fastest is None else min(fastest, rounds)
        return {
            "games": len(games),
            "wins": wins,
            "fastest_win": fastest,
            "ladders": ladders,
            "snakes": snakes,
        }

    def board_notes(self, board: Board) -> tuple[str, ...]:
        problems = board_problems(board)
        if problems:
            return tuple(f"Not for the classic game: {p}" for p in problems)
        return (f"Fit for the classic game: nothing on the last space {board.last} (C4).",)


def _throw(data: Mapping[str, Any]) -> Throw:
    return Throw(
        data["player"], tuple(data["dice"]), data["from"], data["to"], tuple(data["events"])
    )


CLASSIC = ClassicRuleset()
