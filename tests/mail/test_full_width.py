"""Orders typed in full-width forms (issue 25): a Chinese input method left in full-width
mode types DICE 4 as U+FF24 U+FF29 U+FF23 U+FF25 U+3000 U+FF14 (the forms U+FF01 to
U+FF5E, and the ideographic space), and the player means DICE 4. Every line is read
through one place, snl_pbem.mail.quotes.clean_line, which makes those forms ASCII: the
order language, the quote rules (an order line above a reply header), the reply's echo
of the lines and the keys all see the ASCII form. Digits of other scripts are not
folded: they still get the clear answer that they are not written with the digits 0 to
9."""

from __future__ import annotations

import base64
import email
import unicodedata
from email.message import Message

import pytest
from mailhelpers import T0, orders_of, replies_since

from snl_pbem.app.intake import ingest
from snl_pbem.mail.commands import parse_commands
from snl_pbem.mail.parse import parse_message, redact_secrets
from snl_pbem.mail.quotes import clean_line, read_lines, without_full_width
from snl_pbem.store import InboundMessage

SP = "\u3000"
"""The ideographic space, which a full-width input method types for a space."""


def full_width(text: str) -> str:
    """``text`` as a full-width input method types it."""
    return "".join(
        SP if ch == " " else chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text
    )


# -- the lines, as clean_line gives them ---------------------------------------------------


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (full_width("DICE 4"), "DICE 4"),
        (full_width("GAME g1"), "GAME g1"),
        (full_width("KEY ann-key-123"), "KEY ann-key-123"),
        ("TRAPDOOR " + full_width("12"), "TRAPDOOR 12"),
        ("DICE " + full_width("4,5"), "DICE 4,5"),
        (full_width("dice:4"), "dice:4"),
        (f"DICE{SP}{SP}4{SP}", "DICE 4"),  # ideographic spaces collapse like any
        ("谢谢\uff01", "谢谢!"),  # full-width punctuation in a sentence too
        ("\uff5f\uff60\uff61", "\uff5f\uff60\uff61"),  # past U+FF5E: not ASCII forms
        ("DICE \u0e54", "DICE \u0e54"),  # Thai four
        ("DICE \u0664", "DICE \u0664"),  # Arabic-Indic four
        ("DICE \u096a", "DICE \u096a"),  # Devanagari four
        ("DICE \u00b2", "DICE \u00b2"),  # superscript two
        ("DICE \u2463", "DICE \u2463"),  # circled four
    ],
)
def test_full_width_forms_are_read_as_ascii_and_nothing_else_is(written: str, read: str) -> None:
    assert clean_line(written) == read


def test_the_fold_is_the_one_block_and_leaves_other_text_as_it_is() -> None:
    folded = without_full_width("".join(map(chr, range(0xFF00, 0xFF70))))
    assert folded[1:0x5F] == "".join(map(chr, range(0x21, 0x7F)))
    assert folded[0] == "\uff00" and folded[0x5F:] == "".join(map(chr, range(0xFF5F, 0xFF70)))
    text = "สวัสดี 你好 ٤ ४ ① DICE 4"
    assert without_full_width(text) is text  # nothing to fold: no copy


# -- the order language reads them ---------------------------------------------------------

ORDERS = [
    (full_width("DICE 4"), "dice", (4,)),
    (full_width("DIE 3"), "dice", (3,)),
    ("DICE " + full_width("4,5"), "dice", (4, 5)),  # the full-width comma
    ("DICE " + full_width("4 2"), "dice", (4, 2)),
    (full_width("dice: 6"), "dice", (6,)),
    (full_width("GAME g1"), "game", "g1"),
    ("GAME " + full_width("[g1]"), "game", "g1"),
    (full_width("KEY ann-key-123"), "order_keys", ("ann-key-123",)),
    (full_width("KEY: ANN-KEY-123"), "order_keys", ("ANN-KEY-123",)),
    ("TRAPDOOR " + full_width("12"), "nomination", 12),
    (full_width("TRAPDOOR 37"), "nomination", 37),
    (full_width("ROUND 1"), "round", 1),
]


@pytest.mark.parametrize(("line", "field", "value"), ORDERS)
def test_orders_typed_full_width_are_read(line: str, field: str, value: object) -> None:
    commands = parse_commands(line)
    assert getattr(commands, field) == value
    assert commands.problems == () and commands.ignored == ()


