"""Storage: SQLAlchemy 2.x models, the database handle and its one transaction helper.

Nothing here knows the rules or mail beyond the shapes it stores; the service
layer moves data between them inside :meth:`Database.transaction`.
"""

from snl_pbem.store.db import Database, SchemaOutOfDate
from snl_pbem.store.models import (
    AuditEntry,
    Base,
    Confirmation,
    Game,
    InboundMessage,
    MailboxState,
    Observer,
    OrderRecord,
    OutboxMessage,
    PlanChange,
    Player,
    Round,
    RoundTally,
    ServerKey,
    Signup,
    TurnRecord,
)

__all__ = [
    "AuditEntry",
    "Base",
    "Confirmation",
    "Database",
    "Game",
    "InboundMessage",
    "MailboxState",
    "Observer",
    "OrderRecord",
    "OutboxMessage",
    "PlanChange",
    "Player",
    "Round",
    "RoundTally",
    "SchemaOutOfDate",
    "ServerKey",
    "Signup",
    "TurnRecord",
]
