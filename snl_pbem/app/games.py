"""Games from the config into the database, and starting them.

``sync_games`` makes the database agree with the config without ever losing
history: new games and players are added, changed settings and deadlines of
rounds not yet closed are applied, and a player removed from the config who
has history is kept and reported, never silently deleted. ``start_game`` gives
each player an order key, opens round 1 and enqueues the welcome mails.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from snl_pbem.app.lookup import (
    audit,
    game_time,
    open_round,
    ruleset_of,
    schedule_from_game,
    scheduled_deadline,
    settings_of,
    turns_in_round,
)
from snl_pbem.app.outbox import enqueue_mail, greetings
from snl_pbem.app.server_keys import sync_referee_key
from snl_pbem.config import Config, GameConfig, Schedule
from snl_pbem.errors import LifecycleError
from snl_pbem.keys import generate_key, hash_key, new_salt
from snl_pbem.rules import Board, RulesError
from snl_pbem.rules.ruleset import get_ruleset
from snl_pbem.rules.words import counted
from snl_pbem.store import (
    Database,
    Game,
    OrderRecord,
    Player,
    Round,
    TurnRecord,
)
from snl_pbem.store.states import GamePhase, MailKind
from snl_pbem.timeutil import wall_clock_add

log = logging.getLogger("snl_pbem.games")


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    return {
        "first": schedule.first.isoformat(),
        "explicit": [d.isoformat() for d in schedule.explicit],
        "round_length_s": (
            int(schedule.round_length.total_seconds()) if schedule.round_length else None
        ),
    }


@dataclass
class SyncReport:
    """Every change a sync made, one line each. Not logged here: the caller shows them once
    (``serve`` logs ``config: ...``, ``start`` prints them)."""

    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)


def _seed(game: Game, config: GameConfig) -> int:
    """The game's seed: the config's; else, for a ruleset whose dice the server throws (the
    classic game, C11), one drawn at random when the game is first stored and kept in the
    database ever after (a game id reused elsewhere must not replay the same throws); else
    one derived from the game id (the postal game's lot)."""
    if config.settings.seed is not None or not get_ruleset(config.settings.ruleset).throws_dice:
        return config.seed
    return game.seed if game.seed else secrets.randbits(62) or 1


def _apply_settings(game: Game, config: GameConfig) -> list[str]:
    settings = config.settings
    changes = []
    values: dict[str, Any] = {
        "title": settings.title,
        "timezone": config.tz.key,
        "schedule": schedule_json(config.schedule),
        "double_from_round": settings.double_from_round,
        "trapdoor_rule": settings.trapdoor_rule,
        "ruleset": settings.ruleset,
        "options": dict(settings.options),
        "seed": _seed(game, config),
        "remind_before_s": (
            int(settings.remind_before.total_seconds()) if settings.remind_before else None
        ),
        "close_when_all_in": settings.close_when_all_in,
        "settle_s": int(settings.settle_time.total_seconds()),
        "reveal_after_game": settings.reveal_after_game,
    }
    if game.state == GamePhase.NEW:
        values["board"] = dict(config.board_table)
    elif game.board != dict(config.board_table):
        changes.append(
            "the board changed in the config but the game has started: "
            "it keeps the board it started with"
        )
    if game.state != GamePhase.NEW:
        for fixed in ("ruleset", "options", "double_from_round", "trapdoor_rule", "seed"):
            if getattr(game, fixed) != values[fixed]:
                changes.append(
                    f"{fixed} changed in the config but the game has started: "
                    f"it keeps {getattr(game, fixed)!r}"
                )
                del values[fixed]
    for key, value in values.items():
        if getattr(game, key) != value:
            if key not in ("schedule", "board"):
                changes.append(f"{key}: {getattr(game, key)!r} -> {value!r}")
            elif key == "schedule":
                changes.append("schedule changed")
            setattr(game, key, value)
    return changes


def sync_games(db: Database, config: Config, now: datetime, actor: str = "config") -> SyncReport:
    """Make the database agree with the config (idempotent); report every change."""
    report = SyncReport()
    with db.transaction() as session:
        db.serialize(session, "sync-games")  # two servers starting (or reloading) together
        known = {g.name: g for g in session.scalars(select(Game))}
        by_game: dict[int, list[Player]] = {}  # one read for every game: thousands start fast
        for player in session.scalars(select(Player)):
            by_game.setdefault(player.game_id, []).append(player)
        for game_config in config.games:
            game = known.get(game_config.id)
            if game is None:
                game = Game(
                    name=game_config.id,
                    state=GamePhase.NEW,
                    order_key_salt=new_salt(),
                    created_at=now,
                    board=dict(game_config.board_table),
                    timezone=game_config.tz.key,
                    schedule={},
                )
                session.add(game)
                _apply_settings(game, game_config)
                session.flush()
                players = len(game_config.settings.players)
                report.add(f"{game.name}: new game with {counted(players, 'player')}")
                audit(session, now, actor, "game-added", game)
            else:
                old_schedule = game.schedule
                for change in _apply_settings(game, game_config):
                    report.add(f"{game.name}: {change}")
                if game.schedule != old_schedule:
                    _sync_deadline(session, game, now, report)
            _sync_players(session, game, by_game.get(game.id, []), game_config, now, report, actor)
        for game_name in sorted(set(known) - {g.id for g in config.games}):
            report.add(f"{game_name}: in the database but not in the config; left as it is")
        if referee_key := sync_referee_key(session, config, now, actor):
            report.add(referee_key)
    return report


def _sync_players(
    session: Session,
    game: Game,
    players: list[Player],
    config: GameConfig,
    now: datetime,
    report: SyncReport,
    actor: str,
) -> None:
    # by name, whatever its case: a config's "Xavier" is the one who joined as "xavier"
    existing = {p.name.lower(): p for p in players}
    wanted = {p.name.lower(): p for p in config.settings.players}
    for spec in wanted.values():
        name = spec.name
        player = existing.get(name.lower())
        if player is None:
            if game.state != GamePhase.NEW:
                report.add(
                    f"{game.name}: player {name} is new in the config but the game has "
                    "started; players can join only before the start"
                )
                continue
            player = Player(
                game_id=game.id,
                name=name,
                email=spec.email,
                joined_at=now,
                order_key_source="config" if spec.key else "generated",
            )
            if spec.key:
                player.order_key_hash = hash_key(spec.key, game.order_key_salt)
            session.add(player)
            report.add(f"{game.name}: player {name} added")
            audit(session, now, actor, "player-added", game, player=name)
            continue
        if player.managed_by != "config":  # joined, resigned, replaced or moved by mail
            differs = player.email.lower() != spec.email.lower() or (
                spec.key is not None
                and hash_key(spec.key, game.order_key_salt) != player.order_key_hash
            )
            if differs or player.name != name:
                report.add(
                    f"{game.name}: player {player.name} is managed by mail now (joined, moved, "
                    "resigned or replaced since): the config's address and key for them are "
                    "not applied (snl-pbem replace gives a seat to another address)"
                )
            continue
        if not player.active:
            player.active = True
            report.add(f"{game.name}: player {name} is back in the config")
        if player.email != spec.email:
            report.add(f"{game.name}: player {name}'s address changed")
            audit(session, now, actor, "player-email", game, player=name)
            player.email = spec.email
        if spec.key and hash_key(spec.key, game.order_key_salt) != player.order_key_hash:
            player.order_key_hash = hash_key(spec.key, game.order_key_salt)
            player.order_key_source = "config"
            report.add(f"{game.name}: player {name}'s key changed in the config")
            audit(session, now, actor, "player-key", game, player=name)
    for lowered, player in existing.items():
        name = player.name
        if lowered in wanted or not player.active or player.managed_by != "config":
            continue  # a player who joined by mail is not in the config's table
        history = session.scalar(
            select(
                exists().where(OrderRecord.player_id == player.id)
                | exists().where(TurnRecord.player_id == player.id)
            )
        )
        if game.state == GamePhase.NEW and not history:
            session.delete(player)
            report.add(f"{game.name}: player {name} removed (no history)")
        else:
            player.active = False
            report.add(
                f"{game.name}: player {name} is no longer in the config: kept with their "
                "history, still played by the no-orders default each round (postal: R17), "
                "sent no mail"
            )
        audit(session, now, actor, "player-removed", game, player=name)


def _sync_deadline(session: Session, game: Game, now: datetime, report: SyncReport) -> None:
    """The config's schedule changed: the open round follows it, unless the referee set it."""
    current = open_round(session, game)
    if current is None or current.deadline_source != "schedule":
        return
    deadline = schedule_from_game(game).deadline(current.number) + timedelta(
        seconds=game.schedule_shift_s
    )
    if deadline != current.deadline:
        passed = " (already passed: the round closes now)" if deadline <= now else ""
        report.add(
            f"{game.name}: round {current.number} deadline moved from "
            f"{game_time(game, current.deadline)} to {game_time(game, deadline)}{passed}"
        )
        current.deadline = deadline


@dataclass(frozen=True)
class StartReport:
    game: str
    round_deadline: datetime
    generated: int
    welcomes: int


def start_game(
    db: Database,
    config: Config,
    game_name: str,
    now: datetime,
    actor: str = "referee",
    *,
    via: str | None = None,
) -> StartReport:
    """Give each player a key (unless the config sets one), open round 1, enqueue welcomes."""
    takes_signups = config.game(game_name).settings.signup != "closed"  # NotFound if not there
    with db.transaction() as session:
        game = session.scalar(select(Game).where(Game.name == game_name).with_for_update())
        if game is None:
            raise LifecycleError(
                f"{game_name}: not in the database yet (run check-config, "
                "then start again: start syncs the config first)"
            )
        report = start_locked(
            session, config, game, now, actor=actor, via=via, shift_late_start=takes_signups
        )
    log.info("%s: started, round 1 deadline %s", game_name, report.round_deadline.isoformat())
    return report


def start_locked(
    session: Session,
    config: Config,
    game: Game,
    now: datetime,
    *,
    actor: str,
    via: str | None = None,
    shift_late_start: bool = False,
) -> StartReport:
    """:func:`start_game` in the caller's session, the game row locked. ``shift_late_start``
    (a game that takes sign-ups, started when its players are there): if round 1's
    scheduled deadline is less than half a round away, it is one round from now, and
    every later deadline moves with it."""
    game_name = game.name
    if game.state != GamePhase.NEW:
        raise LifecycleError(f"{game_name}: already started (it is {game.state})")
    try:  # the ruleset's own check of the settings it will play by
        ruleset_of(game).check_settings(settings_of(game))
    except RulesError as exc:
        raise LifecycleError(f"{game_name}: {exc}") from None
    if shift_late_start:
        later = _late_first_deadline(game, now)
        if later is not None:
            schedule = schedule_from_game(game)
            shift = later - schedule.deadline(1)
            game.schedule_shift_s = int(shift.total_seconds())
    deadline = scheduled_deadline(game, 1, now)
    if deadline <= now:
        raise LifecycleError(
            f"{game_name}: first_deadline {game_time(game, deadline)} is in the "
            "past; set a later one in the config"
        )
    players = list(
        session.scalars(
            select(Player).where(Player.game_id == game.id, Player.active).order_by(Player.id)
        )
    )
    if not players:
        raise LifecycleError(f"{game_name}: nobody has a seat")
    listed = config.find(game_name)
    specs = {p.name: p for p in listed.settings.players} if listed is not None else {}
    last = Board.from_mapping(game.board).last
    generated = 0
    # each welcome's greeting, all looked up at once (a look-up a welcome was two queries
    # for each player: their seated name and the game's REPLACEs)
    hellos = greetings(session, game, players)
    for player in players:
        spec = specs.get(player.name)
        order_key = spec.key if spec is not None and player.managed_by == "config" else None
        if order_key is None:
            order_key = generate_key()
            player.order_key_hash = hash_key(order_key, game.order_key_salt)
            player.order_key_source = "generated"
            generated += 1
        enqueue_mail(
            session,
            config,
            game=game,
            kind=MailKind.WELCOME,
            to=player.email,
            now=now,
            template=f"{ruleset_of(game).name}/welcome.txt.j2",
            secret=True,
            player=player,
            hello=hellos[player.id],
            order_key=order_key,
            players=len(players),
            last=last,
            double_from=game.double_from_round,
            deadline=game_time(game, deadline),
        )
    session.add(
        Round(
            game_id=game.id,
            number=1,
            turns=turns_in_round(game, 1),
            deadline=deadline,
            opened_at=now,
        )
    )
    game.state, game.started_at = GamePhase.RUNNING, now
    audit(
        session,
        now,
        actor,
        "start",
        game,
        via=via,
        round_deadline=deadline.isoformat(),
        generated_keys=generated,
        players=len(players),
    )
    return StartReport(game_name, deadline, generated, len(players))


def _late_first_deadline(game: Game, now: datetime) -> datetime | None:
    """Round 1's deadline for a game starting late: one round from now when the scheduled
    one is less than half a round away; None to keep the schedule."""
    schedule = schedule_from_game(game)
    first = schedule.deadline(1) + timedelta(seconds=game.schedule_shift_s)
    step = schedule.deadline(2) - schedule.deadline(1)
    if first >= now + step / 2:
        return None
    return wall_clock_add(now, step, schedule.tz)
