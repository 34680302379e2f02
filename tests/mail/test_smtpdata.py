"""``read_data``: a message's data read in pieces gives what aiosmtpd's own ``smtp_DATA``
(1.4) gives, reading it a line at a time: the same bytes to the handler (a line's leading
dot taken off), the same refusal (a line too long, the data too much), and the same bytes
left in the stream after the data's end (a command the client sent on). Each stream is
given to both as it arrives over a connection, in pieces of random sizes, and then through
the receiver itself over a socket."""

from __future__ import annotations

import asyncio
import random
import smtplib
import socket

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from snl_pbem.mail.lmtp import GameAddressHandler, ReceiverController
from snl_pbem.mail.smtpdata import Refused, read_data

LINE_LIMIT = 1001  # aiosmtpd's line_length_limit, and its stream's limit


def reply_of(refused: Refused | None) -> str:
    if refused is Refused.TOO_LONG:
        return "500 Line too long (see RFC5321 4.5.3.1.6)"
    if refused is Refused.TOO_MUCH:
        return "552 Error: Too much mail data"
    return "250 OK"


async def _fed(stream: bytes, cuts: list[int]) -> asyncio.StreamReader:
    """A reader given ``stream`` in the pieces ``cuts`` makes, as from a socket: each
    piece after the reader has had a chance to read the one before."""
    reader = asyncio.StreamReader(limit=LINE_LIMIT)

    async def feed() -> None:
        at = 0
        for cut in [*cuts, len(stream)]:
            reader.feed_data(stream[at:cut])
            at = cut
            await asyncio.sleep(0)
        reader.feed_eof()

    asyncio.get_running_loop().create_task(feed())
    await asyncio.sleep(0)
    return reader


async def theirs(stream: bytes, cuts: list[int], size_limit: int) -> tuple[str, bytes, bytes]:
    """aiosmtpd's ``smtp_DATA`` on ``stream``: its reply, the data its handler was given,
    and what was left unread."""
    given: list[bytes] = []

    class Handler:
        async def handle_DATA(self, server, session, envelope) -> str:
            given.append(envelope.original_content)
            return "250 OK"

    server = SMTP(Handler(), decode_data=False, data_size_limit=size_limit)
    server._reader = await _fed(stream, cuts)
    server.transport = object()
    server.session = Session(asyncio.get_running_loop())
    server.session.host_name = "client.example.org"
    server.envelope = Envelope()
    server.envelope.rcpt_tos = ["snl@example.org"]
    said: list[str] = []

    async def push(status: str) -> None:
        said.append(status)

    server.push = push
    await server.smtp_DATA("")
    left = await server._reader.read()
    return said[-1], (given[0] if given else b""), left


async def ours(stream: bytes, cuts: list[int], size_limit: int) -> tuple[str, bytes, bytes]:
    reader = await _fed(stream, cuts)
    read = await read_data(reader, size_limit, LINE_LIMIT)
    assert read is not None
    data, refused = read
    return reply_of(refused), data, await reader.read()


def random_stream(rng: random.Random) -> bytes:
    """Lines as mail has them and as a hostile client writes them: empty, a dot alone
    (stuffed), dots leading and ending, lone CRs and LFs, near and past the line limit."""
    lines = []
    for _ in range(rng.choice([0, 1, 2, 5, 30])):
        kind = rng.random()
        if kind < 0.1:
            line = b""
        elif kind < 0.2:
            line = b".." * rng.randint(1, 2)  # a stuffed dot, or two
        elif kind < 0.35:
            line = b"Thanks." if rng.random() < 0.5 else b"..x."
        elif kind < 0.45:
            line = rng.choice([b"a\rb", b"a\nb", b"\n.", b".\r", b"\r", b"x\n.\n"])
        elif kind < 0.55:
            line = b"y" * rng.choice([997, 998, 999, 1000, 1001, 1002, 1500, 3000])
        else:
            line = bytes(rng.choice(b"abc .\xe0\x00") for _ in range(rng.randint(1, 80)))
        lines.append(line + b"\r\n")
    return b"".join(lines) + b".\r\n" + rng.choice([b"", b"QUIT\r\n", b"MAIL FROM:<a@b>\r\n"])


