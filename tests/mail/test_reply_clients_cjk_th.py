"""Replies as Chinese and Thai mail clients write them (issue 25): only what the player
wrote now counts.

tests/data/mail/replies-cjk-th/ holds one message per client shape, written by make.py
beside it (Apple Mail and iOS Mail, Gmail, NetEase, QQ Mail, Foxmail 6 and 7, Outlook
classic and new, in Chinese and Thai, with Gregorian and Buddhist-era years). In each Ann
writes DICE 2 above and the old message below holds another die, TRAPDOOR 12 and, in
most, cy's key. They are read by their shape (snl_pbem.mail.quotes.read_lines), as
tests/mail/test_reply_languages.py reads the 29 languages of issue 20: each file is
checked as it is read (parse_message) and through the intake, and each attribution and
header block again with the old message unmarked or beginning with its orders.
"""

from __future__ import annotations

import email
import importlib.util
import sys
import unicodedata
from email.message import Message
from typing import Any

import pytest
from mailhelpers import CORPUS, T0, orders_of, replies_since

from snl_pbem.app.intake import ingest
from snl_pbem.mail.commands import Commands, parse_commands
from snl_pbem.mail.parse import parse_message
from snl_pbem.mail.quotes import clean_line
from snl_pbem.store import InboundMessage

FOLDER = CORPUS / "replies-cjk-th"


