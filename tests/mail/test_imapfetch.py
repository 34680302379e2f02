"""The poller's FETCH responses read in one pattern a message (snl_pbem.mail.imapfetch):
what imapclient's own parser gives, for what Dovecot answers (the corpus, 8-bit bytes, a
message whose bytes look like IMAP), and every other response left to imapclient's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import imapclient.imapclient
import pytest
from imapclient import IMAPClient
from mailhelpers import CORPUS

from snl_pbem.mail import imap, imapfetch  # noqa: F401  (imap installs imapfetch)
from snl_pbem.mail.imapfetch import _IMAPCLIENTS, plain

TRICKY = (
    b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: {5}\r\n\r\n"
    b')\r\n* 3 FETCH (UID 9 RFC822.SIZE 1)\r\nBODY[] {12}\r\n"quoted" \\ \xe9t\xe9\r\n'
)
"""Bytes that look like the response they come in: only the literal's length tells."""


@pytest.fixture
def answers(dovecot) -> Iterator[tuple[IMAPClient, list[int], list[list[Any]]]]:
    """A mailbox of the corpus and TRICKY, and every FETCH response as imaplib gave it."""
    user = dovecot.new_user()
    client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
    client.login(user, "secret")
    raws = [path.read_bytes() for path in sorted(CORPUS.glob("*.eml"))] + [TRICKY]
    for raw in raws:
        client.append("INBOX", raw)
    client.select_folder("INBOX")
    uids = client.search(["ALL"])
    assert len(uids) == len(raws) > 10
    seen: list[list[Any]] = []

    def recorded(text: list[Any], *args: Any) -> Any:
        seen.append(list(text))
        return imapfetch.parse_fetch_response(text, *args)

    imapclient.imapclient.parse_fetch_response = recorded
    try:
        yield client, uids, seen
    finally:
        imapfetch.install()
        client.logout()


def test_the_poller_reads_fetches_in_its_patterns() -> None:
    assert imapclient.imapclient.parse_fetch_response is imapfetch.parse_fetch_response


def exactly(found: Any) -> object:
    """A parse as compared here: its kind of dict and default, and each message's fields in
    their order, each value with its type (``==`` alone takes 1 for True, and two times in
    different zones for one instant)."""
    if not isinstance(found, dict):
        return found
    return (
        type(found),
        getattr(found, "default_factory", None),
        {
            key: [(name, type(value), value, _offset(value)) for name, value in fields.items()]
            for key, fields in found.items()
        },
    )


def _offset(value: Any) -> object:
    """A time's offset from UTC (None: naive); not a time: None."""
    return value.utcoffset() if isinstance(value, datetime) else None


@pytest.mark.parametrize(
    "items",
    [["RFC822.SIZE"], ["BODY.PEEK[]", "INTERNALDATE"], ["BODY.PEEK[HEADER]", "INTERNALDATE"]],
)
def test_what_dovecot_answers_the_poller_is_read_as_imapclient_reads_it(answers, items) -> None:
    client, uids, seen = answers
    fetched = client.fetch(uids, items)
    assert len(seen) == 1 and len(fetched) == len(uids)
    text = seen[0]
    for normalise in (True, False):
        for by_uid in (True, False):
            mine = plain(text, normalise, by_uid)
            assert mine is not None, f"Dovecot's answer to {items} was not read in a pattern"
            assert exactly(mine) == exactly(_IMAPCLIENTS(text, normalise, by_uid))
    if "INTERNALDATE" in items:
        assert all(isinstance(f[b"INTERNALDATE"], datetime) for f in fetched.values())
        key = b"BODY[]" if "BODY.PEEK[]" in items else b"BODY[HEADER]"
        assert fetched[uids[-1]][key].startswith(TRICKY[:40])
        if key == b"BODY[]":
            assert fetched[uids[-1]][key] == TRICKY


LINE = b'4 (UID 17 INTERNALDATE "06-Dec-2026 02:22:28 +0000" BODY[] {5}'


@pytest.mark.parametrize(
    "text",
    [
        [b"4 (UID 17 RFC822.SIZE 5)", b"5 (FLAGS (\\Seen))"],  # an unsolicited FETCH
        [b"4 (uid 17 RFC822.SIZE 5)"],  # lower case
        [b"4 (RFC822.SIZE 5 UID 17)"],  # another order
        [b"4 (UID 17 RFC822.SIZE 5 FLAGS ())"],  # another attribute
        [(LINE, b"abcd"), b")"],  # not the length it says
        [(LINE, b"abcde"), b" FLAGS (\\Seen))"],  # more after the literal
        [(LINE.replace(b"+0000", b'\\"+0000'), b"abcde"), b")"],  # an escape in the date
        [(b"4 (UID 17 BODY[] {5}", b"abcde"), b' INTERNALDATE "06-Dec-2026 02:22:28 +0000")'],
        [(LINE.replace(b"BODY[]", b"BODY[TEXT]"), b"abcde"), b")"],
        [b"4 (UID 17 RFC822.SIZE 0310)"],  # a leading zero: imapclient keeps it as bytes
        [b"04 (UID 017 RFC822.SIZE 5)"],
        [(LINE.replace(b"{5}", b"{05}"), b"abcde"), b")"],
        [b"4 (UID 17 RFC822.SIZE " + b"9" * 5000 + b")"],  # past Python's int: ProtocolError
        [(LINE.replace(b"{5}", b"{" + b"9" * 5000 + b"}"), b"abcde"), b")"],
    ],
)
def test_any_other_response_is_left_to_imapclient(text) -> None:
    """Read as imapclient reads it, or refused as it refuses it (a literal shorter than
    it says is a ProtocolError)."""
    assert plain(text) is None
    assert outcome(imapfetch.parse_fetch_response, text) == outcome(_IMAPCLIENTS, text)


def outcome(parse: Any, text: list[Any]) -> object:
    try:
        return exactly(parse(text))
    except Exception as exc:
        return type(exc), str(exc)[:200]


def test_a_message_fetched_twice_in_one_response_is_merged_as_imapclient_merges_it() -> None:
    text = [b"4 (UID 17 RFC822.SIZE 5)", (LINE, b"abcde"), b")", b"5 (UID 18 RFC822.SIZE 7)"]
    mine = plain(text)
    assert mine is not None and exactly(mine) == exactly(_IMAPCLIENTS(text))
    assert exactly(plain(text, uid_is_key=False)) == exactly(_IMAPCLIENTS(text, True, False))
    assert set(mine[17]) == {b"SEQ", b"RFC822.SIZE", b"INTERNALDATE", b"BODY[]"}


def test_an_empty_answer_is_left_to_imapclient() -> None:
    assert plain([None]) is None
    assert exactly(imapfetch.parse_fetch_response([None])) == exactly(_IMAPCLIENTS([None]))


def test_a_normalised_arrival_follows_the_machines_zone_as_it_is_now(monkeypatch) -> None:
    """imapclient normalises an INTERNALDATE to the machine's local time at the call:
    never one kept from before a change of zone (or of daylight saving)."""
    if not hasattr(time, "tzset"):
        pytest.skip("no tzset here")
    text = [(LINE, b"abcde"), b")"]
    try:
        for zone in ("UTC", "Europe/Berlin", "Asia/Bangkok", "UTC"):
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            mine = plain(text)
            assert mine is not None and exactly(mine) == exactly(_IMAPCLIENTS(text))
    finally:
        monkeypatch.undo()
        time.tzset()
