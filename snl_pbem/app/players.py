"""A seated player's own changes: absences, new keys and address moves."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from snl_pbem.app.codes import ask_code
from snl_pbem.app.identity import mailbox, no_person, own_address, same_domain
from snl_pbem.app.lookup import audit, game_time
from snl_pbem.app.membership import game_config, mail_member
from snl_pbem.config import Config, address_problem
from snl_pbem.errors import LifecycleError
from snl_pbem.keys import generate_key, hash_key
from snl_pbem.rules.words import ntr, tr
from snl_pbem.store import (
    AuditEntry,
    Confirmation,
    Game,
    Player,
    Signup,
)
from snl_pbem.store.states import GamePhase, ManagedBy, Purpose, SignupState

ADDRESS_CODES_PER_PLAYER_PER_DAY = 3
"""ADDRESS codes one player may have sent in a day (each goes to an address that has not
shown it wants our mail: with a stolen or a careless key, no more than a few)."""
ADDRESS_CODES_PER_GAME_PER_DAY = 20
"""ADDRESS codes for all players of one game together in a day."""


def absent(
    session: Session,
    config: Config,
    game: Game,
    player: Player,
    until: datetime | None,
    now: datetime,
) -> str:
    """ABSENT UNTIL (``until``) or ABSENT OFF (None). Raises LifecycleError past the
    config's limits (``max_absence`` ahead; ``max_absent`` players of a game at once)."""
    found = game_config(config, game)
    if until is None:
        if player.absent_until is None or player.absent_until <= now:
            player.absent_until = None
            return tr("You were not marked absent; nothing changed.")
        player.absent_until = None
        audit(
            session, now, player.email.lower(), "absent-off", game, player=player.name, via="mail"
        )
        return tr("You are back: reminders start again, and your orders are expected.")
    if game.state == GamePhase.OVER:
        raise LifecycleError(tr("{game} is over.", game=game.name))
    limit = found.settings.max_absence if found else timedelta(days=14)
    most = found.settings.max_absent if found else 3
    if until <= now:
        raise LifecycleError(tr("That date has passed: give a future date."))
    if until > now + limit:
        raise LifecycleError(
            tr(
                "An absence may last at most {length} in this game (until {until} at the "
                "latest). Ask the referee if you need longer.",
                length=_days(limit),
                until=game_time(game, now + limit),
            )
        )
    others = session.scalar(
        select(func.count())
        .select_from(Player)
        .where(
            Player.game_id == game.id,
            Player.active,
            Player.absent_until > now,
            Player.id != player.id,
        )
    )
    if (others or 0) >= most:
        raise LifecycleError(
            ntr(
                "{n} player of {game} is already absent, the most this game allows at once. "
                "Send your orders as usual, or ask the referee.",
                "{n} players of {game} are already absent, the most this game allows at once. "
                "Send your orders as usual, or ask the referee.",
                most,
                game=game.name,
            )
        )
    if player.absent_until is None or player.absent_until <= now:
        player.absences += 1
    player.absent_until = until
    audit(
        session,
        now,
        player.email.lower(),
        "absent",
        game,
        player=player.name,
        until=until.isoformat(),
        via="mail",
    )
    return tr(
        "You are absent until {until}: no reminders, and each round without your orders is "
        "played by the no-orders default without counting against you. Orders you send "
        "still count. Send ABSENT OFF when you are back early.",
        until=game_time(game, until),
    )


def _days(delta: timedelta) -> str:
    """``delta`` in days (``1.5 days``), or in hours when shorter than a day."""
    days = delta.total_seconds() / 86400
    hours = delta.total_seconds() / 3600
    if days >= 1:
        if days == int(days):
            return ntr("{n} day", "{n} days", int(days))
        return tr("{n} days", n=format(days, "g"))  # 1.5 days: a fraction is "days", as in English
    if hours == int(hours):
        return ntr("{n} hour", "{n} hours", int(hours))
    return tr("{n} hours", n=format(hours, "g"))


def is_absent(player: Player, when: datetime) -> bool:
    return player.absent_until is not None and player.absent_until > when


NEW_KEY_AFTER_MOVE = timedelta(days=3)
NEW_KEYS_PER_DAY = 3


