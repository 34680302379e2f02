"""The tables. Constraints make duplicates impossible, not merely unlikely.

- one inbound row per raw message (SHA-256) and per (source, UIDVALIDITY, UID);
- one result per (round, player, turn); one tally per round;
- one round per (game, number) and at most one *open* round per game.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every database (SQLite keeps no zone, so store naive UTC)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give times in UTC with a zone")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class Game(Base):
    """A game and its settings, as last synced from the config."""

    __tablename__ = "games"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column("key", String(32), unique=True)
    """The game id (the config's ``id``, ``spring26``; stored in the column ``key``, its
    name before the glossary said a game id is never a key)."""
    title: Mapped[str] = mapped_column(String(200), default="")
    state: Mapped[str] = mapped_column(String(16), default="new")
    """new (not started), running, paused, over."""
    timezone: Mapped[str] = mapped_column(String(64))
    board: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The [board] table; fixed when the game starts."""
    schedule: Mapped[dict[str, Any]] = mapped_column(JSON)
    """first, explicit deadlines and round_length, as synced from the config."""
    schedule_shift_s: Mapped[int] = mapped_column(Integer, default=0)
    """Seconds every later scheduled deadline moves (pauses)."""
    double_from_round: Mapped[int] = mapped_column(Integer, default=7)
    trapdoor_rule: Mapped[str] = mapped_column(String(16), default="all")
    ruleset: Mapped[str] = mapped_column(String(32), default="postal", server_default="postal")
    """The game's ruleset (snl_pbem.rules.ruleset): "postal" unless the config says."""
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    """The ruleset's own options as the config gave them, checked (classic: C-options)."""
    seed: Mapped[int] = mapped_column(BigInteger, default=0)
    remind_before_s: Mapped[int | None] = mapped_column(Integer)
    close_when_all_in: Mapped[bool] = mapped_column(Boolean, default=False)
    settle_s: Mapped[int] = mapped_column(Integer, default=600)
    reveal_after_game: Mapped[bool] = mapped_column(Boolean, default=False)
    extended_s: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Seconds the referee has extended this game's deadlines by in all (``max_total_extend``
    caps it)."""
    start_noted_at: Mapped[datetime | None]
    """When the referee was told the game could not start at its ``starts`` time (too few
    players): told once."""
    order_key_salt: Mapped[str] = mapped_column("key_salt", String(64))
    """Salt of the players' key hashes (hex)."""
    rounds_played: Mapped[int] = mapped_column(Integer, default=0)
    turns_played: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    paused_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]

    players: Mapped[list[Player]] = relationship(back_populates="game", order_by="Player.id")
    rounds: Mapped[list[Round]] = relationship(back_populates="game", order_by="Round.number")


