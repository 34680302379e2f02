"""Joining a game that takes sign-ups: JOIN and its code, approval, standby, and starting
the game when its sign-ups are in.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.codes import VOUCHED, ask_code
from snl_pbem.app.games import start_locked
from snl_pbem.app.identity import _address_taken, _name_problem, no_person, own_address
from snl_pbem.app.lookup import audit, game_time
from snl_pbem.app.membership import (
    game_config,
    mail_member,
    seated,
    signup_mode,
    signups,
    tell_referee,
)
from snl_pbem.config import Config
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.rules.words import counted, tr
from snl_pbem.store import (
    AuditEntry,
    Confirmation,
    Database,
    Game,
    Player,
    Signup,
)
from snl_pbem.store.states import GamePhase, ManagedBy, Purpose, SignupState

MAX_UNCONFIRMED_PER_GAME = 20
"""Sign-up codes one game sends in SIGNUP_WINDOW, at most. Past it a JOIN is refused
with a reason (try again later) and the referee is told; codes already sent stay good
(a flood of sign-ups nobody confirms must neither void the honest ones waiting nor keep
the game shut for the codes' three days)."""
SIGNUP_WINDOW = timedelta(hours=1)
FLOOD_NOTICE_EVERY = timedelta(hours=1)
"""The referee hears of a sign-up flood on a game at most this often."""


def join_refusal(
    session: Session, config: Config, game: Game, address: str, name: str, now: datetime
) -> str | None:
    """Why ``address`` cannot ask to join ``game`` as ``name`` now (None: it may)."""
    mode = signup_mode(config, game)
    if mode == "closed":
        return tr("{game} does not take sign-ups by mail: ask the referee.", game=game.name)
    if game.state == GamePhase.OVER:
        return tr("{game} is over.", game=game.name)
    if own_address(config, address) or no_person(address):
        return tr(
            "The game's own addresses and robot addresses (postmaster, no-reply...) cannot join."
        )
    return _address_taken(session, game, address) or _name_problem(session, game, name)


def join_codes_sent(session: Session, game: Game, now: datetime) -> int:
    """Sign-up codes ``game`` sent in the last SIGNUP_WINDOW (used or not)."""
    return (
        session.scalar(
            select(func.count())
            .select_from(Confirmation)
            .where(
                Confirmation.game_id == game.id,
                Confirmation.purpose == Purpose.JOIN,
                Confirmation.created_at > now - SIGNUP_WINDOW,
            )
        )
        or 0
    )


def join_code_refusal(session: Session, game: Game, now: datetime) -> str | None:
    """Why no sign-up code goes out for ``game`` now: MAX_UNCONFIRMED_PER_GAME were sent
    within the hour. The newcomer is refused rather than an older code voided (an honest
    joiner confirms within minutes; a flood's codes never, and evicting them would let the
    flood void the honest ones instead). The caller holds the game's lock, so two JOINs at
    once cannot both take the last place."""
    if join_codes_sent(session, game, now) < MAX_UNCONFIRMED_PER_GAME:
        return None
    return tr(
        "{game} has had many sign-ups in the last hour, more than it takes at once. Please "
        "send your JOIN again in an hour.",
        game=game.name,
    )


def request_join(
    session: Session,
    game: Game,
    address: str,
    name: str,
    now: datetime,
    vouched: bool = False,
    language: str | None = None,
) -> str:
    """A code for ``address`` to confirm its sign-up (after ``join_refusal`` and
    ``join_code_refusal`` said None). Codes sent earlier stay good, under any name: the
    first confirmed seats the address and voids the others (``void_other_joins``).
    ``language``: the one the joiner asked for, or wrote in (their seat's mail's)."""
    payload: dict[str, Any] = {"name": name}
    if language is not None:
        payload["language"] = language
    if vouched:
        payload[VOUCHED] = "yes"
    return ask_code(session, game, Purpose.JOIN, address, now, payload)


def flood_noticed(session: Session, config: Config, game: Game, now: datetime, what: str) -> bool:
    """Tell the referee that a sign-up limit held ``game``'s joiners back (``what``: which
    one), at most once per FLOOD_NOTICE_EVERY per game; True when told now."""
    recent = session.scalar(
        select(func.count())
        .select_from(AuditEntry)
        .where(
            AuditEntry.game_id == game.id,
            AuditEntry.action == "signup-flood",
            AuditEntry.at > now - FLOOD_NOTICE_EVERY,
        )
    )
    if recent:
        return False
    audit(session, now, "intake", "signup-flood", game, limit=what)
    tell_referee(
        session,
        config,
        game,
        now,
        "many sign-ups",
        f"{game.name} is getting more sign-up requests than its limits let through "
        f"({what}). Those over the limit are refused with a short reason (try again "
        "later); codes already sent stay good. If it goes on, it is likely a flood of "
        'forged JOINs: you may set signup = "closed" or "approval" for a while. '
        "You hear of it at most once an hour.",
    )
    return True


@dataclass(frozen=True)
class JoinOutcome:
    state: str
    """seated, standby or waiting (SignupState)."""
    name: str
    started: bool = False
    message: str = ""


def complete_join(
    session: Session,
    config: Config,
    game: Game,
    name: str,
    address: str,
    now: datetime,
    tell: Callable[[JoinOutcome], None],
    language: str | None = None,
) -> JoinOutcome:
    """A confirmed sign-up: seated (a forming game with room), on the standby list (full,
    or already running), or waiting for the referee (signup = "approval"). ``tell`` queues
    the joiner's answer, before the welcome when their seat starts the game. ``language``
    is the joiner's (their seat's mail's; None: the game's)."""
    refusal = _address_taken(session, game, address) or _name_problem(session, game, name)
    if refusal is not None:
        raise LifecycleError(refusal)
    if game.state == GamePhase.OVER:
        raise LifecycleError(tr("{game} is over.", game=game.name))
    if signup_mode(config, game) == "closed":  # closed since the code was sent
        raise LifecycleError(
            tr("{game} no longer takes sign-ups by mail: ask the referee.", game=game.name)
        )
    approval = signup_mode(config, game) == "approval"
    signup = Signup(
        game_id=game.id,
        name=name,
        email=address.lower(),
        created_at=now,
        state=SignupState.WAITING if approval else SignupState.STANDBY,  # place_signup may seat it
        language=language,
    )
    session.add(signup)
    if approval:
        audit(session, now, address.lower(), "signup-waiting", game, name=name, via="mail")
        tell_referee(
            session,
            config,
            game,
            now,
            f"{name} asks to join",
            f"{name} <{address}> asks to join {game.name}. Reply with APPROVE {game.name} "
            f"{name} or REFUSE {game.name} {name} (with your referee key), or run "
            f"snl-pbem approve {game.name} {shlex.quote(name)}.",
        )
        outcome = JoinOutcome(SignupState.WAITING, name)
        tell(outcome)
        return outcome
    return place_signup(session, config, game, signup, now, tell, actor=address.lower(), via="mail")


def place_signup(
    session: Session,
    config: Config,
    game: Game,
    signup: Signup,
    now: datetime,
    tell: Callable[[JoinOutcome], None],
    *,
    actor: str,
    via: str | None,
) -> JoinOutcome:
    """Seat an accepted sign-up if the game is forming and has room; else standby.
    ``tell`` queues the joiner's mail about it: before the game starts, when this seat
    fills it, so that "your welcome message follows" comes before the welcome."""
    found = game_config(config, game)
    limit = found.settings.max_players if found is not None else None
    if game.state == GamePhase.NEW and (limit is None or len(seated(session, game)) < limit):
        player = Player(
            game_id=game.id,
            name=signup.name,
            email=signup.email,
            joined_at=now,
            order_key_source="generated",
            managed_by=ManagedBy.MAIL,
            language=signup.language,
        )
        session.add(player)
        session.flush()
        signup.state, signup.player_id, signup.decided_at = SignupState.SEATED, player.id, now
        audit(session, now, actor, "signup-seated", game, name=signup.name, via=via)
        started = (
            found is not None
            and found.settings.starts == "when_full"
            and limit is not None
            and len(seated(session, game)) >= limit
        )
        outcome = JoinOutcome(SignupState.SEATED, signup.name, started)
        tell(outcome)
        if started:
            start_locked(session, config, game, now, actor="signup", shift_late_start=True)
        return outcome
    signup.state, signup.decided_at = SignupState.STANDBY, now
    audit(session, now, actor, "signup-standby", game, name=signup.name, via=via)
    outcome = JoinOutcome(SignupState.STANDBY, signup.name)
    tell(outcome)
    return outcome


def _waiting_signup(session: Session, game: Game, name: str, *states: str) -> Signup:
    found = session.scalar(
        select(Signup).where(
            Signup.game_id == game.id,
            func.lower(Signup.name) == name.lower(),
            Signup.state.in_(states or (SignupState.WAITING,)),
        )
    )
    if found is None:
        waiting = [s.name for s in signups(session, game, *(states or (SignupState.WAITING,)))]
        also = f" (waiting: {', '.join(waiting)})" if waiting else " (none is waiting)"
        where = (
            "for approval" if set(states) <= {SignupState.WAITING} else "for approval or on standby"
        )
        raise NotFound(f"{game.name}: no sign-up named {name!r} waits {where}{also}")
    return found


def approve_signup(
    session: Session,
    config: Config,
    game: Game,
    name: str,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    """The referee accepts a waiting sign-up: seated, or standby when there is no seat."""
    signup = _waiting_signup(session, game, name)
    signup.decided_by = actor

    def tell(outcome: JoinOutcome) -> None:
        mail_member(
            session,
            config,
            game,
            signup.email,
            now,
            "player/signup.txt.j2",
            name=signup.name,
            outcome="approved-" + outcome.state,
            started=outcome.started,
        )

    outcome = place_signup(session, config, game, signup, now, tell, actor=actor, via=via)
    where = "seated" if outcome.state == SignupState.SEATED else "on the standby list"
    started = "; the game is full and has started" if outcome.started else ""
    return f"{game.name}: {signup.name} approved, {where}{started}"


def refuse_signup(
    session: Session,
    config: Config,
    game: Game,
    name: str,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    signup = _waiting_signup(session, game, name, SignupState.WAITING, SignupState.STANDBY)
    signup.state, signup.decided_at, signup.decided_by = SignupState.REFUSED, now, actor
    audit(session, now, actor, "signup-refused", game, name=signup.name, via=via)
    mail_member(
        session,
        config,
        game,
        signup.email,
        now,
        "player/signup.txt.j2",
        name=signup.name,
        outcome="refused",
        started=False,
    )
    return f"{game.name}: {signup.name}'s sign-up refused (they are told)"


def start_forming_game(
    session: Session,
    config: Config,
    game: Game,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    """START by the referee: the game starts with the players it has (at least one)."""
    if game.state != GamePhase.NEW:
        raise LifecycleError(f"{game.name}: already started (it is {game.state})")
    if not seated(session, game):
        raise LifecycleError(f"{game.name}: nobody has a seat yet")
    report = start_locked(
        session,
        config,
        game,
        now,
        actor=actor,
        via=via,
        shift_late_start=signup_mode(config, game) != "closed",
    )
    return (
        f"{game.name}: started with {counted(report.welcomes, 'player')}; round 1 deadline "
        f"{game_time(game, report.round_deadline)}"
    )


def start_due_games(db: Database, config: Config, now: datetime) -> list[str]:
    """Start each forming game whose ``starts`` time has come and that has ``min_players``;
    one that has too few waits, and the referee is told (once). Returns what happened."""
    done: list[str] = []
    due = [g for g in config.games if g.starts_at is not None and g.starts_at <= now]
    if not due:
        return done
    with db.transaction() as session:  # one look for all of them: most have started long ago
        forming = set(
            session.scalars(
                select(Game.name).where(
                    Game.state == GamePhase.NEW, Game.name.in_([g.id for g in due])
                )
            )
        )
    for game_config_ in due:
        settings = game_config_.settings
        if game_config_.id not in forming:
            continue
        assert game_config_.starts_at is not None
        with db.transaction() as session:
            game = session.scalar(
                select(Game).where(Game.name == game_config_.id).with_for_update()
            )
            if game is None or game.state != GamePhase.NEW:
                continue
            count = len(seated(session, game))
            if count >= settings.min_players:
                report = start_locked(
                    session, config, game, now, actor="scheduler", shift_late_start=True
                )
                done.append(
                    f"{game.name}: started at its start time with "
                    f"{counted(report.welcomes, 'player')}"
                )
            elif game.start_noted_at is None:
                game.start_noted_at = now
                audit(session, now, "scheduler", "start-waiting", game, players=count)
                tell_referee(
                    session,
                    config,
                    game,
                    now,
                    "not started: too few players",
                    f"{game.name} was due to start at {game_time(game, game_config_.starts_at)} "
                    f"but has {count} of the {counted(settings.min_players, 'player')} it "
                    "needs. It waits: it starts as soon as it has them (or when you send START "
                    f"{game.name}, or run snl-pbem start {game.name}).",
                )
                done.append(f"{game.name}: waiting for players ({count}/{settings.min_players})")
    return done
