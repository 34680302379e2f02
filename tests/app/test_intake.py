"""Answering every order: the cases a player meets, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mailhelpers import OPENED, T0, orders_of, replies_since
from sqlalchemy import delete, select, text

from snl_pbem.app.intake import ingest, process_pending
from snl_pbem.app.intake import pipeline as intake_module
from snl_pbem.app.intake import reply as reply_module
from snl_pbem.app.referee import pause
from snl_pbem.app.rounds import close_round
from snl_pbem.mail import parse as parse_module
from snl_pbem.store import InboundMessage, OrderRecord


def mail(
    body: str, sender: str = "ann@example.org", subject: str = "[g1] orders", tag: str = "x"
) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: {subject}\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
    ).encode()


def stored_unprocessed(db, raw: bytes, fill: str) -> int:
    """A message stored and never processed (the server died right after the first commit),
    as ingest stores it; returns its number."""
    with db.transaction() as s:
        row = InboundMessage(
            sha256=fill * 64, source="t", received_at=T0, status="new", attempts=0, raw=raw
        )
        s.add(row)
        s.flush()
        return row.id


def last_reply(db) -> str:
    replies = replies_since(db, T0)
    return replies[-1].message.decode() if replies else ""


def test_wrong_round_paused_and_late_change_nothing(intake) -> None:
    db, config = intake
    r = ingest(db, config, mail("KEY ann-key-123\nROUND 3\nDICE 4", tag="a"), T0, "t")
    assert r.status == "rejected" and "round open now is round 1" in last_reply(db)
    late = T0.replace(year=2030, month=2)
    r = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="b"), late, "t")
    assert r.status == "rejected" and "after round 1's deadline" in last_reply(db)
    pause(db, "g1", T0)
    r = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="c"), T0, "t")
    assert r.status == "rejected" and "The game is paused" in last_reply(db)
    assert orders_of(db) == []


def test_status_help_and_clear(intake) -> None:
    db, config = intake
    ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="a"), T0, "t")
    assert (
        ingest(db, config, mail("KEY ann-key-123\nSTATUS", tag="b"), T0, "t").status == "processed"
    )
    status = last_reply(db)
    assert "Your position: 0" in status and "Your orders for it: dice 4, valid" in status
    ingest(db, config, mail("KEY ann-key-123\nHELP", tag="c"), T0, "t")
    assert "How to send orders for Test game" in last_reply(db)
    ingest(db, config, mail("KEY ann-key-123\nCLEAR", tag="d"), T0, "t")
    assert "Your orders for round 1 are withdrawn" in last_reply(db)
    outcome = close_round(db, "g1", T0.replace(year=2030, month=2))
    assert outcome is not None and outcome.result.nmr["ann"].cause.value == "no-orders"


def test_trapdoor_only_replaces_the_whole_order(intake) -> None:
    db, config = intake
    ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="a"), T0, "t")
    ingest(db, config, mail("KEY ann-key-123\nTRAPDOOR 30", tag="b"), T0, "t")
    reply = last_reply(db)
    assert "no DICE line" in reply and "Dice: NOT VALID" in reply and "space 30" in reply


def test_unknown_game_replies_only_to_registered_senders(intake) -> None:
    db, config = intake
    assert (
        ingest(db, config, mail("GAME nope\nKEY x\nDICE 1", tag="a"), T0, "t").status == "rejected"
    )
    assert "names a game that is not on this server" in last_reply(db)  # no echo of it
    before = len(replies_since(db, T0))
    ingest(db, config, mail("GAME nope\nDICE 1", sender="stranger@else.example", tag="b"), T0, "t")
    assert len(replies_since(db, T0)) == before  # no backscatter


def test_replies_are_rate_limited_but_every_order_is_acknowledged(intake) -> None:
    """An authenticated order is always acknowledged; other replies (STATUS, notices) to
    one player stop at replies_per_hour."""
    db, config = intake
    limit = config.settings.mail.replies_per_hour
    for i in range(limit + 5):
        ingest(
            db,
            config,
            mail(f"KEY ann-key-123\nDICE {1 + i % 6}", tag=f"f{i}"),
            T0 + timedelta(seconds=i),
            "t",
        )
    assert len(orders_of(db)) == limit + 5
    assert len(replies_since(db, T0)) == limit + 5
    for i in range(3):
        status = mail("KEY ann-key-123\nSTATUS", tag=f"s{i}")
        ingest(db, config, status, T0 + timedelta(minutes=1), "t")
    assert [r.kind for r in replies_since(db, T0)].count("status") == 0  # over the limit


def test_a_crash_in_processing_is_kept_for_the_referee(intake, monkeypatch) -> None:
    db, config = intake

    def broken(ctx):
        raise RuntimeError("a bug in the parser")

    monkeypatch.setattr(intake_module, "_dispatch", broken)
    result = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="crash"), T0, "t")
    assert result.status == "set-aside" and result.stored
    with db.transaction() as s:
        row = s.scalar(select(InboundMessage).where(InboundMessage.id == result.inbound_id))
        assert row.status == "set-aside" and "RuntimeError: a bug in the parser" in row.error
        assert b"DICE 4" in row.raw  # nothing lost: the message itself is kept
    monkeypatch.undo()
    # the server carries on with the next message
    assert (
        ingest(
            db, config, mail("KEY bob-key-123\nDICE 2", "bob@example.org", tag="n"), T0, "t"
        ).status
        == "processed"
    )


def test_a_failure_keeping_the_redacted_copy_costs_the_order_nothing(intake, monkeypatch) -> None:
    """Keeping what may be kept of a message (keys redacted, the daily cap) runs in its own
    savepoint: a database error there (here a query of a missing table, which aborts a
    PostgreSQL transaction) is logged, and the order, its acknowledgement and the message's
    processing stand."""
    db, config = intake

    def failing_cap_check(session, config, row):
        session.execute(text("SELECT * FROM no_such_table"))

    monkeypatch.setattr(reply_module, "TRIMMED_BYTES", 0)
    monkeypatch.setattr(reply_module, "_over_daily_cap", failing_cap_check)
    result = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="cap"), T0, "t")
    assert result.status == "processed", result
    assert [(o.player, o.dice, o.valid) for o in orders_of(db)] == [("ann", "4", True)]
    assert "Orders received for round 1" in last_reply(db)
    with db.transaction() as s:
        row = s.scalar(select(InboundMessage).where(InboundMessage.id == result.inbound_id))
        assert row.status == "processed"


def test_keys_leave_the_bytes_when_the_reading_pass_did_not_redact(intake, monkeypatch) -> None:
    """A message slow to read is not re-encoded part by part in the sandbox (its time is
    for reading): the intake still replaces the keys it shows in the bytes it keeps."""
    db, config = intake
    slow = parse_module.REDACT_WITHIN_SECONDS
    monkeypatch.setattr(parse_module, "REDACT_WITHIN_SECONDS", 0.0)
    read = parse_module.parse_message(mail("KEY ann-key-123\nDICE 4", tag="k0"), "snl@x.org")
    assert read.redacted is None and "ann-key-123" in read.quoted_keys
    monkeypatch.setattr(parse_module, "REDACT_WITHIN_SECONDS", slow)

    def unredacted(raw, config, sent=()):
        return dataclasses.replace(
            parse_module.parse_message(raw, config.settings.mail.address, sent), redacted=None
        )

    monkeypatch.setattr(intake_module, "_read", unredacted)
    result = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="k1"), T0, "t")
    assert result.status == "processed"
    with db.transaction() as s:
        kept = s.scalar(select(InboundMessage.raw).where(InboundMessage.id == result.inbound_id))
    assert b"ann-key-123" not in kept and b"KEY ****" in kept


def test_stored_but_unprocessed_messages_are_processed_at_start(intake) -> None:
    db, config = intake
    stored_unprocessed(db, mail("KEY cy-key-123\nDICE 6", "cy@example.org", tag="p"), "f")
    [result] = process_pending(db, config)
    assert result.status == "processed"
    assert [(o.player, o.dice) for o in orders_of(db)] == [("cy", "6")]


def test_a_message_that_kills_the_server_every_time_is_set_aside(intake, monkeypatch) -> None:
    """Each restart processes what was stored and not processed; a message during whose
    processing the server died MAX_ATTEMPTS times is set aside (no crash loop). A kill
    between storing and processing (nothing of the message run yet) does not count."""
    db, config = intake
    stored_unprocessed(db, mail("KEY cy-key-123\nDICE 6", "cy@example.org", tag="poison"), "d")

    class Killed(BaseException):  # what SIGKILL does to the processing: nothing after it runs
        pass

    def die(*_args, **_kwargs):
        raise Killed

    monkeypatch.setattr(intake_module, "_process_row", die)
    for _ in range(intake_module.MAX_ATTEMPTS):
        with contextlib.suppress(Killed):
            process_pending(db, config)
    monkeypatch.undo()
    [result] = process_pending(db, config)
    assert result.status == "set-aside" and "interrupted several times" in result.detail
    assert orders_of(db) == []
    # a message killed in ingest itself, then in MAX_ATTEMPTS - 1 restarts, still counts
    monkeypatch.setattr(intake_module, "_process_row", die)
    with contextlib.suppress(Killed):
        ingest(db, config, mail("KEY ann-key-123\nDICE 2", tag="unlucky"), OPENED, "t")
    for _ in range(intake_module.MAX_ATTEMPTS - 1):
        with contextlib.suppress(Killed):
            process_pending(db, config)
    monkeypatch.undo()
    [result] = process_pending(db, config)
    assert result.status == "processed" and [o.player for o in orders_of(db)] == ["ann"]


def test_a_stored_message_is_processed_once_when_two_processes_reach_it(intake) -> None:
    """One server's poller and another's start-up process_pending (or a referee's ingest)
    on the same stored message: one order, one reply. Found by the two-server chaos test."""
    import threading

    db, config = intake
    raw = mail("KEY cy-key-123\nDICE 6", "cy@example.org", tag="twice")
    inbound_id = stored_unprocessed(db, raw, "e")
    # the narrow window, made certain: both passed the status check of process_stored
    first = intake_module._process_row(db, config, inbound_id)
    second = intake_module._process_row(db, config, inbound_id)
    assert (first.status, second.status) == ("processed", "duplicate")
    # and the race itself, from threads that start together
    with db.transaction() as s:
        row = s.get(InboundMessage, inbound_id)
        row.status, row.raw = "new", raw  # as stored (processing redacted its key)
        s.execute(delete(OrderRecord))
    barrier = threading.Barrier(4)
    results = []

    def run() -> None:
        barrier.wait()
        results.append(intake_module.process_stored(db, config, inbound_id).status)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and set(results) <= {"processed", "duplicate"}, results
    assert [(o.player, o.dice) for o in orders_of(db)] == [("cy", "6")]
    acks = [m for m in replies_since(db, T0) if m.recipient == "cy@example.org"]
    assert len(acks) == 2  # one for the first pass above, one for the race


def test_an_order_racing_a_close_counts_or_is_refused_never_lost(intake, monkeypatch) -> None:
    """An order processed while another connection is closing its round (the scheduler's
    thread, or another server on PostgreSQL) waits for the close, then is refused with the
    reason: it is never acknowledged for a round that was adjudicated without it."""
    import threading

    from snl_pbem.app import rounds as rounds_module

    db, config = intake
    inside, release = threading.Event(), threading.Event()
    adjudicate = rounds_module._adjudicate_and_store

    def slow_adjudicate(*args, **kwargs):
        inside.set()  # the close holds its locks now
        release.wait(120)  # set by the test a second after it sees `inside`
        return adjudicate(*args, **kwargs)

    monkeypatch.setattr(rounds_module, "_adjudicate_and_store", slow_adjudicate)
    after_deadline = T0.replace(year=2030, month=2)
    closer = threading.Thread(target=close_round, args=(db, "g1", after_deadline))
    closer.start()
    assert inside.wait(120)  # waits end on their event; the limits detect a hang
    results = []
    order = threading.Thread(
        target=lambda: results.append(
            ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="race"), OPENED, "t")
        )
    )
    order.start()
    order.join(1.0)
    assert order.is_alive()  # it waits for the close instead of writing beside it (a slow
    # machine can only make this pass without the order having reached the lock yet)
    release.set()
    closer.join(120)
    order.join(120)
    [result] = results
    assert result.status == "rejected"
    assert "before round 2 opened" in last_reply(db)
    assert orders_of(db) == []  # nothing stored for round 1 after it was adjudicated


def test_concurrent_intakes_neither_deadlock_nor_lose_orders(intake) -> None:
    """Four connections (the LMTP receiver, the IMAP poller, another server) processing
    orders for one game at once: every message processed, none set aside."""
    import threading

    from snl_pbem.store import Database

    db, config = intake
    barrier = threading.Barrier(4)
    statuses = []

    def worker(n: int) -> None:
        mine = Database(db.url)
        try:
            barrier.wait()
            for i in range(8):
                who = ("ann", "bob", "cy")[(n + i) % 3]
                raw = mail(
                    f"KEY {who}-key-123\nDICE {1 + i % 6}", f"{who}@example.org", tag=f"c{n}.{i}"
                )
                statuses.append(ingest(mine, config, raw, OPENED, "t").status)
        finally:
            mine.dispose()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == ["processed"] * 32
    assert len(orders_of(db)) == 32


def test_a_key_is_never_echoed(intake) -> None:
    db, config = intake
    body = "KEY ann-key-123\nDICEE 4 ann-key-123\nmy key is ann-key-123, ok?\nDICE 4"
    ingest(db, config, mail(body, tag="echo"), T0, "t")
    reply = last_reply(db)
    assert "ann-key-123" not in reply.lower() and "****" in reply


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    header_names = st.sampled_from(
        [
            "From",
            "To",
            "Subject",
            "Content-Type",
            "Message-ID",
            "Auto-Submitted",
            "Content-Transfer-Encoding",
            "X-Junk",
        ]
    )
    text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80)
    headers = draw(st.lists(st.tuples(header_names, text), max_size=8))
    body_lines = draw(
        st.lists(
            st.one_of(
                text,
                st.sampled_from(
                    [
                        "KEY ann-key-123",
                        "DICE 4",
                        "GAME g1",
                        "TRAPDOOR 12",
                        "-- ",
                        "> DICE 6",
                        "STATUS",
                        "HELP",
                        "CLEAR",
                    ]
                ),
            ),
            max_size=12,
        )
    )
    raw = "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n" + "\r\n".join(body_lines)
    data = raw.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        data += draw(st.binary(max_size=200))
    return data


@given(raw=messages())
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_ingest_never_raises_and_always_stores(sqlite_intake, raw: bytes) -> None:
    db, config = sqlite_intake
    result = ingest(db, config, raw, T0, "fuzz")
    assert result.stored
    assert result.status in ("processed", "rejected", "ignored", "duplicate")
    with db.transaction() as s:
        row = s.get(InboundMessage, result.inbound_id)
        assert row is not None and row.status != "new"


def test_deep_nesting_and_many_parts_are_cut_off(sqlite_intake) -> None:
    db, config = sqlite_intake
    inner = b"Content-Type: text/plain\r\n\r\nKEY ann-key-123\r\nDICE 2\r\n"
    for depth in range(200):
        boundary = f"b{depth}".encode()
        inner = (
            b"Content-Type: multipart/mixed; boundary="
            + boundary
            + b"\r\n\r\n--"
            + boundary
            + b"\r\n"
            + inner
            + b"\r\n--"
            + boundary
            + b"--\r\n"
        )
    raw = b"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <deep@x.org>\r\n" + inner
    result = ingest(db, config, raw, T0, "t")
    assert result.stored and result.status == "rejected"  # no text part within reach
    assert orders_of(db) == []


def test_oversized_mail_is_stored_but_not_obeyed(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = mail("KEY ann-key-123\nDICE 2\n" + "padding\n" * 200_000, tag="big")
    result = ingest(db, config, raw, T0, "imap:x", uidvalidity=1, uid=5)
    assert result.status == "rejected" and "too large" in result.detail
    assert orders_of(db) == []


def test_reading_a_message_has_a_hard_time_limit_in_any_thread() -> None:
    """The sandbox kills a worker that reads too long, from whatever thread calls it
    (SIGALRM guarded only the main thread), and the next message is read as usual."""
    import threading

    from snl_pbem.mail.parse import ParseTimeout
    from snl_pbem.mail.sandbox import Sandbox

    # 20 MB of parts takes a second or more to parse on any machine: 20x over the limit
    parts = "".join(f"--b\r\nContent-Type: text/plain\r\n\r\n{'x' * 900}\r\n" for _ in range(20000))
    huge = (
        "From: ann@example.org\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n"
        f"{parts}--b--\r\n"
    ).encode()
    sandbox = Sandbox(seconds=0.05)
    outcome: list[object] = []

    def read() -> None:
        try:
            sandbox.parse(huge, "snl@example.org")
            outcome.append("read")
        except ParseTimeout as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert isinstance(outcome[0], ParseTimeout), outcome
    sandbox.seconds = 60
    ok = sandbox.parse(b"From: ann@example.org\r\n\r\nDICE 4\r\n", "snl@example.org")
    assert ok.text.strip() == "DICE 4" and ok.sender == "ann@example.org"
    sandbox.close()


def test_only_our_own_authentication_results_are_recorded(tmp_path) -> None:
    from mailhelpers import game_config

    from snl_pbem.app.games import start_game, sync_games
    from snl_pbem.store import Database
    from snl_pbem.store.migrate import upgrade

    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    config = game_config(path, db.url)
    path.write_text(
        path.read_text().replace(
            'referee = "ref@example.org"',
            'referee = "ref@example.org"\nauthserv_id = "mx.example.org"',
        )
    )
    from snl_pbem.config import load_config

    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "g1", T0)
    raw = (
        b"Authentication-Results: evil.example; dkim=pass header.d=example.org\r\n"
        b"Authentication-Results: mx.example.org; spf=pass smtp.mailfrom=example.org\r\n"
    ) + mail("KEY ann-key-123\nDICE 2", tag="ar")
    result = ingest(db, config, raw, T0, "t")
    with db.transaction() as s:
        row = s.get(InboundMessage, result.inbound_id)
        assert row.auth_results == "mx.example.org; spf=pass smtp.mailfrom=example.org"
    db.dispose()


def test_reading_a_message_has_a_memory_limit() -> None:
    """A message that needs more memory than the worker may grow by fails in the worker,
    with the reason; the server's own memory is untouched and the next message is read."""
    from snl_pbem.mail.sandbox import ParseFailed, Sandbox

    sandbox = Sandbox(memory=64 * 1024 * 1024)
    big = (
        b"From: a@example.org\r\nContent-Type: text/plain\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n" + b"QUFB\r\n" * 8_000_000
    )  # 48 MB: received, parsed and decoded it needs several times its size
    with pytest.raises(ParseFailed, match="more memory than the limit"):
        sandbox.parse(big, "snl@example.org")
    ok = sandbox.parse(b"From: ann@example.org\r\n\r\nDICE 4\r\n", "snl@example.org")
    assert ok.text.strip() == "DICE 4"
    sandbox.close()


def test_two_orders_in_one_second_count_in_the_order_stored_not_the_order_read(intake) -> None:
    """Stored messages are read in parallel (runners.mailboxes.Readers), so one player's two
    messages of the same second (IMAP dates are whole seconds) may be read in reverse: the
    one stored later still replaces the earlier, at the close and in STATUS."""
    from snl_pbem.app.state import counting_orders
    from snl_pbem.store import Game, Player, Round

    db, config = intake
    first = ingest(db, config, mail("KEY ann-key-123\nDICE 4", tag="s1"), T0, "t", process=False)
    second = ingest(db, config, mail("KEY ann-key-123\nDICE 2", tag="s2"), T0, "t", process=False)
    assert first.status == second.status == "new" and first.inbound_id < second.inbound_id
    assert intake_module.process_now(db, config, second.inbound_id).status == "processed"
    assert intake_module.process_now(db, config, first.inbound_id).status == "processed"
    assert [o.dice for o in orders_of(db)] == ["2", "4"]  # read in reverse
    with db.transaction() as s:
        game = s.scalars(select(Game).where(Game.name == "g1")).one()
        open_ = select(Round).where(Round.game_id == game.id, Round.state == "open")
        round_ = s.scalars(open_).one()
        players = s.scalars(select(Player).where(Player.game_id == game.id)).all()
        assert counting_orders(s, round_, players)["ann"].dice == (2,)
    status = ingest(db, config, mail("GAME g1\nKEY ann-key-123\nSTATUS", tag="s3"), T0, "t")
    assert status.status == "processed"
    [reply] = [r for r in replies_since(db, T0) if b"Your status" in r.message]
    assert b"Your orders for it: dice 2, valid" in reply.message
