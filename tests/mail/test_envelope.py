"""``envelope_of`` reads a message's Message-ID and From address before it is stored (the
poller, for each message it fetches): without the header parser where it can
(``first_headers``, issue 23), as the parser would, but for a value the 64 KiB read cuts,
which is not read."""

from __future__ import annotations

import email.parser
import random

import pytest
from mailhelpers import CORPUS

from snl_pbem.mail.parse import (
    _HEADER_LINE,
    ENVELOPE_BYTES,
    envelope_of,
    first_headers,
    header,
    parse_message,
    sender_address,
)


def parsed(raw: bytes, limit: int = ENVELOPE_BYTES) -> tuple[str | None, str | None]:
    """``envelope_of`` as it read before issue 23: the whole header section parsed."""
    try:
        head = email.parser.BytesHeaderParser().parsebytes(raw[:limit])
    except Exception:
        return None, None
    kept = header(head, "Message-ID").encode("utf-8", "surrogatepass")[:998]
    return kept.decode("utf-8", "ignore") or None, sender_address(head)[0]


def test_a_header_line_is_what_the_parser_takes_for_one() -> None:
    """``first_headers`` ends the section where ``email.feedparser`` does (its ``headerRE``,
    which typeshed does not declare): the same pattern, anchored as ``match`` anchors it."""
    import email.feedparser

    parsers = getattr(email.feedparser, "headerRE")  # noqa: B009 (undeclared)
    assert parsers.pattern == "^" + _HEADER_LINE.pattern


def test_every_corpus_message_reads_as_the_parser_reads_it() -> None:
    files = sorted(CORPUS.rglob("*.eml"))
    assert len(files) > 150
    short = 0
    for path in files:
        raw = path.read_bytes()
        assert envelope_of(raw) == parsed(raw), path.name
        short += not first_headers(raw, ("message-id", "from")).eight_bit
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
    """20,000 header sections each, read as the parser reads them: folds, duplicates,
    names in any case, mbox envelope lines, lines with no name or no colon, a lone CR, LF
    or CRLF at each line, form feeds and other characters ``str.splitlines`` breaks at,
    8-bit bytes, sections cut anywhere. One in 50 comes after 64 KiB less a few bytes of
    another header: a value the 64 KiB cut is read whole (as the full header section
    reads it) or not at all."""
    rng = random.Random(2300 + seed)
    short = cut = 0
    for n in range(20_000):
        raw = generated_head(rng)
        if n % 50 == 0:  # the 64 KiB cut somewhere in the first lines
            raw = b"Received: " + b"x" * (ENVELOPE_BYTES - rng.randint(12, 80)) + b"\r\n" + raw
            whole = parsed(raw, limit=len(raw))
            found = envelope_of(raw)
            cut += found != whole
            # a value is read whole or not at all (never the first 64 KiB of a longer one)
            assert all(f in (w, None) for f, w in zip(found, whole, strict=True)), raw
            continue
        assert envelope_of(raw) == parsed(raw), raw
        head = first_headers(raw, ("message-id", "from"))
        if not head.eight_bit:
            short += 1
            full = email.parser.BytesHeaderParser().parsebytes(raw[:ENVELOPE_BYTES])
            for name in ("Message-ID", "From", "message-id", "FROM"):
                assert head.get(name) == full.get(name), (name, raw)
    assert short > 12_000
    assert 0 < cut < 400  # (some cut a value: what is compared)


def at_the_cut(before: bytes, line: bytes) -> bytes:
    """``before``, a header to pad, and ``line``, which ends where the 64 KiB read ends."""
    fill = ENVELOPE_BYTES - len(before) - len(line) - len(b"X-Pad: \r\n")
    return before + b"X-Pad: " + b"a" * fill + b"\r\n" + line


def test_a_from_cut_by_the_64_kib_is_not_read() -> None:
    """A From that runs on past the 64 KiB read would name someone else: the first 64 KiB
    of ``victim@example.org.evil.test`` is ``victim@example.org``, whose mail the message's
    lines would be compared with (the hostile review of e5eac98: already so before)."""
    raw = at_the_cut(b"", b"From: victim@example.org") + b".evil.test\r\n\r\nGAME g\r\n"
    assert parsed(raw) == (None, "victim@example.org")  # (as it read before)
    assert envelope_of(raw) == (None, None)
    assert parse_message(raw, "snl@example.org").sender == "victim@example.org.evil.test"
    ann = b"From: ann@example.org\r\n"
    complete = at_the_cut(b"", ann + b"Subject: s") + b"s" * 300 + b"\r\n\r\n"
    assert envelope_of(complete) == (None, "ann@example.org")  # it ended before the cut
    folded = at_the_cut(b"", ann) + b" (Ann)\r\n\r\n"  # a fold of it past the cut
    assert envelope_of(folded) == (None, None)
    assert envelope_of(folded[:ENVELOPE_BYTES]) == (None, "ann@example.org")  # (the end)
    eight_bit = at_the_cut(b"Message-ID: <\xe9@x>\r\n", ann) + b" (Ann)\r\n\r\n"
    assert envelope_of(eight_bit) == ("<\ufffd@x>", None)  # (the parser's reading: cut too)
    assert envelope_of(eight_bit[:ENVELOPE_BYTES]) == ("<\ufffd@x>", "ann@example.org")


def test_an_envelope_is_read_from_the_first_64_kib() -> None:
    raw = b"Received: " + b"x" * ENVELOPE_BYTES + b"\r\nFrom: ann@example.org\r\n\r\nbody"
    assert envelope_of(raw) == (None, None) == parsed(raw)
    assert envelope_of(b"From: Ann <Ann@Example.org>\r\nMessage-ID: <a@b>\r\n\r\n") == (
        "<a@b>",
        "ann@example.org",
    )
