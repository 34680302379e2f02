"""serve acts on the typed ingest result (issue 22): round 1 planned when a message started
a game, the early close checked for the one game a message made all in, and nothing read
from the result's words; and at start, the early close checked for each game that closes
when all are in (no result tells of a round made all in while it was down)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from mailhelpers import T0

from snl_pbem.app.games import sync_games
from snl_pbem.app.intake import IngestResult, ingest
from snl_pbem.config import load_config
from snl_pbem.runners.scheduler import RoundScheduler
from snl_pbem.runners.server import Server


class Watched(RoundScheduler):
    """The real scheduler, noting what serve asks of it."""

    def __init__(self) -> None:  # nothing to plan: only the calls are looked at
        self.asked: list[tuple[str, str | None]] = []

    def rebuild(self) -> list:  # type: ignore[override]
        self.asked.append(("rebuild", None))
        return []

    def replan(self, names=(), ids=()) -> list:  # type: ignore[override]
        self.asked.append(("replan", ",".join(names)))
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
    assert server.rounds.asked == [("replan", "g2"), ("check_all_in", "g3")]  # that game only


SECOND_GAME = """
[[games]]
id = "g2"
title = "Second game"
board = { snakes = { "47" = 26 }, ladders = { "4" = 14 } }
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  { name = "di", email = "di@example.org", key = "di-key-1234" },
  { name = "ed", email = "ed@example.org", key = "ed-key-1234" },
]
"""


def test_start_checks_all_in_for_each_game_that_closes_when_all_are_in(
    intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round made all in while the server was down (orders read by another process, or
    the mail start() reads) has no result for serve to act on: start() checks each game
    that closes when all are in, after rebuild, and plans its early close; the other
    games are not asked about."""
    db, config = intake
    text = config.path.read_text()
    config.path.write_text(
        text.replace('round_length = "3d"', 'round_length = "3d"\nclose_when_all_in = true', 1)
        + SECOND_GAME
    )
    config = load_config(config.path)
    sync_games(db, config, T0)
    for who in ("ann", "bob", "cy"):  # all in, and no server running to hear of it
        raw = (
            f"From: {who}@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
            f"Message-ID: <{who}@example.org>\r\n\r\nKEY {who}-key-123\r\nDICE 4\r\n"
        ).encode()
        assert ingest(db, config, raw, T0, "t").status == "processed"
    asked: list[str] = []
    real = RoundScheduler.check_all_in

    def check_all_in(self: RoundScheduler, game_name: str) -> datetime | None:
        asked.append(game_name)
        return real(self, game_name)

    monkeypatch.setattr(RoundScheduler, "check_all_in", check_all_in)
    server = Server(config.path, clock=lambda: T0)  # the round's deadline is weeks ahead
    server.start()
    try:
        assert asked == ["g1"]
        job = server.scheduler.get_job("allin:g1:1")
        assert job is not None, [j.id for j in server.scheduler.get_jobs()]
        assert job.next_run_time > T0
    finally:
        server.shutdown()
