"""What the referee commands print (issue 12): every time in one format, ``timeutil.show``,
on SQLite and PostgreSQL; and a moved deadline is told to the players."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from snl_pbem.cli import referee as cli_referee
from snl_pbem.cli.main import main
from snl_pbem.store import Database, OutboxMessage


def test_extend_and_resume_print_the_deadline_in_one_format(
    make_config, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(extra='max_extend = "200d"\nmax_total_extend = "300d"\n')  # to July
    cfg = ("--config", str(config.path))
    clock = [datetime(2029, 12, 1, 12, 0, tzinfo=UTC)]
    monkeypatch.setattr(cli_referee, "utcnow", lambda: clock[0])
    assert main(["db", "upgrade", *cfg]) == 0
    assert main(["start", "g1", *cfg]) == 0
    capsys.readouterr()
    assert main(["extend", "g1", "--by", "1d", *cfg]) == 0
    assert capsys.readouterr().out == "g1: deadline now Sat 5 Jan 2030 18:00 GMT\n"
    assert main(["pause", "g1", *cfg]) == 0
    clock[0] += timedelta(hours=1, minutes=2, seconds=3)
    capsys.readouterr()
    assert main(["resume", "g1", *cfg]) == 0
    assert capsys.readouterr().out == "g1: resumed; deadline now Sat 5 Jan 2030 19:02:03 GMT\n"
    assert main(["extend", "g1", "--until", "2030-07-01T18:00:30", *cfg]) == 0
    assert capsys.readouterr().out == "g1: deadline now Mon 1 Jul 2030 18:00:30 BST\n"
    db = Database(config.database_url)
    try:  # three moves of the deadline and the pause, each told to the three players once
        with db.transaction() as s:
            kind = OutboxMessage.kind == "deadline"
            assert s.scalar(select(func.count()).select_from(OutboxMessage).where(kind)) == 12
    finally:
        db.dispose()


def test_a_time_shown_again_is_the_same_instant_and_zone_name() -> None:
    """``show`` keeps what it showed, by instant and zone: the hour a clock goes back is
    shown twice, each time with its own zone name; fixed offsets of different names, and
    naive times, are not kept."""
    from datetime import timezone
    from zoneinfo import ZoneInfo

    from snl_pbem.timeutil import show

    london = ZoneInfo("Europe/London")
    first = datetime(2026, 10, 25, 1, 30, tzinfo=london)  # 00:30 UTC, BST
    second = first.replace(fold=1)  # 01:30 UTC, GMT: equal to the first, as Python compares
    assert show(first, london) == "Sun 25 Oct 2026 01:30 BST"
    assert show(second, london) == "Sun 25 Oct 2026 01:30 GMT"
    assert show(first.astimezone(UTC), london) == "Sun 25 Oct 2026 01:30 BST"
    noon = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    named, plain = timezone(timedelta(hours=1), "CET"), timezone(timedelta(hours=1))
    assert show(noon, named) == "Sat 5 Dec 2026 13:00 CET"  # type: ignore[arg-type]
    assert show(noon, plain) == "Sat 5 Dec 2026 13:00 UTC+01:00"  # type: ignore[arg-type]
