"""The one way mail enters: ``ingest(raw, received_at, source)``, a pipeline of named
steps (pipeline.py says which, in order; each module is one step).

Every intake (IMAP, LMTP/SMTP, a file) calls it. It first stores the raw message and
commits (only then may the caller acknowledge it to its source), then reads it in the
sandbox and processes it in a second transaction. What the caller learns is an
``IngestResult``: the status, the game, whether the message started it and whether every
order of its open round is now in."""

from __future__ import annotations

import snl_pbem.app.commands  # noqa: F401 (registers every command; HELP's text lists them)
from snl_pbem.app.intake.authenticate import (
    WRONG_KEYS_PER_GAME_PER_HOUR,
    WRONG_KEYS_PER_SENDER_PER_HOUR,
)
from snl_pbem.app.intake.batch import process_batch, waiting_sizes
from snl_pbem.app.intake.context import IngestResult
from snl_pbem.app.intake.pipeline import (
    MAX_ATTEMPTS,
    ingest,
    process_now,
    process_pending,
    process_stored,
    retry_set_aside,
)
from snl_pbem.app.intake.reading import SENT_COMPARED
from snl_pbem.app.intake.reply import TRIMMED_BYTES
from snl_pbem.app.intake.store import MAX_STORED_BYTES, TOO_LARGE

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_STORED_BYTES",
    "SENT_COMPARED",
    "TOO_LARGE",
    "TRIMMED_BYTES",
    "WRONG_KEYS_PER_GAME_PER_HOUR",
    "WRONG_KEYS_PER_SENDER_PER_HOUR",
    "IngestResult",
    "ingest",
    "process_batch",
    "process_now",
    "process_pending",
    "process_stored",
    "retry_set_aside",
    "waiting_sizes",
]
