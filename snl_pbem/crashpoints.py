"""Named points where the crash tests may have the server killed (fault injection).

Off unless ``SNL_PBEM_CRASH_POINTS`` is set, e.g.
``imap.stored-not-moved=0.2,close.before-commit=0.3``: each time the process
passes a named point it is killed with SIGKILL with that probability. The
draws are seeded from ``SNL_PBEM_CRASH_SEED`` (a test gives each launch its
own), and each kill is first appended (and synced) to ``SNL_PBEM_CRASH_LOG``,
so a test knows where every kill happened. Random kills from outside can hit a window
of a few microseconds (a commit not yet followed by its MOVE) only by luck;
these points hit it on purpose.

A point costs one dictionary lookup when the variable is unset.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable

POINTS = (
    "imap.stored-not-moved",  # a message committed, its MOVE not yet done (mid-batch)
    "ingest.stored-not-processed",  # stored, not yet parsed and applied
    "close.before-commit",  # the close's writes issued, the transaction not committed
    "close.after-commit",  # closed, the next deadline not yet planned, no mail kicked
    "send.sent-not-recorded",  # the SMTP server said 250, the outbox not yet updated
    "site.written-not-renamed",  # a page's new text in its temporary file, not yet in place
)


def _parse(text: str) -> dict[str, float]:
    armed: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, chance = item.partition("=")
        if name not in POINTS:
            raise ValueError(f"SNL_PBEM_CRASH_POINTS: unknown point {name!r} (known: {POINTS})")
        armed[name] = float(chance or "1")
    return armed


_ARMED = _parse(os.environ.get("SNL_PBEM_CRASH_POINTS", ""))
_RNG = random.Random(os.environ.get("SNL_PBEM_CRASH_SEED") or os.getpid())


def crash_point(name: str, prepare: Callable[[], object] | None = None) -> None:
    """Maybe die here (only when a crash test armed this point); ``prepare`` runs first."""
    chance = _ARMED.get(name)
    if chance is None or _RNG.random() >= chance:
        return
    if prepare is not None:
        prepare()
    log_path = os.environ.get("SNL_PBEM_CRASH_LOG")
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{name}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