def test_a_whole_order_set_typed_full_width() -> None:
    body = "\n".join(
        [
            full_width("GAME g1"),
            full_width("KEY ann-key-123"),
            "TRAPDOOR " + full_width("12"),
            "DICE " + full_width("4,5"),
        ]
    )
    commands = parse_commands(body)
    assert (commands.game, commands.order_keys, commands.dice, commands.nomination) == (
        "g1",
        ("ann-key-123",),
        (4, 5),
        12,
    )
    assert commands.problems == () and commands.ignored == ()


@pytest.mark.parametrize("digit", ["\u0e54", "\u0664", "\u096a", "\u00b2", "\u2463", "\u2460"])
def test_other_digits_still_get_the_clear_answer(digit: str) -> None:
    """Thai, Arabic-Indic and Devanagari digits, a superscript and circled digits are not
    the full-width forms: the same answer as before, for a die, a round and a trapdoor."""
    for line, what in [
        (f"DICE {digit}", "each die"),
        (f"ROUND {digit}", "the round number"),
        (f"TRAPDOOR {digit}", "the space number"),
    ]:
        commands = parse_commands(line)
        assert [p.reason for p in commands.problems] == [
            f"{digit!r} is not written with the digits 0 to 9: write {what} with them"
        ], line


def test_a_full_width_order_above_a_reply_header_protects_the_new_orders() -> None:
    """The quote rules read the same folded lines: a full-width order line above an
    attribution known by its shape alone is an order above it, so the old message below
    (unmarked, as Yahoo leaves it) is not read."""
    body = "\n".join(
        [
            full_width("KEY ann-key-123"),
            full_width("DICE 2"),
            "",
            "Ann Lee <ann@example.org> 于2026年12月1日周二 15:05写道\uff1a",
            "KEY ann-key-123",
            "DICE 4",
            "TRAPDOOR 12",
        ]
    )
    commands = parse_commands(body)
    assert (commands.dice, commands.nomination) == ((2,), None)
    assert commands.cut == "Ann Lee <ann@example.org> 于2026年12月1日周二 15:05写道:"


def test_a_full_width_command_with_a_colon_is_never_a_header_line() -> None:
    """DICE, a full-width colon and 4, all typed full-width, has a label's shape; folded,
    it is a command, and a command is never a header block's line."""
    body = "\n".join(
        [
            "你好",
            "发件人: Ann Lee <ann@example.org>",
            "发送时间: 2026年12月1日 15:05",
            full_width("GAME: g1"),
            full_width("KEY: ann-key-123"),
            full_width("DICE: 4"),
        ]
    )
    commands = parse_commands(body)
    assert (commands.game, commands.order_keys, commands.dice) == ("g1", ("ann-key-123",), (4,))


def test_the_lines_echoed_are_the_lines_as_read() -> None:
    """What the reply quotes is what was read: the folded line ("DICE x", not the
    full-width one), a sentence with its full-width punctuation made ASCII."""
    lines, _dropped, _cut = read_lines(full_width("DICE x") + "\n谢谢\uff01")
    assert lines == ["DICE x", "谢谢!"]
    commands = parse_commands("\n".join(lines))
    assert [p.line for p in commands.problems] == ["DICE x"]
    assert commands.ignored == ("谢谢!",)


# -- keys typed full-width are found, and never kept or echoed ------------------------------


def _views(raw: bytes) -> list[str]:
    """Every text part of a message, decoded, as a person reads it (full-width forms and
    other look-alikes folded by NFKC), and the bytes themselves."""
    views = [raw.decode("latin-1")]
    for part in email.message_from_bytes(raw).walk():
        assert isinstance(part, Message)
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            text = payload.decode(part.get_content_charset() or "utf-8", "replace")
            views.append(unicodedata.normalize("NFKC", text).lower())
    return views


def _gb18030_message(tag: str, body: str) -> bytes:
    """A message as QQ Mail writes a plain one: GB18030, base64."""
    return (
        "From: =?gb18030?B?sLI=?= <ann@example.org>\r\nTo: snl@example.org\r\n"
        f"Subject: [g1] orders\r\nMessage-ID: <tencent_{tag}@qq.com>\r\nMime-Version: 1.0\r\n"
        'Content-Type: text/plain;\r\n\tcharset="gb18030"\r\nContent-Transfer-Encoding: base64\r\n'
        "X-Mailer: QQMail 2.x\r\n\r\n"
    ).encode() + base64.encodebytes(body.encode("gb18030")).replace(b"\n", b"\r\n")


