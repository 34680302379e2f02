"""Which process holds a lease or a claim: ``host:pid``, and whether it is gone; and how
the server's processes keep their heap once started (``settle_collector``)."""

from __future__ import annotations

import gc
import os
import socket


def identity() -> str:
    """This process, as it signs leases and claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


def dead_here(owner: str) -> bool:
    """Whether ``host:pid`` is a process of this host that no longer runs, so that a server
    killed and restarted need not wait for its old leases and claims to expire."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


YOUNG_COLLECTED_EVERY = 5000
"""Allocations between two collections of the youngest objects, and 20 young collections
to each of the middle generation's and 20 of those to each of the oldest's: (5000, 20, 20)
against Python's (700, 10, 10)."""


def settle_collector() -> None:
    """Once started: what start-up made (the config, compiled templates and queries, the
    mappers) lives as long as the server, and is kept out of the cycle collector's passes
    (``gc.freeze``); the young are collected less often. A message's mail, its ORM rows and
    its reply are garbage at once and hold few cycles, and the collector's passes over the
    whole heap were 59 us of a message's 0.8 ms of the server's CPU (33 us after; issue 23).
    Start-up's own garbage is collected first: a cycle frozen is never collected."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTED_EVERY, max(middle, 20), max(old, 20))