def cuts_of(rng: random.Random, stream: bytes) -> list[int]:
    if rng.random() < 0.3 or len(stream) < 2:
        return []
    return sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(1, 12))))


def test_the_data_read_in_pieces_is_aiosmtpds_own() -> None:
    """Three thousand streams, each in random pieces, with size limits on either side of
    the data: the reply, the data and what is left are aiosmtpd's in every one, a message
    both too long in a line and too much refused as aiosmtpd refuses it (the first to
    come, as it reads)."""
    rng = random.Random(20261206)
    refusals = set()
    for _ in range(3000):
        stream = random_stream(rng)
        cuts = cuts_of(rng, stream)
        size_limit = rng.choice([0, 50, 1000, 4000, 100_000])
        expected = asyncio.run(theirs(stream, cuts, size_limit))
        assert asyncio.run(ours(stream, cuts, size_limit)) == expected, (
            stream[:200],
            cuts,
            size_limit,
        )
        refusals.add(expected[0][:3])
    assert refusals == {"250", "500", "552"}  # (every outcome was met)


ATOMS = [b"", b".", b"..", b"...", b".\r", b"\r", b"\n", b"\r\r", b"\n.", b".\n", b"x.", b"\r.\r"]
ATOMS += [b"a\rb", b"\n.\r", b".\r\n."[:2]]


def nasty_stream(rng: random.Random) -> bytes:
    """Lines about the limits (997 to 1004 bytes, and longer), dots and bare CRs and LFs
    at their ends, runs of lines of dots; and after the end, more that looks like it
    (the second review's generator)."""

    def line() -> bytes:
        if rng.random() < 0.3:
            n = rng.choice([0, 1, 2, 3, 300, 500, 600, 997, 998, 999, 1000, 1001, 1002, 1003])
            body = bytearray(b"y" * rng.choice([n, 1004, 1500, 2100][: 1 + (rng.random() < 0.2)]))
            if body and rng.random() < 0.3:
                body[0:1] = b"."
            if body and rng.random() < 0.3:
                body[-1:] = rng.choice([b".", b"\r", b"\n"])
            return bytes(body)
        return b"".join(rng.choice(ATOMS) for _ in range(rng.randint(0, 4)))

    lines = [line() for _ in range(rng.choice([0, 1, 2, 3, 5, 10, 30]))]
    if rng.random() < 0.1:
        lines = [b"." * rng.randint(2, 5)] * rng.randint(1, 5)
    after = rng.choice([b"", b"QUIT\r\n", b".\r\n", b"\r\n.\r\n", b"x"])
    return b"".join(one + b"\r\n" for one in lines) + b".\r\n" + after


def nasty_cuts(rng: random.Random, stream: bytes) -> list[int]:
    """Cuts next to each CRLF (a CRLF cut in two, as the stream's limit may cut it), about
    the stream's limit, and at random."""
    if len(stream) < 2 or rng.random() < 0.15:
        return []
    near: set[int] = {1001, 1002, 1003, 1004, 1005, 2003, 2004, 2005, len(stream) - 1}
    at = stream.find(b"\r\n")
    while at >= 0:
        near.update(at + d for d in (-1, 0, 1, 2, 3))
        at = stream.find(b"\r\n", at + 1)
    inside = [c for c in near if 0 < c < len(stream)]
    picked = rng.sample(inside, min(len(inside), rng.randint(1, 8)))
    extra = rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 4)))
    return sorted({*picked, *extra})


