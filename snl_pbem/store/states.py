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
    SET_ASIDE = "failed"
    """Could not be read or applied: kept for the referee (``inbound list``, ``retry``).
    Stored as "failed", the word of the first schema."""


class OutboxStatus(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    """Refused for good, or retried until it gave up: the referee is told."""
    BOUNCED = "bounced"


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
