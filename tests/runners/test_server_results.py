"""serve acts on the typed ingest result (issue 22): round 1 planned when a message started
a game, the early close checked for the one game a message made all in, and nothing read
from the result's words."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mailhelpers import T0

from snl_pbem.app.intake import IngestResult
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.runners.server import Server


class Watched(RoundScheduler):
    """The real scheduler, noting what serve asks of it."""

    def __init__(self) -> None:  # nothing to plan: only the calls are looked at
        self.asked: list[tuple[str, str | None]] = []

    def rebuild(self) -> list:  # type: ignore[override]
        self.asked.append(("rebuild", None))
        return []

    def check_all_in(self, game_name: str) -> datetime | None:
        self.asked.append(("check_all_in", game_name))
        return T0


def test_serve_plans_what_the_result_says_and_no_more(tmp_path: Path) -> None:
    server = Server(tmp_path / "none.toml")
    server.rounds = Watched()
    said = [
        IngestResult(1, "processed", "the game started", game="g1"),  # words, not a flag
        IngestResult(2, "processed", "orders for round 1", game="g1"),
        IngestResult(3, "processed", "joined", game="g2", started=True),
        IngestResult(4, "processed", "orders for round 1", game="g3", all_in=True),
        IngestResult(5, "rejected", "orders", game="g4", all_in=True, started=True),
    ]
    for result in said:
        server._after_ingest(result)
    assert server.rounds.asked == [("rebuild", None), ("check_all_in", "g3")]
