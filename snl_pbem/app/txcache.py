"""Reads a transaction's messages share, made once: the intake's batches (several messages
in one transaction, ``snl_pbem.app.intake.batch``) would otherwise read the same game, round
and keys for every message.

A value is kept in the session's ``info`` for as long as nothing it was read from can have
changed. Work that may change it (a referee's command, a sign-up, a player's RESIGN...) runs
inside ``anew``: nothing is kept in it, and everything is read anew after it. A message's
savepoint rolled back forgets it all too (``forget``). A session that never called
``start`` keeps nothing: every call reads anew. The rows read are also kept referenced, so
that ``Session.get`` finds a game or a key again in the session's map instead of asking the
database (the map holds its rows weakly)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.orm import Session

T = TypeVar("T")

_CACHE = "snl_pbem.txcache"
_KEPT = "snl_pbem.txcache.kept"
_OFF = "snl_pbem.txcache.off"


def start(session: Session) -> None:
    """Keep what this session reads, until ``forget`` (idempotent)."""
    if _CACHE in session.info:
        return
    session.info[_CACHE] = {}
    kept: list[object] = []
    session.info[_KEPT] = kept
    info = session.info

    def keep(_session: Session, instance: object) -> None:
        if not info.get(_OFF):  # within ``anew`` the session works as it does without us
            kept.append(instance)

    event.listen(session, "loaded_as_persistent", keep)


def remember(session: Session, key: Hashable, load: Callable[[], T]) -> T:
    """``load()``, made once while the session keeps what it reads (``start``)."""
    cache: dict[Hashable, Any] | None = session.info.get(_CACHE)
    if cache is None or session.info.get(_OFF):
        return load()
    if key in cache:
        value: T = cache[key]
        return value
    value = cache[key] = load()
    return value


def forget(session: Session) -> None:
    """Read everything anew from now on (something may have changed it)."""
    cache = session.info.get(_CACHE)
    if cache is not None:
        cache.clear()
        session.info[_KEPT].clear()


@contextmanager
def anew(session: Session) -> Iterator[None]:
    """Around work that may change what was kept (a round closed, a game started, a seat
    changed hands): everything is read anew in it, and after it."""
    forget(session)
    session.info[_OFF] = session.info.get(_OFF, 0) + 1
    try:
        yield
    finally:
        session.info[_OFF] -= 1
        forget(session)


def keeping(session: Session) -> bool:
    """Whether the session keeps what is read now (``start``d, and not within ``anew``)."""
    return _CACHE in session.info and not session.info.get(_OFF)


def put(session: Session, key: Hashable, value: object) -> None:
    """Keep ``value`` as what ``key`` would read (read ahead for several messages at once);
    nothing is kept while the session keeps nothing (see ``remember``)."""
    cache: dict[Hashable, Any] | None = session.info.get(_CACHE)
    if cache is not None and not session.info.get(_OFF):
        cache[key] = value


def peek(session: Session, key: Hashable) -> Any:
    """What is kept for ``key``, or None (then read it)."""
    cache: dict[Hashable, Any] | None = session.info.get(_CACHE)
    if cache is None or session.info.get(_OFF):
        return None
    return cache.get(key)
