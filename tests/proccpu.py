"""Where a machine's CPU goes, from /proc (Linux): a process's, its children's, the whole
machine's. For the benchmarks, which print these beside their rates."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of one process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_busy() -> tuple[float, float]:
    """Busy and total CPU seconds of the whole machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / TICK, sum(ticks) / TICK


def children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def children_cpu(pid: int | None) -> dict[int, float]:
    """CPU so far of each child of ``pid`` (PostgreSQL's backends and workers)."""
    found: dict[int, float] = {}
    for child in children(pid) if pid else []:
        with contextlib.suppress(OSError):  # it just ended
            found[child] = cpu_seconds(child)
    return found


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU so far of a process and of each of its children, by process."""
    return {pid: cpu_seconds(pid), **children_cpu(pid)}


def cpu_since(before: dict[int, float], now: dict[int, float]) -> float:
    """CPU spent between two ``tree_cpu`` (a process started meanwhile: all of its own)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())


def postmaster_pid(data: Path) -> int:
    """The PID of the PostgreSQL whose data directory is ``data``."""
    return int((data / "postmaster.pid").read_text().split()[0])
