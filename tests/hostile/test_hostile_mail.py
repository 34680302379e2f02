"""Hostile mail at volume: 10,000 generated messages, forgery, floods, loops and secrecy.

Run by the README's test command (marked slow). Seeded, so a failure replays.
"""

from __future__ import annotations

import gc
import logging
import random
import resource
import time
from datetime import timedelta

import pytest
from mailhelpers import T0, orders_of, replies_since
from sqlalchemy import func, select

from snl_pbem.app.intake import ingest
from snl_pbem.app.replies import ACKS_PER_HOUR
from snl_pbem.mail.parse import parse_message
from snl_pbem.store import InboundMessage, OutboxMessage

SEED = 20261129
MESSAGES = 10_000
MAX_SECONDS_PER_MESSAGE = 0.5
"""No message may cost this much (a real one takes milliseconds), in the CPU time of its
reading and storing: a message over it in wall-clock time (which a busy machine stretches)
is timed again in CPU seconds, the reading best of three. The interpreter's garbage
collections are not charged to the message they happen to fall in: a full collection
walks every object the process holds (the 10,000 messages' captured log records
included), and it once cost one ordinary message 0.65 s in CI. Growth is bounded by
MAX_RSS_GROWTH_MB instead, and the collections' total time is printed."""
MAX_RSS_GROWTH_MB = 300

HEADERS = [
    "From",
    "To",
    "Subject",
    "Content-Type",
    "Message-ID",
    "Auto-Submitted",
    "Precedence",
    "Content-Transfer-Encoding",
    "References",
    "In-Reply-To",
    "Return-Path",
    "X-Junk",
]
LINES = [
    "GAME g1",
    "KEY ann-key-123",
    "KEY bob-key-123",
    "KEY wrong",
    "DICE 4",
    "DICE 4 2",
    "DICE x",
    "TRAPDOOR 12",
    "TRAPDOOR -1",
    "ROUND 1",
    "ROUND 99",
    "STATUS",
    "HELP",
    "CLEAR",
    "-- ",
    "> DICE 6",
    "On Mon, 1 Dec 2026, ann wrote:",
    "=?utf-8?b?!!?=",
    "\u202eevil",
    "A" * 5000,
    "\r",
    "\x00\x01\x02",
]


def generated(rng: random.Random, i: int) -> bytes:
    """One message from a seeded generator: valid, odd, broken or plain hostile."""
    kind = rng.random()
    if kind < 0.05:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 400)))
    headers = []
    for _ in range(rng.randint(0, 8)):
        name = rng.choice(HEADERS)
        value = rng.choice(
            [
                "ann@example.org",
                "<x@y>",
                '"unterminated <a@b',
                "=?x-unknown?B?!!?=",
                "[g1] orders",
                "multipart/mixed; boundary=",
                "text/plain; charset=cp-1252; name*=''%ZZ",
                "auto-replied",
                "bulk",
                "a@b, " * rng.randint(1, 300),
                "\u00e9\u00e8\U0001f3b2",
                "base64",
                "quoted-printable",
                f"<m{i}@x.org>",
                "<>",
            ]
        )
        headers.append(f"{name}: {value}")
    if rng.random() < 0.7:
        headers.append(f"From: {rng.choice(['ann', 'bob', 'cy', 'mallory'])}@example.org")
    body = "\r\n".join(rng.choice(LINES) for _ in range(rng.randint(0, 60)))
    if rng.random() < 0.1:  # deep nesting
        body = ("--b\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n" * 60) + body
    return ("\r\n".join(headers) + "\r\n\r\n" + body).encode("utf-8", "surrogatepass")


@pytest.mark.slow
def test_ten_thousand_generated_messages(sqlite_intake) -> None:
    db, config = sqlite_intake
    # one ordinary message first, not timed: what only the first message of a process pays
    # (starting the sandbox's workers, compiling the reply templates) is no message's cost
    warm = raw_mail("ann@example.org", "KEY ann-key-123\r\nDICE 4", "warm-up")
    assert ingest(db, config, warm, T0, "warm-up").status == "processed"
    rng = random.Random(SEED)
    print(f"hostile mail seed {SEED}")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    slowest = 0.0
    statuses: dict[str, int] = {}
    over: dict[int, tuple[bytes, float]] = {}  # message: itself, its ingest's CPU time here
    collecting = _GcClock()
    gc.callbacks.append(collecting)
    try:
        for i in range(MESSAGES):
            raw = generated(rng, i)
            started, cpu, gc_before = time.perf_counter(), time.process_time(), collecting.cpu
            result = ingest(db, config, raw, T0 + timedelta(seconds=i), f"fuzz:{i}")
            took = time.perf_counter() - started
            if took >= MAX_SECONDS_PER_MESSAGE:
                over[i] = (raw, time.process_time() - cpu - (collecting.cpu - gc_before))
            slowest = max(slowest, took)
            assert result.stored, (SEED, i)
            statuses[result.status] = statuses.get(result.status, 0) + 1
    finally:
        gc.callbacks.remove(collecting)
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before
    print(
        f"statuses {statuses}; slowest {slowest * 1000:.0f} ms ({len(over)} over "
        f"{MAX_SECONDS_PER_MESSAGE} s, timed again in CPU time); RSS growth {rss_growth:.0f} MB; "
        f"garbage collection {collecting.cpu:.2f} s CPU in all, longest {collecting.longest:.3f} s"
    )
    assert "set-aside" not in statuses, statuses
    for i, (raw, stored_cpu) in over.items():  # its reading ran in the sandbox: again here
        reading = min(_reading_cpu(raw, config.settings.mail.address) for _ in range(3))
        assert stored_cpu + reading < MAX_SECONDS_PER_MESSAGE, (SEED, i, stored_cpu, reading)
    assert rss_growth < MAX_RSS_GROWTH_MB
    with db.transaction() as s:
        unfinished = s.scalar(
            select(func.count()).select_from(InboundMessage).where(InboundMessage.status == "new")
        )
    assert unfinished == 0  # every message stored with a final status


