"""``among``: a column among a list of values, as an IN list (SQLite) or one array
parameter (PostgreSQL: ``= ANY``, ``<> ALL``), whose statement text does not change with the
list's length. Both give what IN and NOT IN give, for short, long and empty lists."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event, insert, select

from snl_pbem.store import Database, OutboxMessage
from snl_pbem.store.bulk import among

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def mails(db: Database, n: int) -> list[int]:
    rows = [
        {
            "kind": "report",
            "recipient": f"o{i}@example.org",
            "message_id": f"<m{i}@example.org>",
            "message": b"x",
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": T0,
            "created_at": T0,
            "secret": False,
        }
        for i in range(n)
    ]
    with db.transaction() as s:
        s.execute(insert(OutboxMessage), rows)
    with db.transaction() as s:
        return list(s.scalars(select(OutboxMessage.id).order_by(OutboxMessage.id)))


def test_among_is_in_and_not_in_on_both_databases(db: Database) -> None:
    sqlite = db.is_sqlite
    ids = mails(db, 300)
    with db.transaction() as s:
        emails = [f"o{i}@example.org" for i in range(0, 300, 7)]
        for wanted in ([], ids[:1], ids[::3], ids, [-1, *ids[:5]]):
            got = s.scalars(
                select(OutboxMessage.id).where(among(OutboxMessage.id, wanted, sqlite=sqlite))
            )
            assert sorted(got) == sorted(set(wanted) & set(ids))
            rest = s.scalars(
                select(OutboxMessage.id).where(
                    among(OutboxMessage.id, wanted, sqlite=sqlite, negate=True)
                )
            )
            assert sorted(rest) == sorted(set(ids) - set(wanted))
        got_emails = s.scalars(
            select(OutboxMessage.recipient).where(
                among(OutboxMessage.recipient, emails, sqlite=sqlite)
            )
        )
        assert sorted(got_emails) == sorted(emails)


def test_on_postgresql_the_statement_is_one_text_whatever_the_list(db: Database) -> None:
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        with db.transaction() as s:
            for n in (1, 10, 500):
                s.execute(
                    select(OutboxMessage.id).where(
                        among(OutboxMessage.id, range(n), sqlite=db.is_sqlite)
                    )
                )
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
    texts = {s for s in statements if "outbox" in s}
    assert len(texts) == (3 if db.is_sqlite else 1)  # an IN list's placeholders, or one array