class Player(Base):
    __tablename__ = "players"
    __table_args__ = (
        UniqueConstraint("game_id", "name"),
        # a key finds its player: no two players of a game may share one
        UniqueConstraint("game_id", "key_hash"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    email: Mapped[str] = mapped_column(String(254))
    order_key_hash: Mapped[str | None] = mapped_column("key_hash", String(80))
    """The order key's salted hash (see snl_pbem.keys); never the key itself."""
    order_key_source: Mapped[str] = mapped_column("key_source", String(16), default="generated")
    """"config" (the referee chose it) or "generated" (mailed in the welcome)."""
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    """False once removed from the config or resigned: kept with its history, never
    deleted; the seat plays on by the no-orders default and is sent no mail."""
    joined_at: Mapped[datetime]
    managed_by: Mapped[str] = mapped_column(String(16), default="config", server_default="config")
    """"config" (the config's players table governs its address and key) or "mail" (joined
    by JOIN, or changed by mail or by the referee since: the config no longer overrides it)."""
    resigned_at: Mapped[datetime | None]
    """Set by a confirmed RESIGN: the seat plays on by the no-orders default until the
    referee or the standby list fills it (``replace``)."""
    absent_until: Mapped[datetime | None]
    """ABSENT UNTIL: no reminders, and the no-orders default does not count against them."""
    absences: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How many absences the player has declared in this game."""
    language: Mapped[str | None] = mapped_column(String(16))
    """The language of their mail (snl_pbem.i18n); None: the game's."""

    game: Mapped[Game] = relationship(back_populates="players")


Index("ix_players_lower_email", func.lower(Player.email))
"""A sender's seats in every game, found by address as written in any case (what we sent
them, a JOIN, a key from another address): without it each such look-up read every player
on the server, 42 ms a batch at 100,000 players (issue 23). (SQLite cannot reflect it: a
migration that recreates the players table there must create it again; see 0009.)"""


class Round(Base):
    __tablename__ = "rounds"
    __table_args__ = (
        UniqueConstraint("game_id", "number"),
        # At most one open round per game, enforced by the database itself.
        Index(
            "uq_rounds_one_open_per_game",
            "game_id",
            unique=True,
            sqlite_where=text("state = 'open'"),
            postgresql_where=text("state = 'open'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    turns: Mapped[int] = mapped_column(Integer)
    deadline: Mapped[datetime]
    deadline_source: Mapped[str] = mapped_column(String(16), default="schedule")
    """schedule (follows the config) or referee (set by extend/pause)."""
    state: Mapped[str] = mapped_column(String(16), default="open")
    """open, closed."""
    opened_at: Mapped[datetime]
    closed_at: Mapped[datetime | None]
    closed_by: Mapped[str | None] = mapped_column(String(64))
    held_at: Mapped[datetime | None]
    """Set when the deadline passed while mail intake was unhealthy (the circuit breaker)."""
    reminded_at: Mapped[datetime | None]

    game: Mapped[Game] = relationship(back_populates="rounds")


class OrderRecord(Base):
    """Every order set received, valid or not; the latest before the deadline counts."""

    __tablename__ = "order_sets"
    __table_args__ = (Index("ix_order_sets_round_player", "round_id", "player_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"))
    player_id: Mapped[int] = mapped_column(ForeignKey("players.id", ondelete="CASCADE"))
    inbound_id: Mapped[int | None] = mapped_column(
        ForeignKey("inbound_messages.id", ondelete="SET NULL")
    )
    received_at: Mapped[datetime]
    source: Mapped[str] = mapped_column(String(16), default="email")
    dice: Mapped[str] = mapped_column(String(64))
    """The dice as sent, space-separated (``4 2``); see :func:`dice_text`."""
    nomination: Mapped[int | None] = mapped_column("trapdoor", Integer)
    """The space the TRAPDOOR line named (stored in the column ``trapdoor``); a trapdoor
    only if the tally makes it one (R8-R10)."""
    valid: Mapped[bool] = mapped_column(Boolean)
    problems: Mapped[list[Any]] = mapped_column(JSON, default=list)
    withdrawn: Mapped[bool] = mapped_column(Boolean, default=False)
    """CLEAR: the player withdrew this round's orders (counts as none)."""


def dice_text(dice: Sequence[int]) -> str:
    """Dice as stored in order_sets.dice: ``4 2``."""
    return " ".join(str(int(d)) for d in dice)


def dice_values(text: str) -> tuple[int, ...]:
    """The dice of an order_sets.dice value."""
    return tuple(int(d) for d in text.split())


class RoundTally(Base):
    """The private record of a closed round: nominations, votes, trapdoors, NMRs."""

    __tablename__ = "round_tallies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"), unique=True)
    nominations: Mapped[dict[str, Any]] = mapped_column(JSON)
    defaulted: Mapped[list[Any]] = mapped_column(JSON)
    votes: Mapped[dict[str, Any]] = mapped_column(JSON)
    threshold: Mapped[int] = mapped_column(Integer)
    trapdoors: Mapped[list[Any]] = mapped_column(JSON)
    by_lot: Mapped[bool] = mapped_column(Boolean, default=False)
    nmr: Mapped[dict[str, Any]] = mapped_column(JSON)
    """player name -> why the referee moved for them (R17/R18)."""
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    record: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """The ruleset's own record of the round (classic: every throw, and the state after
    it); None for the postal game, whose record is the columns above."""
    adjudicated_at: Mapped[datetime]


class TurnRecord(Base):
    """One player's move in one turn (private)."""

    __tablename__ = "turn_results"
    __table_args__ = (
        UniqueConstraint("round_id", "player_id", "turn"),
        Index("ix_turn_results_game_turn", "game_id", "turn"),
        Index("ix_turn_results_player_turn", "player_id", "turn"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"))
    player_id: Mapped[int] = mapped_column(ForeignKey("players.id", ondelete="CASCADE"))
    turn: Mapped[int] = mapped_column(Integer)
    die: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(Integer)
    target: Mapped[int] = mapped_column(Integer)
    final: Mapped[int] = mapped_column(Integer)
    events: Mapped[str] = mapped_column(Text, default="")
    """What happened after the die, e.g. ``ladder 4→14; trapdoor 45→36`` ("" for nothing)."""


class InboundMessage(Base):
    """Every message that reached the server, stored before it is acted on."""

    __tablename__ = "inbound_messages"
    __table_args__ = (
        UniqueConstraint("source", "uidvalidity", "uid"),
        # a sender's mail of the last day (the per-sender storage cap), and the wrong keys
        Index("ix_inbound_messages_sender_received_at", "sender", "received_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[str | None] = mapped_column(String(998), index=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    source: Mapped[str] = mapped_column(String(200))
    uidvalidity: Mapped[int | None] = mapped_column(BigInteger)
    uid: Mapped[int | None] = mapped_column(BigInteger)
    received_at: Mapped[datetime]
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    status: Mapped[str] = mapped_column(String(16), default="new")
    """new, processed, rejected, ignored, duplicate, set-aside (kept for the referee)."""
    error: Mapped[str | None] = mapped_column(Text)
    """Why it was rejected or ignored, or the traceback of a processing failure."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    sender: Mapped[str | None] = mapped_column(String(254))
    auth_results: Mapped[str | None] = mapped_column(Text)
    """Authentication-Results added by the referee's own MTA (others are not trusted)."""
    game_id: Mapped[int | None] = mapped_column(ForeignKey("games.id", ondelete="SET NULL"))
    player_id: Mapped[int | None] = mapped_column(ForeignKey("players.id", ondelete="SET NULL"))


class MailboxState(Base):
    """One mail intake's health and its lease (only one process polls a mailbox)."""

    __tablename__ = "mailbox_state"

    source: Mapped[str] = mapped_column(String(200), primary_key=True)
    uidvalidity: Mapped[int | None] = mapped_column(BigInteger)
    last_ok_at: Mapped[datetime | None]
    """The last complete, successful poll: the round closer's health signal."""
    healthy_since: Mapped[datetime | None]
    """The first good poll after the last failure (None while failing)."""
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None]
    owner: Mapped[str | None] = mapped_column(String(100))
    lease_until: Mapped[datetime | None]


class PlanChange(Base):
    """A change that may move a game's jobs (a round opened, closed, held, reminded or
    moved; the game paused, resumed or ended), written by database triggers (migration
    0007), whichever process or command made it. The scheduler reads the changes since it
    last looked and re-plans those games only (``snl_pbem.app.schedule.plan_changes``).
    ``tx`` is the writing transaction's id on PostgreSQL (None on SQLite, whose one writer
    at a time makes ``id`` the commit order)."""

    __tablename__ = "plan_changes"
    __table_args__ = (Index("ix_plan_changes_tx", "tx"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(Integer)
    tx: Mapped[int | None] = mapped_column(BigInteger)


class OutboxMessage(Base):
    """A message to send; marked sent only after the server's 250."""

    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_status_next_attempt", "status", "next_attempt_at"),
        Index("ix_outbox_recipient_status_id", "recipient", "status", "id"),
        # the latest mail that gave a sender a key, however old, read from the newest
        # without reading their whole history (snl_pbem.app.intake.reading._latest_to)
        Index(
            "ix_outbox_recipient_secret",
            "recipient",
            "status",
            "id",
            sqlite_where=text("secret = 1"),
            postgresql_where=text("secret"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int | None] = mapped_column(ForeignKey("games.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(32))
    recipient: Mapped[str] = mapped_column(String(254))
    message_id: Mapped[str] = mapped_column(String(250), unique=True)
    message: Mapped[bytes] = mapped_column(LargeBinary)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    """pending, sent, failed (permanent, shown to the referee)."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    sent_at: Mapped[datetime | None]
    secret: Mapped[bool] = mapped_column(Boolean, default=False)
    """Holds an order key: the body is scrubbed once sent."""
    fingerprint: Mapped[str | None] = mapped_column(Text)
    """The digests of its lines (``snl_pbem.mail.ours.fingerprint``: no text, no key),
    written with it: its recipient's next messages are compared with it. None in mail
    written before it was kept (worked out from the body when needed)."""
    claimed_by: Mapped[str | None] = mapped_column(String(100))
    claim_until: Mapped[datetime | None]
    """A sender working on this message; another may take it over once this passes."""


class Signup(Base):
    """A confirmed sign-up for a game: waiting for the referee (approval), on the standby
    list, seated, refused or withdrawn. (Unconfirmed ones are only a Confirmation.)"""

    __tablename__ = "signups"
    __table_args__ = (Index("ix_signups_game_state", "game_id", "state", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    email: Mapped[str] = mapped_column(String(254))
    state: Mapped[str] = mapped_column(String(16))
    """waiting (for approval), standby, seated, refused, withdrawn (see SignupState)."""
    created_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    decided_by: Mapped[str | None] = mapped_column(String(254))
    player_id: Mapped[int | None] = mapped_column(ForeignKey("players.id", ondelete="SET NULL"))
    language: Mapped[str | None] = mapped_column(String(16))
    """Asked for with JOIN (or the language the JOIN was written in); the seat takes it."""


class Confirmation(Base):
    """Something asked by mail that waits for a second message: a code mailed to an address
    (a sign-up, an observer, a new address), or a resignation to confirm. Only a message
    from ``email`` can complete it; the code is stored hashed, like keys."""

    __tablename__ = "confirmations"
    __table_args__ = (Index("ix_confirmations_email_purpose", "email", "purpose"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    purpose: Mapped[str] = mapped_column(String(16))
    """join, observe, address, resign."""
    email: Mapped[str] = mapped_column(String(254))
    """The address the code went to; the confirmation must come from it (lower case)."""
    code_hash: Mapped[str | None] = mapped_column(String(80))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    wrong: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Wrong codes counted against it (a few an hour at most: then it rests, never void;
    the hour's count is in ``payload``: ``codes.check_code``)."""


class Observer(Base):
    """Someone not playing who gets each round's public report (OBSERVE, confirmed)."""

    __tablename__ = "observers"
    __table_args__ = (UniqueConstraint("game_id", "email"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[int] = mapped_column(ForeignKey("games.id", ondelete="CASCADE"))
    email: Mapped[str] = mapped_column(String(254))
    since: Mapped[datetime]
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    language: Mapped[str | None] = mapped_column(String(16))
    """The language of their reports (the one their OBSERVE was written in); None: the
    game's."""


class ServerKey(Base):
    """A server-wide secret, hashed like order keys: the referee's key (``mail.referee_key``
    in the config), which referee commands by mail must carry."""

    __tablename__ = "server_keys"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(80))
    salt: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime]


class AuditEntry(Base):
    """Every referee/GM action and every automatic state change of a game."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_game_id_action", "game_id", "action"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    game_id: Mapped[int | None] = mapped_column(ForeignKey("games.id", ondelete="SET NULL"))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    via: Mapped[str | None] = mapped_column(String(16))
    """How a person's action came: "cli" (the command line) or "mail"; None for the
    server's own (scheduler, intake, config sync)."""
