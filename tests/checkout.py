"""Which snl_pbem a bench measures: the package it imported, and whether that is the
checkout the bench itself is in.

A second checkout (a ``git worktree`` of an older commit, to time it against this one)
that shares this one's virtual environment imports this one's package: the environment's
editable install points at it, and a script's own folder comes first in its path, not the
checkout's. Such an "A/B" times the same code twice. Run the other checkout's benches with
``PYTHONPATH=<that checkout>``: its package is then found first."""

from __future__ import annotations

from pathlib import Path

import snl_pbem


def code_under_test(bench: str) -> str:
    """A line for a bench's header: where its snl_pbem comes from, and a warning when that
    is not the checkout of ``bench`` (its ``__file__``)."""
    package = Path(snl_pbem.__file__).resolve().parent
    checkout = Path(bench).resolve().parents[2]
    if package.parent == checkout:
        return f"snl_pbem from {package}"
    return (
        f"snl_pbem from {package}: NOT this checkout's ({checkout}); "
        f"run with PYTHONPATH={checkout} to time its code"
    )
