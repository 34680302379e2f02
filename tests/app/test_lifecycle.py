"""The game lifecycle on SQLite and PostgreSQL: sync, start, orders, closing rounds."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from helpers import game_rules
from mailhelpers import key_in
from sqlalchemy import event, func, select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.referee import extend, pause, resume, status
from snl_pbem.app.rounds import (
    close_round,
    close_with_backup,
    rollback_round,
    submit_orders,
)
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.keys import verify_key
from snl_pbem.offline.replay import Replay, outcome_json, run_replay
from snl_pbem.rules import OrderSet
from snl_pbem.store import AuditEntry, Database, Game, OutboxMessage, Player, Round, TurnRecord

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)


def started(db: Database, config, game: str = "g1"):
    sync_games(db, config, T0)
    start_game(db, config, game, T0)


def order(db: Database, game_id: str, name: str, dice, trapdoor=None, at=T0, **kw):
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == game_id))
        player = s.scalar(select(Player).where(Player.game_id == game.id, Player.name == name))
        return submit_orders(s, game, player, dice=dice, nomination=trapdoor, received_at=at, **kw)


def test_sync_adds_games_and_players_and_is_idempotent(db: Database, make_config) -> None:
    config = make_config([{"id": "g1"}, {"id": "g2", "players": ["x", "y"]}])
    report = sync_games(db, config, T0)
    assert "g1: new game with 3 players" in report.lines
    assert "g2: player y added" in report.lines
    assert sync_games(db, config, T0).lines == []  # nothing changed the second time
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(Player)) == 5


def test_concurrent_syncs_add_a_game_once(db: Database, make_config) -> None:
    """Two servers starting (or reloading) together with a new game in the config: both
    succeed, and the game and its players exist once."""
    config = make_config([{"id": "g1"}, {"id": "g2", "players": ["x", "y"]}])
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def syncer() -> None:
        mine = Database(db.url)
        try:
            barrier.wait()
            sync_games(mine, config, T0)
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)
        finally:
            mine.dispose()

    threads = [threading.Thread(target=syncer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(Game)) == 2
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
        salt = s.scalar(select(Game.order_key_salt))
        assert all(p.order_key_hash and p.order_key_hash.startswith("h1$") for p in players)
        mails = s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)).all()
        rounds = s.scalars(select(Round)).all()
    assert [m.recipient for m in mails] == ["ann@example.org", "bob@example.org", "cy@example.org"]
    assert all(m.kind == "welcome" and m.secret and m.status == "pending" for m in mails)
    body = mails[0].message.decode()
    key = key_in(body)
    assert verify_key(key, players[0].order_key_hash, salt)
    assert not verify_key(key, players[1].order_key_hash, salt)
    assert key not in (players[0].order_key_hash or "")
    assert "Round 1 deadline: Fri 4 Jan 2030 18:00 GMT" in body
    assert "Auto-Submitted: auto-generated" in body and "X-SNL-PBEM-Game: g1" in body
    assert "List-Id:" not in body and "Precedence:" not in body  # personal, not list mail
    assert [(r.number, r.turns, r.state, r.deadline) for r in rounds] == [
        (1, 1, "open", datetime(2030, 1, 4, 18, 0, tzinfo=UTC))
    ]
    with pytest.raises(LifecycleError, match="already started"):
        start_game(db, config, "g1", T0)


def test_a_games_start_greets_its_players_in_queries_that_do_not_grow_with_them(
    db: Database, make_config
) -> None:
    """Each welcome greets its player by name; the names are looked up once for the game
    (``greetings``), not once a welcome: a game of twelve starts in the statements a game
    of three does."""
    names = [f"p{i}" for i in range(12)]
    config = make_config([{"id": "g1"}, {"id": "g2", "players": names}])
    sync_games(db, config, T0)
    counted: list[str] = []

    def count(*args: object) -> None:
        counted.append(str(args[2]))

    def statements(game: str) -> int:
        counted.clear()
        event.listen(db.engine, "before_cursor_execute", count)
        try:
            start_game(db, config, game, T0)
        finally:
            event.remove(db.engine, "before_cursor_execute", count)
        return sum(sql.lstrip().upper().startswith("SELECT") for sql in counted)

    assert statements("g2") == statements("g1")
    with db.transaction() as s:
        bodies = [m.message.decode() for m in s.scalars(select(OutboxMessage))]
    assert sum("Hello p11," in body for body in bodies) == 1
    assert sum("Hello ann," in body for body in bodies) == 1


def test_config_keys_are_hashed_not_stored(db: Database, make_config) -> None:
    config = make_config([{"keys": True}])
    started(db, config)
    with db.transaction() as s:
        ann = s.scalar(select(Player).where(Player.name == "ann"))
        mail = s.scalar(select(OutboxMessage).where(OutboxMessage.recipient == "ann@example.org"))
    assert ann.order_key_source == "config"
    assert verify_key("ANN-key-123", ann.order_key_hash, _game(db).order_key_salt)
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


@pytest.mark.parametrize("workers", [4])
def test_concurrent_closes_close_once(db: Database, make_config, workers: int) -> None:
    """Two (or more) closers at once — threads with their own connections — close once."""
    config = make_config()
    started(db, config)
    barrier = threading.Barrier(workers)
    outcomes = []

    def closer() -> None:
        mine = Database(db.url)
        try:
            barrier.wait()
            outcomes.append(close_round(mine, "g1", T0, actor="racer", expect_round=1))
        finally:
            mine.dispose()

    threads = [threading.Thread(target=closer) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(o is not None for o in outcomes) == 1
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(TurnRecord)) == 3
        assert s.scalar(select(func.count()).select_from(Round)) == 2


def test_a_whole_game_matches_offline_adjudication(db: Database, make_config) -> None:
    """Closing rounds through the database gives exactly what `adjudicate` gives."""
    import random

    config = make_config([{"players": ["ann", "bob", "cy", "dee"], "double": 3}])
    started(db, config)
    rng = random.Random(5)
    rounds: list[dict[str, OrderSet | None]] = []
    now = T0
    for number in range(1, 40):
        with db.transaction() as s:
            game = s.scalar(select(Game))
            if game.state == "over":
                break
        turns = 1 if number < 3 else 2
        orders: dict[str, OrderSet | None] = {}
        for name in ("ann", "bob", "cy", "dee"):
            if rng.random() < 0.2:
                continue
            dice = [rng.randint(1, 6) for _ in range(turns)]
            trap = rng.choice([None, rng.randint(1, 100)])
            receipt = order(db, "g1", name, dice, trapdoor=trap, at=now)
            assert receipt.round == number
            orders[name] = OrderSet(tuple(dice), trap)
        rounds.append(orders)
        now += timedelta(days=3)
        assert close_round(db, "g1", now) is not None
    rules = game_rules(_game(db))
    offline = outcome_json(run_replay(Replay(rules, ("ann", "bob", "cy", "dee"), tuple(rounds))))
    with db.transaction() as s:
        game = s.scalar(select(Game))
        assert game.state == "over" and game.result == offline["result"]
        finals = dict(
            s.execute(
                select(Player.name, TurnRecord.final)
                .join(TurnRecord, TurnRecord.player_id == Player.id)
                .where(TurnRecord.turn == game.turns_played)
            ).all()
        )
    assert finals == offline["rounds"][-1]["positions"]


def _game(db: Database) -> Game:
    with db.transaction() as s:
        return s.scalar(select(Game))


def test_orders_after_the_deadline_do_not_count(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    deadline = datetime(2030, 1, 4, 18, 0, tzinfo=UTC)
    order(db, "g1", "ann", [6], at=deadline - timedelta(minutes=1))
    order(db, "g1", "ann", [5], at=deadline + timedelta(seconds=1))  # late: ignored
    outcome = close_round(db, "g1", deadline + timedelta(minutes=5))
    assert outcome is not None and outcome.result.turns[0].moves["ann"].die == 6


def test_rollback_reopens_and_reclosing_gives_the_same_result(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    order(db, "g1", "ann", [5])
    first = close_round(db, "g1", T0 + timedelta(days=40))
    assert first is not None
    order(db, "g1", "bob", [2], at=T0 + timedelta(days=40, hours=1))  # an order for round 2
    with pytest.raises(LifecycleError, match="round 2 already has 1 order set"):
        rollback_round(db, "g1", T0)
    assert rollback_round(db, "g1", T0, force=True) == 1
    with db.transaction() as s:
        game = s.scalar(select(Game))
        assert (game.state, game.rounds_played, game.turns_played) == ("paused", 0, 0)
        assert s.scalar(select(func.count()).select_from(TurnRecord)) == 0
    again = close_round(db, "g1", T0 + timedelta(days=41), actor="referee")
    assert again is not None and again.result.positions == first.result.positions


def test_extend_pause_resume(db: Database, make_config) -> None:
    config = make_config()
    started(db, config)
    deadline = datetime(2030, 1, 4, 18, 0, tzinfo=UTC)
    moved = extend(db, "g1", T0, by=timedelta(days=1), config=config)
    assert moved == deadline + timedelta(days=1)
    with pytest.raises(LifecycleError, match="either --by"):
        extend(db, "g1", T0, config=config)
    pause(db, "g1", T0)
    with pytest.raises(LifecycleError, match="only a running game"):
        pause(db, "g1", T0)
    assert resume(db, "g1", T0 + timedelta(hours=5)) == deadline + timedelta(days=1, hours=5)
    with db.transaction() as s:
        game = s.scalar(select(Game))
        assert game.schedule_shift_s == 5 * 3600
        actions = s.scalars(select(AuditEntry.action).order_by(AuditEntry.id)).all()
    assert actions[-3:] == ["extend", "pause", "resume"]
    # a schedule change in the config no longer moves a deadline the referee set
    assert not any(
        "deadline moved" in x
        for x in sync_games(db, make_config([{"first": "2030-01-05T18:00"}]), T0).lines
    )


def test_config_schedule_change_moves_a_scheduled_deadline(db: Database, make_config) -> None:
    started(db, make_config())
    lines = sync_games(db, make_config([{"first": "2030-01-06T09:30"}]), T0).lines
    assert (
        "g1: round 1 deadline moved from Fri 4 Jan 2030 18:00 GMT to Sun 6 Jan 2030 09:30 GMT"
        in lines
    )


def test_status_is_the_referees_private_view(db: Database, make_config) -> None:
    started(db, make_config())
    order(db, "g1", "ann", [3])
    order(db, "g1", "bob", [3, 4])
    [game] = status(db, "g1")
    by_name = {p.name: p for p in game.players}
    assert (game.round, game.round_turns, game.state) == (1, 1, "running")
    assert by_name["ann"].orders == "valid" and by_name["cy"].orders == "none"
    assert by_name["bob"].orders == "invalid"
    assert "this round needs 1 die" in by_name["bob"].problems[0]
    assert game.mail_pending == 3
    with pytest.raises(NotFound, match="no game 'nope'"):
        status(db, "nope")


def test_backups_before_close_keep_the_newest(db: Database, make_config, tmp_path) -> None:
    config = make_config(extra="")
    started(db, config)
    for day in range(3):
        close_with_backup(
            db, "g1", T0 + timedelta(days=40 + 5 * day), backups=2, backup_dir=tmp_path / "bk"
        )
    files = sorted((tmp_path / "bk").glob("*.sqlite")) if (tmp_path / "bk").exists() else []
    if db.is_sqlite:
        assert len(files) == 2
        import sqlite3

        with sqlite3.connect(files[-1]) as copy:
            assert copy.execute("select count(*) from rounds").fetchone() == (3,)
    else:
        assert files == []  # PostgreSQL: pg_dump is the GM's tool, see the guide


def test_missed_deadlines_are_closed_once_in_deadline_order(db: Database, make_config) -> None:
    from snl_pbem.app.rounds import due_rounds
    from snl_pbem.runners.scheduler import RoundScheduler

    config = make_config(
        [
            {"id": "late"},
            {"id": "early", "first": "2030-01-02T09:00"},
            {"id": "future", "first": "2031-01-01T09:00"},
        ]
    )
    sync_games(db, config, T0)
    for key in ("late", "early", "future"):
        start_game(db, config, key, T0)
    pause(db, "future", T0)
    after = datetime(2030, 2, 1, tzinfo=UTC)
    assert [key for key, _, _ in due_rounds(db, after)] == ["early", "late"]
    rounds = RoundScheduler(db, config, clock=lambda: after)  # the server's catch-up
    closed = rounds.catch_up()
    assert [(o.game, o.round) for o in closed] == [("early", 1), ("late", 1)]
    assert all(o.next_deadline is not None and o.next_deadline > after for o in closed)
    assert rounds.catch_up() == []  # nothing twice


def test_duplicates_are_impossible(db: Database, make_config) -> None:
    from sqlalchemy.exc import IntegrityError

    from snl_pbem.store import InboundMessage

    started(db, make_config())
    inbound = dict(
        sha256="a" * 64,
        source="imap:x",
        uidvalidity=7,
        uid=1,
        received_at=T0,
        raw=b"x",
        status="new",
    )
    with db.transaction() as s:
        s.add(InboundMessage(**inbound))
    for change in ({"uid": 2}, {"sha256": "b" * 64}):  # same bytes / same mailbox UID
        with pytest.raises(IntegrityError), db.transaction() as s:
            s.add(InboundMessage(**{**inbound, **change}))
    with pytest.raises(IntegrityError), db.transaction() as s:
        game = s.scalar(select(Game))
        s.add(Round(game_id=game.id, number=2, turns=1, deadline=T0, opened_at=T0))  # 2nd open
    close_round(db, "g1", T0)
    with pytest.raises(IntegrityError), db.transaction() as s:
        row = s.scalar(select(TurnRecord))
        s.add(
            TurnRecord(
                game_id=row.game_id,
                round_id=row.round_id,
                player_id=row.player_id,
                turn=row.turn,
                die=1,
                start=0,
                target=1,
                final=1,
                events="",
            )
        )
