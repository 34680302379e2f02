"""Durations, deadlines and time zones, as the referee writes them in the config.

Times are kept in UTC and shown in a game's time zone. A schedule runs on the
game's wall clock: "every 3 days at 18:00" stays at 18:00 across a change of
daylight-saving time. Once a deadline is stored (in UTC) nothing moves it but
the referee.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+)\s*([wdhms])")


def parse_duration(text: object) -> timedelta:
    """``"90s"``, ``"12h"``, ``"3d"``, ``"1d12h"`` as a timedelta; ValueError otherwise."""
    if isinstance(text, timedelta):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f'{text!r} is not a duration (write e.g. "90s", "12h", "3d")')
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f'{text!r} is not a duration (write e.g. "90s", "12h", "3d")')
    return timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in parts))


def format_duration(delta: timedelta) -> str:
    """A duration the way the config writes it: ``3d``, ``1d12h``, ``90s``."""
    seconds = int(delta.total_seconds())
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in _UNITS.items():
        if unit == "w":
            continue
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


def zone(name: str) -> ZoneInfo:
    """A time zone by IANA name; ValueError naming it when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f'{name!r} is not a time zone (use a name like "Europe/London")') from None


def parse_time(value: object, tz: ZoneInfo) -> datetime:
    """An ISO 8601 time, with an offset or local to ``tz``, as an aware UTC datetime."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f'{value!r} is not a time (write e.g. "2026-12-05T18:00" or '
                '"2026-12-05T18:00+01:00")'
            ) from None
    else:
        raise ValueError(f"{value!r} is not a time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.astimezone(UTC)


def wall_clock_add(start: datetime, delta: timedelta, tz: ZoneInfo) -> datetime:
    """``start + delta`` on the wall clock of ``tz``: 18:00 stays 18:00 across DST."""
    local = start.astimezone(tz).replace(tzinfo=None) + delta
    return local.replace(tzinfo=tz).astimezone(UTC)


def show(moment: datetime, tz: ZoneInfo) -> str:
    """A time for people, in ``tz``: ``Sat 5 Dec 2026 18:00 GMT``, with the seconds when it
    has any (``Sat 5 Dec 2026 18:03:27 GMT``: a deadline moved by a pause keeps them).

    The one format of every time the commands print and the mail shows. Kept for the
    times shown again (a round's deadline, in every acknowledgement of its orders): by
    the instant, in UTC (two times equal but for ``fold``, an hour apart, are two), and
    only for a zone of the zone database (fixed offsets of different names compare
    equal); a naive time is never kept (it is read in the machine's zone).
    """
    if moment.tzinfo is None or type(tz) is not ZoneInfo:
        return _shown(moment, tz)
    return _kept_shown(moment.astimezone(UTC), tz)


def _shown(moment: datetime, tz: ZoneInfo) -> str:
    local = moment.astimezone(tz)
    clock = f"{local:%H:%M:%S}" if local.second else f"{local:%H:%M}"
    return f"{local:%a} {local.day} {local:%b %Y} {clock} {local.tzname()}"


_kept_shown = lru_cache(maxsize=4096)(_shown)


def utcnow() -> datetime:
    """The current time, aware, in UTC (service code takes a clock; this is the real one)."""
    return datetime.now(UTC)
