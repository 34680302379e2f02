"""``envelope_of`` reads a message's Message-ID and From address before it is stored (the
poller, for each message it fetches): without the header parser where it can
(``first_headers``, issue 23), always as the parser would."""

from __future__ import annotations

import email.parser
import random

import pytest
from mailhelpers import CORPUS

from snl_pbem.mail.parse import ENVELOPE_BYTES, envelope_of, first_headers, header, sender_address


def parsed(raw: bytes) -> tuple[str | None, str | None]:
    """``envelope_of`` as it read before issue 23: the whole header section parsed."""
    try:
        head = email.parser.BytesHeaderParser().parsebytes(raw[:ENVELOPE_BYTES])
    except Exception:
        return None, None
    kept = header(head, "Message-ID").encode("utf-8", "surrogatepass")[:998]
    return kept.decode("utf-8", "ignore") or None, sender_address(head)[0]


def test_every_corpus_message_reads_as_the_parser_reads_it() -> None:
    files = sorted(CORPUS.rglob("*.eml"))
    assert len(files) > 150
    short = 0
    for path in files:
        raw = path.read_bytes()
        assert envelope_of(raw) == parsed(raw), path.name
        short += first_headers(raw, ("message-id", "from")) is not None
    assert short > len(files) * 0.7  # (most take the short way: it is what is compared)


LINE_ENDS = ["\r\n", "\n", "\r", "\r\n", "\r\n"]
NAMES = ["From", "from", "FROM", "Message-ID", "message-id", "Message-Id", "Subject", "To",
         "Received", "X-Mailer", "DKIM-Signature", "Reply-To", "Sender"]  # fmt: skip
VALUES = [
    "Ann <ann@example.org>",
    "ann@example.org",
    '"Smith, Ann" <ann@example.org>',
    "=?utf-8?q?M=C3=BCller=2C_Ann?= <ann@example.org>",
    "Ann <ann@example.org>, Bob <bob@example.org>",
    "<id-1@example.org>",
    " <id-2@example.org> ",
    "",
    "Ann (comment) <ann@example.org>",
    "Jos\xe9 <jose@example.org>",  # 8-bit: the parser's way
    "<\xe9t\xe9@example.org>",
    "x" * 300,
    "Ann <ann@exa\x00mple.org>",
    "bob@example.org (Bob)",
    "Ann <ann@example.org>\t",
    "Ann\x0c <ann@example.org>",  # line breaks to str.splitlines, not to the parser
    "Ann\x1c\x0b<ann@example.org>",
]
ODD_LINES = [
    "From ann@example.org Mon Nov 30 10:00:00 2026",  # an mbox envelope line
    ": no name",
    "not a header at all",
    " continued",
    "\tcontinued with a tab",
    "",  # the end of the header section
    "From: ",
    "From:",
    "Message-ID:<glued@example.org>",
    "X-Odd header name: value",
    "\x0cform feed",
    "From : spaced <spaced@example.org>",
]


def generated_head(rng: random.Random) -> bytes:
    lines: list[str] = []
    for _ in range(rng.randint(0, 12)):
        roll = rng.random()
        if roll < 0.15:
            lines.append(rng.choice(ODD_LINES))
        elif roll < 0.3 and lines:
            lines.append(rng.choice([" ", "\t", "  "]) + rng.choice(VALUES))  # a fold
        else:
            lines.append(f"{rng.choice(NAMES)}:{rng.choice(['', ' ', '  ', chr(9)])}"
                         f"{rng.choice(VALUES)}")  # fmt: skip
    ends = [rng.choice(LINE_ENDS) for _ in lines]
    if rng.random() < 0.5:  # one line ending everywhere, as most mail has
        ends = [ends[0] if ends else "\r\n"] * len(lines)
    text = "".join(line + end for line, end in zip(lines, ends, strict=True))
    if rng.random() < 0.1 and text:
        text = text[: rng.randrange(len(text))]  # cut anywhere (no line end at the last)
    body = rng.choice(["", "\r\nGAME bench\r\nDICE 3\r\n", "\nFrom: Eve <eve@example.org>\n"])
    return (text + body).encode("latin-1")


@pytest.mark.parametrize("seed", range(4))
def test_a_generated_header_section_reads_as_the_parser_reads_it(seed: int) -> None:
    """20,000 header sections each: folds, duplicates, names in any case, mbox envelope
    lines, lines with no name or no colon, a lone CR, LF or CRLF at each line, form feeds and
    other characters ``str.splitlines`` breaks at, 8-bit bytes,
    sections cut anywhere, and 64 KiB cut through a header."""
    rng = random.Random(2300 + seed)
    short = 0
    for n in range(20_000):
        raw = generated_head(rng)
        if n % 500 == 0:  # the 64 KiB cut through a header's value
            raw = b"Received: " + b"x" * (ENVELOPE_BYTES - 30) + b"\r\n" + raw
        assert envelope_of(raw) == parsed(raw), raw
        head = first_headers(raw, ("message-id", "from"))
        if head is not None:
            short += 1
            full = email.parser.BytesHeaderParser().parsebytes(raw[:ENVELOPE_BYTES])
            for name in ("Message-ID", "From", "message-id", "FROM"):
                assert head.get(name) == full.get(name), (name, raw)
    assert short > 12_000


def test_an_envelope_is_read_from_the_first_64_kib() -> None:
    raw = b"Received: " + b"x" * ENVELOPE_BYTES + b"\r\nFrom: ann@example.org\r\n\r\nbody"
    assert envelope_of(raw) == (None, None) == parsed(raw)
    assert envelope_of(b"From: Ann <Ann@Example.org>\r\nMessage-ID: <a@b>\r\n\r\n") == (
        "<a@b>",
        "ann@example.org",
    )
