"""The FETCH responses the poller asks for, read without imapclient's general parser.

The poller asks two things of each fetch of up to a hundred messages: their sizes
(``RFC822.SIZE``), then their bytes and arrival (``BODY.PEEK[]`` or ``BODY.PEEK[HEADER]``,
and ``INTERNALDATE``). imapclient reads any FETCH response with a general lexer, a token
at a time: 31 us a message for the bytes and 11 for the sizes, a twentieth of the server's
CPU for a message read through Dovecot (issue 23). Responses in exactly the forms a server
answers these with are read here with one pattern a message instead (4 us in all):

    * 7 FETCH (UID 42 RFC822.SIZE 2310)
    * 7 FETCH (UID 42 INTERNALDATE "06-Dec-2026 02:22:28 +0000" BODY[] {2310}<the bytes>)

giving what imapclient gives for them (the same dictionary, the same values). Anything
else in a response (another attribute, another order, lower case, a literal not the
length it says, an unsolicited FETCH of flags...) has the whole response read by
imapclient's own parser, as before. ``install`` puts this in front of imapclient's, for
every ``IMAPClient.fetch`` of the process.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache
from typing import Any

import imapclient
import imapclient.imapclient
from imapclient import response_parser
from imapclient.datetime_util import parse_to_datetime

_IMAPCLIENTS = response_parser.parse_fetch_response
"""imapclient's own parser: every response not in the forms below."""

_N = rb"(0|[1-9][0-9]{0,17})"
"""A number as imapclient reads it to an int: no leading zero (its lexer keeps ``0310`` as
bytes), and short (a number of thousands of digits is refused by Python's ``int``, which
would raise here what imapclient raises as its ProtocolError)."""
_SIZE = re.compile(_N + rb" \(UID " + _N + rb" RFC822\.SIZE " + _N + rb"\)\Z")
_BYTES = re.compile(
    _N + rb" \(UID " + _N + rb' INTERNALDATE "([^"\\]*)" (BODY\[(?:HEADER)?\]) \{' + _N + rb"\}\Z"
)
_KNOWN = ("4.",)
"""The imapclient versions whose parser this is checked against (tests/mail/test_imapfetch.py);
with another, ``install`` leaves every response to its own."""


def parse_fetch_response(
    text: list[Any], normalise_times: bool = True, uid_is_key: bool = True
) -> defaultdict[int, dict[bytes, Any]]:
    """imapclient's ``parse_fetch_response``: the poller's forms read here (``plain``),
    any other response by imapclient's parser."""
    found = plain(text, normalise_times, uid_is_key)
    if found is None:
        found = _IMAPCLIENTS(text, normalise_times, uid_is_key)
    return found


def plain(
    text: list[Any], normalise_times: bool = True, uid_is_key: bool = True
) -> defaultdict[int, dict[bytes, Any]] | None:
    """What imapclient's parser gives for a response (imaplib's items: a line, or a line
    ending in a literal and the literal, then the line's rest) in which every message is
    in one of the poller's forms; None for any other."""
    found: defaultdict[int, dict[bytes, Any]] = defaultdict(dict)
    at, end = 0, len(text)
    while at < end:
        item = text[at]
        data: dict[bytes, Any]
        if isinstance(item, bytes):
            sized = _SIZE.match(item)
            if sized is None:
                return None
            seq, uid = int(sized[1]), int(sized[2])
            data = {b"SEQ": seq, b"UID": uid, b"RFC822.SIZE": int(sized[3])}
            at += 1
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[1], bytes)
            and at + 1 < end
            and text[at + 1] == b")"
        ):
            head = _BYTES.match(item[0]) if isinstance(item[0], bytes) else None
            if head is None or len(item[1]) != int(head[5]):
                return None
            seq, uid = int(head[1]), int(head[2])
            arrived = _arrival(head[3], normalise_times)
            data = {b"SEQ": seq, b"UID": uid, b"INTERNALDATE": arrived, head[4]: item[1]}
            at += 2
        else:
            return None
        if uid_is_key:  # (in imapclient's order: SEQ, UID unless it is the key, the rest)
            del data[b"UID"]
        found[uid if uid_is_key else seq].update(data)
    return found


def _arrival(date: bytes, normalise_times: bool) -> Any:
    """An INTERNALDATE as imapclient reads it: normalised, in the machine's local time as
    it is now (its zone or daylight saving may change); not normalised, as it is written,
    made once (9 us: a fetch's messages mostly arrived within a few seconds). The poller
    does not normalise."""
    return _as_written(date) if not normalise_times else _converted(date, True)


@lru_cache(maxsize=256)
def _as_written(date: bytes) -> Any:
    return _converted(date, False)


def _converted(date: bytes, normalise_times: bool) -> Any:
    """imapclient's ``_convert_INTERNALDATE``: the datetime, or the bytes it cannot read."""
    try:
        return parse_to_datetime(date, normalise=normalise_times)
    except ValueError:
        return date


def install() -> bool:
    """Read every FETCH response of this process's ``IMAPClient.fetch`` here first (with
    an imapclient of a version this is checked against); whether it does."""
    if not str(getattr(imapclient, "__version__", "")).startswith(_KNOWN):
        return False
    imapclient.imapclient.parse_fetch_response = parse_fetch_response
    return True
