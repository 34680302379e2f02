"""The usual From read without the standard library's address parser
(``snl_pbem.mail.parse._usual_from``): whatever it reads, it reads as ``getaddresses``
does, and the sender found (address, and why it is doubtful) is the same either way."""

from __future__ import annotations

import email
import email.message
import random
from email.utils import getaddresses

import pytest
from mailhelpers import CORPUS

from snl_pbem.mail import parse
from snl_pbem.mail.parse import _decoded_words, _usual_from, sender_address

USUAL = [
    "Player 0 <p0@example.org>",
    "ann@example.org",
    "<ann@example.org>",
    "Ann Example <Ann.Example@Mail.Example.ORG>",
    "O'Brien <o'brien+snl@example.co.uk>",
    "=?utf-8?q?M=C3=BCller=2C_Ann?= <ann@example.org>",
    "=?UTF-8?B?5byg5LiJ?= <zhang@example.cn>",
    "Bob <bob@localhost>",
    "x_y-z <a!b#c$d%e&f*g/h=i?j^k`l{m|n}o~p@example.org>",
]
"""Read by the pattern (checked below: a test of nothing but fallbacks proves nothing)."""
OTHER = [
    '"cy" <CY@Example.ORG>',
    '"unterminated <ann@example.org',
    "Ann  Example <ann@example.org>",  # two spaces: the library keeps one
    "John Q. Public <jqp@example.org>",  # (a dot in a name: left to the library)
    "Ann,Bob <a@b.example>",  # two addresses to the library: "more than one From address"
    "Ann(x) <a@b.example>",  # a comment: the library's name is "Ann (x)"
    "Ann\tBob <a@b.example>",  # the library's name is "Ann Bob"
    "Ann\xa0<a@b.example>",  # the library's name is "Ann\xa0"
    "Mallory ann@example.org <mallory@evil.example>",  # (a doubt: the name shows another)
    "ann@example.org (Ann)",
    "Ann <ann@example.org",
    "<ann@example.org",
    "ann@example.org>",
    "Ann <ann@example.org>, Bob <bob@example.org>",
    "Ann <ann@example.org.>",
    "Ann <ann@[127.0.0.1]>",
    "Ann <ann@exämple.org>",
    "Änn <ann@example.org>",
    "group: ann@example.org;",
    "Ann <@route:ann@example.org>",
    " Ann <ann@example.org>",
    "Ann <ann@example.org> ",
    "",
]


def _from(value: str) -> email.message.Message:
    return email.message_from_string(f"From: {value}\n\nDICE 4\n")


def _library(value: str) -> list[tuple[str, str]]:
    return [(_decoded_words(n), a) for n, a in getaddresses([value]) if a or n]


def _sender_both_ways(
    msg: email.message.Message, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, object]:
    """``sender_address`` of ``msg`` with the pattern, and with the library alone."""
    fast = sender_address(msg)
    with monkeypatch.context() as m:
        m.setattr(parse, "_usual_from", lambda value: None)
        slow = sender_address(msg)
    return fast, slow


@pytest.mark.parametrize("value", USUAL)
def test_a_usual_from_is_read_by_the_pattern_as_the_library_reads_it(value: str) -> None:
    assert _usual_from(value) is not None
    assert _usual_from(value) == _library(value)


@pytest.mark.parametrize("value", OTHER)
def test_any_other_from_is_left_to_the_library(value: str, monkeypatch) -> None:
    assert _usual_from(value) is None
    fast, slow = _sender_both_ways(_from(value), monkeypatch)
    assert fast == slow


def test_the_corpus_senders_are_found_alike(monkeypatch) -> None:
    """Every From of the mail corpus: the same sender and doubt either way."""
    seen = 0
    for path in sorted(CORPUS.rglob("*.eml")):
        msg = email.message_from_bytes(path.read_bytes())
        if msg.get("From") is None:
            continue
        fast, slow = _sender_both_ways(msg, monkeypatch)
        assert fast == slow, path.name
        seen += 1
    assert seen >= 10


def test_random_froms_built_of_the_hard_characters_are_read_alike(monkeypatch) -> None:
    """Thousands of From values built of the characters an address parser treats apart
    (quotes, comments, brackets, dots, commas, colons, spaces, non-ASCII, encoded words):
    where the pattern reads one, it reads what the library reads, and the sender found is
    the same. Seeded: the same values every run."""
    rng = random.Random(23)
    pieces = [
        "ann", "Bob", "x", "0", "o'k", "=?utf-8?q?A=2C_B?=", "é", "张", " ", "  ", "\t",
        ".", ",", '"', "(", ")", "<", ">", "@", ":", ";", "[", "]", "\\", "-", "_", "+",
        "example", "org", "@example.org", "<a@b.org>", "a@b.org",
    ]  # fmt: skip
    read = 0
    for _ in range(6000):
        value = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 9)))
        if rng.random() < 0.5:  # half shaped like a usual From, then spoilt or not
            words = ["Ann", "Bob", "X-1", "o'k", "=?utf-8?q?A?=", *rng.sample(pieces, 3)]
            name = " ".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
            value = f"{name} <{value.replace(' ', '')}@example.org>" if name else value
        fast = _usual_from(value)
        if fast is not None:
            read += 1
            assert fast == _library(value), value
        fast_sender, slow_sender = _sender_both_ways(_from(value), monkeypatch)
        assert fast_sender == slow_sender, value
    assert read >= 100  # the pattern was met, not only passed over (131 of these)