def test_a_quoted_key_typed_full_width_is_found_and_redacted() -> None:
    """Redaction looks for KEY lines in the whole message, quotes included: a quoted KEY
    line typed full-width is one, and its key goes from the copy kept in every form."""
    body = "\r\n".join(
        [
            full_width("GAME g1"),
            full_width("KEY ann-key-123"),
            full_width("DICE 4"),
            "",
            "> " + full_width("KEY cy-key-123"),
            "> " + full_width("DICE 6"),
            "",
        ]
    )
    read = parse_message(_gb18030_message("quoted", body), "snl@example.org")
    assert read.commands is not None and read.commands.order_keys == ("ann-key-123",)
    assert "cy-key-123" in read.quoted_keys
    assert read.redacted is not None
    for view in _views(read.redacted):
        assert "ann-key-123" not in view and "cy-key-123" not in view, view
    # and redaction finds a full-width key given as ASCII, as the reader gives it
    kept = redact_secrets(_gb18030_message("again", body), ["ann-key-123", "cy-key-123"])
    assert all("key-123" not in view for view in _views(kept))


# -- through the intake ---------------------------------------------------------------------


def _reply_text(db) -> str:
    message = email.message_from_bytes(replies_since(db, T0)[-1].message)
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode("utf-8")


def _stored(db, inbound_id: int) -> bytes:
    with db.transaction() as s:
        return s.get(InboundMessage, inbound_id).raw


QQ_ORDERS = "\r\n".join(
    [
        "你好\uff0c",
        "",
        full_width("GAME g1"),
        full_width("KEY ann-key-123"),
        full_width("DICE 4"),
        "TRAPDOOR " + full_width("12"),
        "",
        "我的钥匙是" + full_width("ann-key-123") + "\uff0c对吗\uff1f",
        "",
        "谢谢\uff01",
        "",
    ]
)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("qq_gb18030_base64", _gb18030_message("fullwidth", QQ_ORDERS)),
        (
            "foxmail_utf8_base64",
            (
                b'Date: Tue, 1 Dec 2026 15:21:07 +0800\r\nFrom: "=?utf-8?B?5a6J?=" '
                b"<ann@example.org>\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
                b"X-Mailer: Foxmail 7.2.25.375[cn]\r\nMime-Version: 1.0\r\n"
                b"Message-ID: <202612011521071234567@example.org>\r\n"
                b'Content-Type: text/plain;\r\n\tcharset="utf-8"\r\n'
                b"Content-Transfer-Encoding: base64\r\n\r\n"
            )
            + base64.encodebytes(QQ_ORDERS.encode()).replace(b"\n", b"\r\n"),
        ),
    ],
)
def test_full_width_orders_through_the_intake(sqlite_intake, name: str, raw: bytes) -> None:
    """A Chinese client's message, its orders typed full-width: applied; the reply says
    the die and the trapdoor, quotes the lines it did not obey as read (ASCII), and shows
    the key in no form; the copy kept shows it in no form either."""
    db, config = sqlite_intake
    result = ingest(db, config, raw, T0, f"file:{name}")
    assert result.status == "processed", result.detail
    assert [(o.player, o.dice, o.nomination, o.valid) for o in orders_of(db)] == [
        ("ann", "4", 12, True)
    ]
    reply = _reply_text(db)
    assert "Dice: turn 1: 4" in reply and "Trapdoor: space 12" in reply, reply
    assert "我的钥匙是****,对吗?" in reply  # the sentence as read, its key redacted
    folded = unicodedata.normalize("NFKC", reply).lower()
    assert "ann-key" not in folded and "key-123" not in folded, reply
    for view in _views(_stored(db, result.inbound_id)):
        assert "ann-key-123" not in view, view


def test_a_full_width_die_out_of_range_is_answered_in_the_digits_read(sqlite_intake) -> None:
    """A full-width 7 is a 7: the answer is that it is no die value, not that it is
    written with other digits than 0 to 9."""
    db, config = sqlite_intake
    body = "\r\n".join([full_width("KEY ann-key-123"), full_width("DICE 7"), ""])
    result = ingest(db, config, _gb18030_message("seven", body), T0, "t")
    assert result.status == "processed", result.detail
    reply = _reply_text(db)
    assert "Dice: NOT VALID (7)" in reply and "- 7 is not a die value (1 to 6)" in reply, reply
    assert "digits 0 to 9" not in reply and full_width("7") not in reply
