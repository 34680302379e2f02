"""Which process holds a lease or a claim: ``host:pid``, and whether it is gone."""

from __future__ import annotations

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
