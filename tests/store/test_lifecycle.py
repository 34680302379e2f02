"""The game lifecycle on SQLite and PostgreSQL: sync, start, orders, closing rounds."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from snl_pbem.games import LifecycleError, start_game, sync_games
from snl_pbem.keys import verify_key
from snl_pbem.replay import Replay, outcome_json, run_replay
from snl_pbem.rounds import close_round, close_with_backup, game_rules, rollback_round, submit_orders
from snl_pbem.referee import extend, pause, resume, status
from snl_pbem.rules import OrderSet
from snl_pbem.store import AuditEntry, Database, Game, OutboxMessage, Player, Round, TurnRecord

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)


def started(db: Database, config, game: str = "g1"):
    sync_games(db, config, T0)
    start_game(db, config, game, T0)


def order(db: Database, game_key: str, name: str, dice, trapdoor=None, at=T0, **kw):
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.key == game_key))
        player = s.scalar(select(Player).where(Player.game_id == game.id, Player.name == name))
        return submit_orders(s, game, player, dice=dice, trapdoor=trapdoor, received_at=at, **kw)


def test_sync_adds_games_and_players_and_is_idempotent(db: Database, make_config) -> None:
    config = make_config([{"id": "g1"}, {"id": "g2", "players": ["x", "y"]}])
    report = sync_games(db, config, T0)
    assert "g1: new game with 3 players" in report.lines
    assert "g2: player y added" in report.lines
    assert sync_games(db, config, T0).lines == []  # nothing changed the second time
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(Player)) == 5


def test_removed_player_with_history_is_kept(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    order(db, "g1", "cy", [3])
    smaller = make_config([{"players": ["ann", "bob"]}])
    report = sync_games(db, smaller, T0)
    assert any("player cy is no longer in the config: kept" in line for line in report.lines)
    with db.transaction() as s:
        cy = s.scalar(select(Player).where(Player.name == "cy"))
        assert cy is not None and cy.active is False
    late = make_config([{"players": ["ann", "bob", "cy", "dee"]}])
    lines = sync_games(db, late, T0).lines
    assert "g1: player cy is back in the config" in lines
    assert any("player dee is new in the config but the game has started" in x for x in lines)


def test_start_makes_keys_round_one_and_welcome_mail(db: Database, make_config) -> None:
    config = make_config([{"keys": False}])
    started(db, config)
    with db.transaction() as s:
        players = s.scalars(select(Player).order_by(Player.id)).all()
        assert all(p.key_hash and p.key_hash.startswith("scrypt$") for p in players)
        mails = s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)).all()
        rounds = s.scalars(select(Round)).all()
    assert [m.recipient for m in mails] == ["ann@example.org", "bob@example.org", "cy@example.org"]
    assert all(m.kind == "welcome" and m.secret and m.status == "pending" for m in mails)
    body = mails[0].message.decode()
    key = next(line.strip() for line in body.splitlines() if line.startswith("    "))
    assert verify_key(key, players[0].key_hash) and not verify_key(key, players[1].key_hash)
    assert key not in (players[0].key_hash or "")
    assert "Round 1 deadline: Fri 4 Jan 2030 18:00 GMT" in body
    assert "Auto-Submitted: auto-generated" in body and "List-Id:" in body
    assert [(r.number, r.turns, r.state, r.deadline) for r in rounds] == [
        (1, 1, "open", datetime(2030, 1, 4, 18, 0, tzinfo=UTC))]
    with pytest.raises(LifecycleError, match="already started"):
        start_game(db, config, "g1", T0)


def test_config_keys_are_hashed_not_stored(db: Database, make_config) -> None:
    config = make_config([{"keys": True}])
    started(db, config)
    with db.transaction() as s:
        ann = s.scalar(select(Player).where(Player.name == "ann"))
        mail = s.scalar(select(OutboxMessage).where(OutboxMessage.recipient == "ann@example.org"))
    assert ann.key_source == "config" and verify_key("ANN-key-123", ann.key_hash)
    assert "ann-key-123" in mail.message.decode()


def test_close_round_adjudicates_and_opens_the_next(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    order(db, "g1", "ann", [4], trapdoor=14)
    order(db, "g1", "bob", [2])
    order(db, "g1", "bob", [4], trapdoor=14)  # replaces bob's first order as a whole
    order(db, "g1", "cy", [9])  # invalid: R18, lowest legal move
    outcome = close_round(db, "g1", T0 + timedelta(days=40))
    assert outcome is not None and outcome.round == 1
    result = outcome.result
    assert result.trapdoors == (14,)
    # ann and bob: 4, ladder 4->14, trapdoor 14->7 (R13 then R11); cy: R17 plays 1
    assert result.positions == {"ann": 7, "bob": 7, "cy": 1}
    assert sorted(result.nmr) == ["cy"]
    assert outcome.next_round == 2 and outcome.next_deadline is not None
    assert outcome.next_deadline > T0 + timedelta(days=40)  # never a deadline in the past
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(TurnRecord)) == 3
        rounds = s.scalars(select(Round).order_by(Round.number)).all()
        assert [(r.number, r.state) for r in rounds] == [(1, "closed"), (2, "open")]
        assert s.scalar(select(AuditEntry.action).order_by(AuditEntry.id.desc())) == "close-round"
    assert close_round(db, "g1", T0, expect_round=1) is None  # round 1 is already closed
