"""Leaving and taking over a seat: RESIGN, the referee's replace, and standby filling a
resigned seat.

A seat is a Player row: its name carries its position and its dice history, so giving
the seat to someone else (``replace_seat``) changes only the address and the key.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.codes import open_confirmations
from snl_pbem.app.lookup import audit, game_time, open_round, ruleset_of
from snl_pbem.app.membership import game_config, mail_member, signups, tell_referee
from snl_pbem.app.outbox import enqueue_mail
from snl_pbem.app.signup import JoinOutcome, place_signup
from snl_pbem.app.state import counting_orders, holder_name, player_state
from snl_pbem.config import Config, address_problem
from snl_pbem.errors import LifecycleError, NotFound
from snl_pbem.keys import generate_key, hash_key
from snl_pbem.rules.words import tr
from snl_pbem.store import (
    Confirmation,
    Game,
    Player,
    Signup,
)
from snl_pbem.store.states import GamePhase, MailKind, ManagedBy, Purpose, SignupState

RESIGN_LIFETIME = timedelta(days=3)


def resign(
    session: Session,
    config: Config,
    game: Game,
    player: Player,
    now: datetime,
    named: str | None,
    inbound_id: int | None = None,
) -> bool:
    """RESIGN: the first message asks; a second one (``inbound_id``: another message)
    naming the game (``RESIGN spring26``) within RESIGN_LIFETIME confirms. True when the
    player has now resigned."""
    pending = [
        c
        for c in open_confirmations(session, player.email, now, Purpose.RESIGN)
        if c.game_id == game.id
        and c.payload.get("player_id") == player.id
        and (inbound_id is None or c.payload.get("inbound") != inbound_id)
    ]
    if not pending or named != game.name:
        for earlier in pending:
            earlier.used_at = now
        session.add(
            Confirmation(
                game_id=game.id,
                purpose=Purpose.RESIGN,
                email=player.email.lower(),
                code_hash=None,
                payload={"player_id": player.id, "inbound": inbound_id},
                created_at=now,
                expires_at=now + RESIGN_LIFETIME,
                wrong=0,
            )
        )
        return False
    for confirmation in pending:
        confirmation.used_at = now
    if game.state == GamePhase.NEW:  # nothing played yet: the seat goes, not its history
        return _leave_before_start(session, config, game, player, now)
    player.active, player.resigned_at = False, now
    player.order_key_hash, player.managed_by = None, ManagedBy.MAIL
    player.absent_until = None
    audit(session, now, player.email.lower(), "resign", game, player=player.name, via="mail")
    round_ = open_round(session, game)
    how = (
        "Their seat plays on by the no-orders default until you give it to someone: "
        f"REPLACE {game.name} {player.name} new@address (or snl-pbem replace)"
    )
    if _auto(config, game):
        how += "; with auto_replace the first on the standby list takes it at the next round"
    tell_referee(
        session,
        config,
        game,
        now,
        f"{player.name} resigned",
        f"{player.name} <{player.email}> resigned from {game.name}"
        + (f" during round {round_.number}" if round_ is not None else "")
        + f". {how}.",
    )
    return True


def resign_refusal(config: Config, game: Game, player: Player) -> str | None:
    """Why ``player`` cannot resign by mail (None: they may). Before the start, a player
    the config lists is the referee's to take off (a config reload would add them back)."""
    listed = game_config(config, game)
    names = {p.name.lower() for p in listed.settings.players} if listed is not None else set()
    if game.state == GamePhase.NEW and player.name.lower() in names:
        return tr(
            "The referee listed you in the game's config: ask them to take you off before "
            "the game starts."
        )
    return None


def _leave_before_start(
    session: Session, config: Config, game: Game, player: Player, now: datetime
) -> bool:
    """A joiner gives up their seat before the start: the seat is gone (nothing was played
    on it), and the first on the standby list takes the free place."""
    for signup in session.scalars(select(Signup).where(Signup.player_id == player.id)):
        signup.state, signup.decided_at, signup.player_id = SignupState.WITHDRAWN, now, None
    name, address = player.name, player.email
    player.active = False  # for the caller: nothing more is done for them
    session.delete(player)
    session.flush()
    audit(session, now, address.lower(), "resign", game, player=name, via="mail")
    how = "The game has not started: their seat is free again"
    waiting = signups(session, game, SignupState.STANDBY)
    if waiting:

        def tell(placed: JoinOutcome) -> None:
            if placed.state == SignupState.SEATED:
                mail_member(
                    session,
                    config,
                    game,
                    waiting[0].email,
                    now,
                    "player/signup.txt.j2",
                    name=placed.name,
                    outcome=str(placed.state),
                    started=placed.started,
                )

        placed = place_signup(
            session, config, game, waiting[0], now, tell, actor="standby", via=None
        )
        if placed.state == SignupState.SEATED:
            how += f", and {placed.name} from the standby list has it"
    tell_referee(
        session,
        config,
        game,
        now,
        f"{name} resigned",
        f"{name} <{address}> left {game.name}. {how}.",
    )
    return True


def _auto(config: Config, game: Game) -> bool:
    found = game_config(config, game)
    return bool(found is not None and found.settings.auto_replace)


