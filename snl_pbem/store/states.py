"""The states things pass through, named once. Stored as these strings (a StrEnum equals
its value), so the names are for the code and the values are the data, unchanged."""

from __future__ import annotations

from enum import StrEnum


class GamePhase(StrEnum):
    NEW = "new"
    """Configured, not started."""
    RUNNING = "running"
    PAUSED = "paused"
    """The referee stopped the clock."""
    OVER = "over"


class RoundPhase(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class InboundStatus(StrEnum):
    NEW = "new"
    """Stored, not yet processed."""
    PROCESSED = "processed"
    REJECTED = "rejected"
    """Read and answered, but nothing in it applied (late, wrong key, no orders...)."""
    IGNORED = "ignored"
    """Robots' mail (bounces, auto-replies): never answered."""
    DUPLICATE = "duplicate"
    SET_ASIDE = "set-aside"
    """Could not be read or applied: kept for the referee (``inbound list``, ``retry``).
    Stored as "failed" before migration 0006 (the outbox's word for mail it gave up on)."""


class OutboxStatus(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    """Refused for good, or retried until it gave up: the referee is told."""
    BOUNCED = "bounced"


class SignupState(StrEnum):
    WAITING = "waiting"
    """Confirmed; the referee has not yet approved or refused it (signup = "approval")."""
    STANDBY = "standby"
    """The game was full: first in line for a seat that frees."""
    SEATED = "seated"
    REFUSED = "refused"
    WITHDRAWN = "withdrawn"


class Purpose(StrEnum):
    """What a Confirmation completes."""

    JOIN = "join"
    OBSERVE = "observe"
    ADDRESS = "address"
    RESIGN = "resign"


class ManagedBy(StrEnum):
    CONFIG = "config"
    MAIL = "mail"


class MailKind(StrEnum):
    """What a message we send is, for the outbox, the rate limits and the referee."""

    WELCOME = "welcome"
    ACK = "ack"
    NOTICE = "notice"
    HELP = "help"
    STATUS = "status"
    GUEST_HELP = "guest-help"
    GUEST_NOTICE = "guest-notice"
    REMINDER = "reminder"
    REPORT = "report"
    GAME_OVER = "game-over"
    DEADLINE = "deadline"
    REFEREE_SUMMARY = "referee-summary"
    ROUND_HELD = "round-held"
    KEY_GUESSING = "key-guessing"
    BOUNCE_ALERT = "bounce-alert"
    DELIVERY_FAILURE = "delivery-failure"
    LIST = "list"
    """The LIST reply (to anyone, on the guests' budget)."""
    CODE = "code"
    """A confirmation code to an address that has not shown it is theirs yet."""
    ADDRESS_CODE = "address-code"
    """The code of a player's ADDRESS change, to the new address (asked with a key: a
    budget of its own, which strangers' sign-ups cannot use up)."""
    GUEST_REPLY = "guest-reply"
    """An answer to JOIN, CONFIRM, OBSERVE from an address not yet shown to be a player's."""
    GUEST_NOTE = "guest-note"
    """A note about codes to the address that asked (a code is pending, too many codes, a
    wrong code, codes resting): each at most once an hour, so a forger writing in the
    address's name cannot use up its answers."""
    MEMBERSHIP = "membership"
    """What became of a sign-up, a resignation, an absence, a key or address change."""
    OBSERVER_REPORT = "observer-report"
    REFEREE_REPLY = "referee-reply"
    """The answer to a referee command by mail."""
    REFEREE_NOTICE = "referee-notice"
    """Sign-ups, resignations and starts the referee should know of."""