class _GcClock:
    """A gc callback adding up the CPU time the interpreter's collections take."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.longest = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            took = time.process_time() - self._started
            self.cpu += took
            self.longest = max(self.longest, took)


def _reading_cpu(raw: bytes, address: str) -> float:
    """The CPU time of what the sandbox does with a message: read it (which redacts the
    keys it shows, in the same pass)."""
    started = time.process_time()
    parse_message(raw, address)
    return time.process_time() - started


def raw_mail(
    sender: str, body: str, tag: str, subject: str = "[g1] orders", extra: str = ""
) -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: {subject}\r\n"
        f"Message-ID: <{tag}@x.org>\r\n{extra}\r\n{body}\r\n"
    ).encode()


@pytest.mark.slow
def test_a_flood_from_one_sender_is_rate_limited_but_applied(sqlite_intake) -> None:
    db, config = sqlite_intake
    for i in range(1000):
        ingest(
            db,
            config,
            raw_mail("ann@example.org", f"KEY ann-key-123\nDICE {1 + i % 6}", f"flood{i}"),
            T0 + timedelta(seconds=i),
            "t",
        )
    assert len(orders_of(db)) == 1000
    # every order is acknowledged, up to a bound only a flood with the key meets
    assert len(replies_since(db, T0)) == ACKS_PER_HOUR


def test_forgery_and_loops(sqlite_intake) -> None:
    db, config = sqlite_intake
    cases = [
        raw_mail("mallory@evil.example", "GAME g1\nDICE 6", "f1"),  # no key
        raw_mail("snl@example.org", "GAME g1\nKEY ann-key-123\nDICE 6", "f2"),  # ourselves
        raw_mail(
            "ann@example.org",
            "KEY ann-key-123\nDICE 6",
            "f3",
            extra="Auto-Submitted: auto-replied\r\n",
        ),  # a robot
        raw_mail("MAILER-DAEMON@mx.example.org", "GAME g1\nKEY ann-key-123\nDICE 6", "f4"),
        raw_mail("ann@example.org", "GAME other\nKEY ann-key-123\nDICE 6", "f5"),  # other game
    ]
    statuses = [ingest(db, config, raw, T0, "t").status for raw in cases]
    assert statuses == ["rejected", "ignored", "ignored", "ignored", "rejected"]
    assert orders_of(db) == []
    recipients = [r.recipient for r in replies_since(db, T0)]
    assert recipients == ["ann@example.org"]  # only the registered player hears "no such game"


def test_crlf_and_long_strings_never_reach_headers(sqlite_intake) -> None:
    db, config = sqlite_intake
    subject = "orders\r\nBcc: everyone@example.org " + "S" * 3000
    raw = raw_mail(
        "ann@example.org",
        "GAME g1\nKEY ann-key-123\nDICE 3\n" + "Z" * 10_000,
        "long",
        subject=subject.replace("\r\n", " "),
    )
    assert ingest(db, config, raw, T0, "t").status == "processed"
    [reply] = replies_since(db, T0)
    head = reply.message.split(b"\r\n\r\n", 1)[0]
    lines = head.split(b"\r\n")
    assert not any(line.lower().startswith(b"bcc:") for line in lines)  # text, not a header
    assert max(len(line) for line in lines) < 998


def test_no_key_in_any_log_line_or_player_mail(sqlite_intake, caplog) -> None:
    db, config = sqlite_intake
    caplog.set_level(logging.DEBUG)
    bodies = [
        "KEY ann-key-123\nDICE 2",
        "KEY ann-key-999\nDICE 2",
        "KEY ann-key-123\nDICEE 2",
        "KEY ann-key-123\nmy key ann-key-123\nDICE 9",
    ]
    for i, body in enumerate(bodies):
        ingest(db, config, raw_mail("ann@example.org", body, f"k{i}"), T0, "t")
    assert "key-12" not in caplog.text and "key-99" not in caplog.text
    with db.transaction() as s:
        for row in s.scalars(select(OutboxMessage).where(OutboxMessage.kind != "welcome")):
            assert b"key-123" not in row.message.lower() and b"key-999" not in row.message