def _load_make() -> Any:
    spec = importlib.util.spec_from_file_location("replies_cjk_th_make", FOLDER / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


MAKE = _load_make()
CASES: dict[str, Any] = {case.name: case for case in MAKE.CASES}
NAMES = sorted(CASES)
UNMARKED = [name for name in NAMES if not CASES[name].marked]
NEW_ONLY = ((2,), None, ("ann-key-123",))
"""What the reading must give: Ann's new die, no trapdoor, her key only."""
OLD_KEYS = ("cy-key-123", "ann-key-123")


def reading(c: Commands) -> tuple[object, ...]:
    return (c.dice, c.nomination, c.order_keys)


def test_the_corpus_is_what_make_py_writes() -> None:
    """The committed files and make.py agree (run make.py after editing it)."""
    expected = MAKE.build()
    on_disk = {p.name: p.read_bytes() for p in FOLDER.glob("*.eml")}
    assert sorted(on_disk) == sorted(expected)
    assert [name for name in expected if on_disk[name] != expected[name]] == []


def test_the_corpus_has_the_clients_and_the_shapes() -> None:
    clients = " ".join(case.client for case in CASES.values())
    for client in ("Apple Mail", "iOS Mail", "Gmail", "NetEase", "QQ Mail", "Foxmail"):
        assert client in clients
    assert {name.split("_")[0] for name in NAMES} == {"zh", "th"}
    texts = "".join(case.text() for case in CASES.values())
    for shape in ("2569", "写道\uff1a", "发件人\uff1a", "原始邮件", "เขียนว่า:", "จาก:"):
        assert shape in texts, shape


# -- each file, as it is read ---------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_client_reply_is_read_by_its_shape(name: str) -> None:
    case = CASES[name]
    read = parse_message((FOLDER / f"{name}.eml").read_bytes(), "snl@example.org")
    assert read.automated is None and read.note is None
    commands = read.commands
    assert commands is not None
    assert reading(commands) == NEW_ONLY
    assert commands.game == "g1" and commands.problems == ()
    # the reply names where reading stopped: the header, when the old text is not marked
    assert commands.cut == (clean_line(case.cut) if case.cut else None)
    # the text part alone reads the same (the file's text is make.py's)
    assert reading(parse_commands(case.text())) == NEW_ONLY


@pytest.mark.parametrize("name", UNMARKED)
def test_an_unmarked_old_message_that_begins_with_its_orders(name: str) -> None:
    """The old message straight below the header, its first line an order: Foxmail leaves
    no blank line there, and a message replied to from one's sent mail begins with GAME."""
    case = CASES[name]
    orders = [x for x in case.old if x.isascii() and x]
    for below in (case.below_head, []):
        lines = [*case.new, *case.above_head, *case.head, *below, *orders]
        commands = parse_commands("\r\n".join(lines))
        assert reading(commands) == NEW_ONLY, lines
        assert commands.cut == clean_line(case.cut)


# -- attribution lines: marked and unmarked -------------------------------------------------

NEW = ["GAME g1", "KEY ann-key-123", "DICE 2", ""]
OLD = ["GAME g1", "KEY cy-key-123", "DICE 6", "TRAPDOOR 12"]


@pytest.mark.parametrize("attribution", MAKE.ATTRIBUTIONS_BY_SHAPE)
def test_an_attribution_by_shape_with_the_old_message_marked_or_not(attribution: str) -> None:
    """An address, a year (2026 or 2569) and a time, and a colon (full-width or not) at
    the end: the old message below is not read, whether it is quoted with "> " (Gmail,
    Apple Mail, NetEase) or not (a client that drops the marks, Yahoo-style)."""
    marked = [f"> {x}" for x in OLD]
    for body in (
        [*NEW, attribution, "", *marked],
        [*NEW, f"> {attribution}", ">", *marked],  # iOS Mail quotes it with the rest
        [*NEW, attribution, *OLD],
        [*NEW, attribution, "", *OLD],
    ):
        commands = parse_commands("\n".join(body))
        assert reading(commands) == NEW_ONLY, body
        if not body[-1].startswith(">"):
            assert commands.cut == clean_line(attribution)


@pytest.mark.parametrize("attribution", MAKE.ATTRIBUTIONS_MARKED_ONLY)
def test_an_attribution_with_no_address_above_a_marked_quote(attribution: str) -> None:
    """Apple Mail's attribution with a name ("在 2026年12月1日, ann 写道:" with full-width
    comma and colon) has no address and no time: not an attribution by its shape, but its
    client marks the quote, which is skipped; the line itself is read as a sentence and
    ignored."""
    commands = parse_commands("\n".join([*NEW, attribution, "", *(f"> {x}" for x in OLD)]))
    assert reading(commands) == NEW_ONLY
    assert commands.ignored == (clean_line(attribution),)


# -- the header blocks, without the files ---------------------------------------------------


def test_a_foxmail_block_into_orders_with_no_order_above_is_the_players_own() -> None:
    """The other side of the rule Foxmail needs (a block with a timestamp, orders above,
    straight into an order line, ends the reading): with no order line above it, label
    lines straight above the orders are the player's own and the orders are read; below
    orders, label lines without a year and a time of day are too."""
    head = MAKE.FOXMAIL_HEAD_OWN
    honest = parse_commands("\n".join(["你好", "", *head, "GAME g1", "KEY ann-key-123", "DICE 4"]))
    assert (honest.dice, honest.order_keys, honest.cut) == ((4,), ("ann-key-123",), None)
    notes = ["地点\uff1a 家", "时间\uff1a 2026-12-01", "心情\uff1a 很好"]  # a date, no time
    mine = parse_commands("\n".join(["KEY ann-key-123", "DICE 2", *notes, "TRAPDOOR 30"]))
    assert (mine.dice, mine.nomination, mine.cut) == ((2,), 30, None)


@pytest.mark.parametrize("name", ["th_outlook", "zh_outlook"])
def test_a_names_only_block_in_chinese_and_thai(name: str) -> None:
    """Outlook may show names without addresses: below new orders, a value with a year
    (Buddhist-era too) and a time of day is enough."""
    head = [line.split(" <")[0] for line in CASES[name].head]  # the addresses gone
    lines = [*NEW, *head, "", *OLD]
    commands = parse_commands("\n".join(lines))
    assert reading(commands) == NEW_ONLY and commands.cut == clean_line(head[0])


# -- through the intake -----------------------------------------------------------------------


def _views(raw: bytes) -> list[str]:
    """The bytes, and every part decoded as a person reads it (NFKC: full-width forms
    folded), lower case."""
    views = [raw.decode("latin-1").lower()]
    for part in email.message_from_bytes(raw).walk():
        assert isinstance(part, Message)
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            charset = (part.get_content_charset() or "utf-8").replace("windows-", "cp")
            text = payload.decode(charset, "replace")
            views.append(unicodedata.normalize("NFKC", text).lower())
    return views


@pytest.mark.parametrize("name", NAMES)
def test_the_client_reply_through_the_intake(sqlite_intake, name: str) -> None:
    """The file as the intake receives it: Ann's DICE 2 is applied and nothing else (the
    old die, the trapdoor and cy's key never count); the reply says the die, and neither
    the reply nor the copy kept shows a key."""
    db, config = sqlite_intake
    raw = (FOLDER / f"{name}.eml").read_bytes()
    result = ingest(db, config, raw, T0, f"file:{name}")
    assert result.status == "processed", result.detail
    assert [(o.player, o.dice, o.nomination, o.valid) for o in orders_of(db)] == [
        ("ann", "2", None, True)
    ]
    replies = replies_since(db, T0)
    assert [r.recipient for r in replies] == ["ann@example.org"]
    reply = email.message_from_bytes(replies[0].message).get_payload(decode=True)
    assert isinstance(reply, bytes)
    text = reply.decode("utf-8")
    assert "Dice: turn 1: 2" in text and "Trapdoor: none" in text, text
    assert "Lines not obeyed" not in text
    if CASES[name].cut:
        assert "Reading stopped at the line" in text
    with db.transaction() as s:
        kept = s.get(InboundMessage, result.inbound_id).raw
    for view in [*_views(replies[0].message), *_views(kept)]:
        assert not any(key in view for key in OLD_KEYS), view