def test_a_crlf_cut_between_pieces_is_aiosmtpds_too() -> None:
    """A piece taken at the stream's limit may end between a line's CR and its LF: that
    line ended all the same (it was counted with the next one, and a message of two lines
    of 600 bytes refused as one line too long: the second review). Three thousand streams
    cut next to their CRLFs, size limits about their own size: each is aiosmtpd's."""
    rng = random.Random(49)
    refusals = set()
    for _ in range(3000):
        stream = nasty_stream(rng)
        cuts = nasty_cuts(rng, stream)
        n = len(stream)
        size_limit = max(0, rng.choice([0, 1, 3, n - 8, n - 5, n - 4, n - 2, 1000, 1002, 10**5]))
        expected = asyncio.run(theirs(stream, cuts, size_limit))
        assert asyncio.run(ours(stream, cuts, size_limit)) == expected, (stream, cuts, size_limit)
        refusals.add(expected[0][:3])
    assert refusals == {"250", "500", "552"}


@pytest.mark.parametrize(
    "stream, cut, size_limit",
    [
        (b"a" * 600 + b"\r\n" + b"b" * 600 + b"\r\n" + b"c" * 600 + b"\r\n.\r\n", 1205, 0),
        (b"\r\n." + b"y" * 998 + b"\r\n.\r\n", 1004, 1002),
        ((b"z" * 500 + b"\r\n") * 8 + b".\r\n", 1005, 4012),
    ],
)
def test_the_reviews_streams(stream: bytes, cut: int, size_limit: int) -> None:
    expected = asyncio.run(theirs(stream, [cut], size_limit))
    assert asyncio.run(ours(stream, [cut], size_limit)) == expected


@pytest.mark.parametrize(
    "stream, data",
    [
        (b".\r\n", b""),  # no data at all: the DATA command's CRLF goes before the dot
        (b"x.\r\n.\r\n", b"x.\r\n"),  # a line ending in a dot is not the end
        (b"..\r\n.\r\n", b".\r\n"),  # a line of one dot, stuffed
        (b"a\r\n...b\r\n.\r\nQUIT\r\n", b"a\r\n..b\r\n"),
        (b"\r\n.\r\n", b"\r\n"),
    ],
)
def test_the_data_is_ended_by_a_line_of_one_dot_only(stream: bytes, data: bytes) -> None:
    for cuts in ([], list(range(1, len(stream)))):  # all at once, and a byte at a time
        reply, got, _ = asyncio.run(ours(stream, cuts, 0))
        assert (reply, got) == ("250 OK", data)
        assert asyncio.run(theirs(stream, cuts, 0))[:2] == ("250 OK", data)


def test_the_receiver_takes_the_data_as_the_client_wrote_it() -> None:
    """Through the receiver over a socket, as smtplib sends it (dot-stuffed): messages of
    one line, lines of dots, a line ending in a dot, a long message, each stored as
    written; a message over the size limit refused 552, and the session goes on."""
    stored: list[bytes] = []

    def deliver(raw: bytes, _source: str) -> None:
        stored.append(raw)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = ReceiverController(
        GameAddressHandler("snl@example.org", deliver), "127.0.0.1", port, max_size=20_000
    )
    controller.start()
    messages = [
        b"Subject: a\r\n\r\nDICE 4\r\n",
        b"Subject: b\r\n\r\n.\r\n..\r\nThanks.\r\n.x\r\n",
        b"Subject: c\r\n\r\n" + b"> quoted, as a phone's client quotes it\r\n" * 300,
    ]
    try:
        client = smtplib.LMTP("127.0.0.1", port)
        client.ehlo("client.example.org")

        def send(raw: bytes) -> int:  # (no SIZE given: the data is what is refused)
            assert client.mail("p@example.org")[0] == 250
            assert client.rcpt("snl@example.org")[0] == 250
            return client.data(raw)[0]

        assert [send(raw) for raw in messages] == [250, 250, 250]
        assert send(b"x" * 1200 + b"\r\n" * 30) == 500  # its one line is too long
        assert send(b"y\r\n" * 8000) == 552  # too much
        assert send(messages[0]) == 250
        client.quit()
    finally:
        controller.stop()
    assert stored == [*messages, messages[0]]
