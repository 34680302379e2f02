"""What the postal rules say of a board before play, for the referee checking it."""

from __future__ import annotations

from snl_pbem.rules.board import Board, EventKind
from snl_pbem.rules.geometry import LADDER_MARK, SNAKE_MARK, Position
from snl_pbem.rules.postal.dice import SET_SIZE, lowest_legal_dice
from snl_pbem.rules.words import counted


def no_orders_line(board: Board) -> str:
    """Where the no-orders default (R17: the lowest open die each turn, so 1 to 6 in the
    first set of six) takes a player who never writes, turn by turn, with no trapdoor
    under them: ``No orders (R17): a player who never writes plays 1 2 3 4 5 6 in the
    first six turns and stands at 38 (1^38), 40, ...``.

    Each position names the snakes and ladders that took the player there; a position
    at or past the last space ends the game there (R5).
    """
    dice = lowest_legal_dice((), SET_SIZE)
    position: Position = 0
    steps = []
    for die in dice:
        outcome = board.resolve(position + die)
        position = outcome.final
        marks = [
            f"{e.start}{LADDER_MARK if e.kind is EventKind.LADDER else SNAKE_MARK}{e.end}"
            for e in outcome.events
        ]
        steps.append(f"{position}" + (f" ({', '.join(marks)})" if marks else ""))
        if position >= board.last:
            steps[-1] += f", at or past the last space {board.last}: the game ends"
            break
    played = " ".join(map(str, dice[: len(steps)]))
    return (
        f"No orders (R17): a player who never writes plays {played} in the first "
        f"{'six turns' if len(steps) == SET_SIZE else counted(len(steps), 'turn')} and stands at "
        f"{', '.join(steps)} (with no trapdoor under them)"
    )