def new_key_refusal(session: Session, game: Game, player: Player, now: datetime) -> str | None:
    """Why NEW KEY is not done now. Not within NEW_KEY_AFTER_MOVE of an address move: the
    old address was told of the move, and its owner's key still works to move it back, so
    whoever holds a stolen key cannot also lock the owner out at once."""
    recent = session.scalars(
        select(AuditEntry.action).where(
            AuditEntry.game_id == game.id,
            AuditEntry.action.in_(("address", "new-key")),
            AuditEntry.at > now - NEW_KEY_AFTER_MOVE,
            AuditEntry.detail["player"].as_string() == player.name,
        )
    ).all()
    if "address" in recent:
        return ntr(
            "Your address changed less than {n} day ago: a new key can be asked for after "
            "that. Your key works as before.",
            "Your address changed less than {n} days ago: a new key can be asked for after "
            "that. Your key works as before.",
            NEW_KEY_AFTER_MOVE.days,
        )
    if sum(1 for action in recent if action == "new-key") >= NEW_KEYS_PER_DAY:
        return ntr(
            "You asked for {n} new key lately: ask the referee.",
            "You asked for {n} new keys lately: ask the referee.",
            NEW_KEYS_PER_DAY,
        )
    return None


def new_key(session: Session, game: Game, player: Player, now: datetime) -> str:
    """NEW KEY: a fresh key (the old one stops at once); the caller mails it."""
    order_key = generate_key()
    player.order_key_hash = hash_key(order_key, game.order_key_salt)
    player.order_key_source, player.managed_by = "generated", ManagedBy.MAIL
    audit(session, now, player.email.lower(), "new-key", game, player=player.name, via="mail")
    return order_key


def address_refusal(
    session: Session, config: Config, game: Game, player: Player, new: str
) -> str | None:
    """Why ``player`` cannot move to ``new``: not an address the server can send to; the
    game's own, or its ``+tag`` (our mailbox would read its own code as mail to it); a
    robot's (mailer-daemon@, postmaster@, noreply@: nobody there can confirm, and a code
    there is backscatter); or the mailbox of another player or sign-up of the game (one
    seat per mailbox, as for JOIN: ``mailbox``)."""
    new = new.lower()
    problem = address_problem(new)
    if problem is not None:
        return tr("{problem}.", problem=problem)
    if own_address(config, new):
        return tr("That is one of the game's own addresses: give your own.")
    if no_person(new):
        return tr("Nobody reads mail at that address (it belongs to a mail robot): give your own.")
    if new == player.email.lower():
        return tr("That is already your address.")
    box = mailbox(new)
    for other in session.scalars(
        select(Player.email).where(
            Player.game_id == game.id, Player.id != player.id, same_domain(Player.email, new)
        )
    ):
        if mailbox(other) == box:
            return tr("That address belongs to another player of this game.")
    for waiting in session.scalars(
        select(Signup.email).where(
            Signup.game_id == game.id,
            Signup.state.in_((SignupState.WAITING, SignupState.STANDBY)),
            same_domain(Signup.email, new),
        )
    ):
        if mailbox(waiting) == box:
            return tr("That address has signed up for this game.")
    return None


def address_code_refusal(session: Session, game: Game, player: Player, now: datetime) -> str | None:
    """Why no ADDRESS code goes out now: ADDRESS_CODES_PER_PLAYER_PER_DAY for this player,
    or ADDRESS_CODES_PER_GAME_PER_DAY for the game, in the last day. (One stolen key once
    mailed 260 strangers a code in 260 seconds; the address's own budget bounds each
    stranger, these bound the key and the game.)"""
    sent = list(
        session.scalars(
            select(Confirmation.payload).where(
                Confirmation.game_id == game.id,
                Confirmation.purpose == Purpose.ADDRESS,
                Confirmation.created_at > now - timedelta(days=1),
            )
        )
    )
    mine = sum(1 for payload in sent if payload.get("player_id") == player.id)
    if mine >= ADDRESS_CODES_PER_PLAYER_PER_DAY:
        return ntr(
            "You asked for {n} address code in the last day, the most a player may: try "
            "again tomorrow. Nothing changed.",
            "You asked for {n} address codes in the last day, the most a player may: try "
            "again tomorrow. Nothing changed.",
            mine,
        )
    if len(sent) >= ADDRESS_CODES_PER_GAME_PER_DAY:
        return tr(
            "{game} has sent as many address codes today as it may: try again tomorrow, or "
            "ask the referee. Nothing changed.",
            game=game.name,
        )
    return None


def request_address(session: Session, game: Game, player: Player, new: str, now: datetime) -> str:
    """ADDRESS new: a code to the new address; the move waits for it to come back from
    there with the player's key."""
    return ask_code(session, game, Purpose.ADDRESS, new, now, {"player_id": player.id})


def move_address(
    session: Session, config: Config, game: Game, player: Player, new: str, now: datetime
) -> str:
    old = player.email
    player.email, player.managed_by = new.lower(), ManagedBy.MAIL
    audit(session, now, new.lower(), "address", game, player=player.name, old=old, via="mail")
    mail_member(
        session, config, game, old, now, "player/address_moved.txt.j2", name=player.name, new=new
    )
    return old