def replace_seat(
    session: Session,
    config: Config,
    game: Game,
    player_name: str,
    email: str,
    now: datetime,
    *,
    actor: str,
    via: str | None,
) -> str:
    """Give ``player_name``'s seat (its position and dice history) to ``email`` with a new
    key: the old key stops at once; the old address, if it still held the seat, is told.
    Each holder is greeted by the name they go by (``holder_name``), never the other's."""
    email = email.strip().lower()
    player = session.scalar(
        select(Player).where(
            Player.game_id == game.id, func.lower(Player.name) == player_name.lower()
        )
    )
    if player is None:
        names = [p.name for p in session.scalars(select(Player).where(Player.game_id == game.id))]
        raise NotFound(f"{game.name}: no player {player_name!r} (players: {', '.join(names)})")
    if game.state == GamePhase.OVER:
        raise LifecycleError(f"{game.name}: the game is over")
    problem = address_problem(email)
    if problem is not None:
        raise LifecycleError(problem)
    if email in (config.settings.mail.address.lower(), config.settings.mail.referee.lower()):
        raise LifecycleError(f"{email} is one of the game's own addresses")
    other = session.scalar(
        select(Player).where(
            Player.game_id == game.id,
            func.lower(Player.email) == email,
            Player.active,
            Player.id != player.id,
        )
    )
    if other is not None:
        raise LifecycleError(f"{email} already plays in {game.name} (as {other.name})")
    old_email, was_playing = player.email, player.active
    old_holder = holder_name(session, game, player)
    order_key = generate_key()
    player.email = email
    # before the start the key is made, and mailed, with everyone's at the start
    player.order_key_hash = (
        None if game.state == GamePhase.NEW else hash_key(order_key, game.order_key_salt)
    )
    player.order_key_source = "generated"
    player.active, player.resigned_at, player.absent_until = True, None, None
    player.managed_by = ManagedBy.MAIL
    holder = None
    player.language = None  # the old holder's choice: the new one's is their sign-up's
    for signup in signups(session, game, SignupState.STANDBY, SignupState.WAITING):
        if signup.email.lower() == email:
            signup.state, signup.player_id, signup.decided_at = SignupState.SEATED, player.id, now
            holder = signup.name
            player.language = signup.language
    audit(
        session,
        now,
        actor,
        "replace",
        game,
        player=player.name,
        old=old_email,
        new=email,
        via=via,
    )
    if game.state != GamePhase.NEW:
        _mail_seat(session, config, game, player, holder, order_key, now)
    else:
        mail_member(
            session,
            config,
            game,
            email,
            now,
            "player/seat_before_start.txt.j2",
            player=player,
            holder=holder,
        )
    if was_playing and old_email.lower() != email:
        mail_member(
            session, config, game, old_email, now, "player/replaced.txt.j2", name=old_holder
        )
    who = f"{email}, who joined as {holder}," if holder else email
    if game.state == GamePhase.NEW:
        return (
            f"{game.name}: {player.name}'s seat now belongs to {who} (told; the key comes "
            "with the welcome at the start)"
        )
    return f"{game.name}: {player.name}'s seat now belongs to {who} (a new key was mailed)"


def _mail_seat(
    session: Session,
    config: Config,
    game: Game,
    player: Player,
    holder: str | None,
    order_key: str,
    now: datetime,
) -> None:
    """The new holder's welcome to a running (or paused) game: the key, the seat, and the
    game's state: paused or running, the open round, its deadline, and whether the seat
    has orders in for it already (its previous holder's: they count unless replaced)."""
    round_ = open_round(session, game)
    state = player_state(session, game, player)
    has_orders = round_ is not None and player.name in counting_orders(session, round_, [player])
    enqueue_mail(
        session,
        config,
        game=game,
        kind=MailKind.WELCOME,
        to=player.email,
        now=now,
        template="player/seat.txt.j2",
        secret=True,
        player=player,
        holder=holder,
        order_key=order_key,
        position=state.positions[player.name],
        round=round_,
        deadline=game_time(game, round_.deadline) if round_ else "",
        paused=game.state == GamePhase.PAUSED,
        has_orders=has_orders,
        ruleset=ruleset_of(game).name,
    )


def fill_resigned_seats(session: Session, config: Config, game: Game, now: datetime) -> list[str]:
    """auto_replace: each resigned seat goes to the first on the standby list (a round
    close calls this as it opens the next round)."""
    if not _auto(config, game) or game.state != GamePhase.RUNNING:
        return []
    done = []
    resigned = session.scalars(
        select(Player)
        .where(Player.game_id == game.id, Player.resigned_at.is_not(None), ~Player.active)
        .order_by(Player.resigned_at, Player.id)
    ).all()
    line = iter(signups(session, game, SignupState.STANDBY))
    for player in resigned:
        signup = next(line, None)
        while signup is not None:
            try:  # a savepoint each: a standby that cannot take the seat is passed over
                with session.begin_nested():
                    done.append(
                        replace_seat(
                            session,
                            config,
                            game,
                            player.name,
                            signup.email,
                            now,
                            actor="auto-replace",
                            via=None,
                        )
                    )
                break
            except (LifecycleError, NotFound) as exc:
                signup.state, signup.decided_at, signup.decided_by = (
                    SignupState.REFUSED,
                    now,
                    "auto-replace",
                )
                tell_referee(
                    session,
                    config,
                    game,
                    now,
                    f"{signup.name} could not take a seat",
                    f"auto_replace: {signup.name} <{signup.email}> on the standby list could "
                    f"not take {player.name}'s seat ({exc}); taken off the standby list.",
                )
                signup = next(line, None)
        if signup is None:
            break
        tell_referee(
            session,
            config,
            game,
            now,
            f"{signup.name} took {player.name}'s seat",
            f"auto_replace: {signup.name} <{signup.email}> from the standby list took "
            f"{player.name}'s seat in {game.name}.",
        )
    return done
