"""A replayed game as text for the referee: round by round, every move and why.

This is the referee's private view (dice, trapdoors, NMRs): never for players.
"""

from __future__ import annotations

from snl_pbem.offline.replay import Replay, ReplayOutcome
from snl_pbem.rules.outcome import ranked
from snl_pbem.rules.words import agree, counted


def render_outcome_text(replay: Replay, outcome: ReplayOutcome) -> str:
    """Every round: kind, trapdoors, each player's dice and path, NMRs; then the result."""
    names = replay.players
    width = max(len(n) for n in names)
    lines = []
    for rnd in outcome.rounds:
        kind = "one turn" if rnd.turns_ordered == 1 else "two turns"
        traps = ", ".join(map(str, rnd.trapdoors)) or "none"
        lines.append(f"Round {rnd.round} ({kind}) - trapdoors: {traps}")
        for name in names:
            steps = []
            for turn in rnd.turns:
                move = turn.moves[name]
                path = "".join(f", {e.kind.value} {e.start}->{e.end}" for e in move.events)
                steps.append(f"{move.die}: {move.start}->{move.target}{path} => {move.final}")
            note = ""
            if name in rnd.nmr:
                note = f"   [referee moved: {rnd.nmr[name]}]"
            nominated = rnd.nominations[name]
            vote = "-" if nominated is None else str(nominated)
            if name in rnd.defaulted:
                vote += " (default)"
            lines.append(
                f"  {name:<{width}}  " + "; ".join(steps) + f"   trapdoor vote {vote}{note}"
            )
        standings = ranked(rnd.positions)
        lines.append("  positions: " + ", ".join(f"{n} {p}" for n, p in standings))
    result = outcome.state.result
    if result is None:
        lines.append("No one has finished yet.")
    elif result.is_draw:
        lines.append(f"Draw between {', '.join(result.winners)} after turn {result.turn}.")
    else:
        lines.append(f"Winner: {result.winners[0]} after turn {result.turn}.")
    if outcome.unplayed:
        lines.append(
            f"({counted(outcome.unplayed, 'round')} in the file after the end "
            f"{agree(outcome.unplayed, 'was', 'were')} not played.)"
        )
    return "\n".join(lines) + "\n"
