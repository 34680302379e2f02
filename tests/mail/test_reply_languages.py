"""Reply headers in any language (issue 20): only what the player wrote now counts.

An Outlook or OWA plain-text reply puts a header block above the old message and does not
mark the old message as quoted; Gmail writes an attribution line, Yahoo one above an
unmarked quote. Their words differ in every language, so they are known by their shape
(snl_pbem.mail.quotes.read_lines). The table tests/data/mail/replies/languages.toml
holds the labels, dates and attribution lines of 29 languages and two invented ones that
no word list could hold; make.py beside it writes the corpus of .eml files from it, in
UTF-8 and each language's legacy charset. In every message Ann's new order is DICE 2 and
the old message below holds DICE 4 (hers) or DICE 6 with cy's key, and TRAPDOOR 12: a
reading that let the old text through gives another die, a trapdoor, or two keys (and so
nothing applied at all).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest
from mailhelpers import CORPUS, T0, orders_of, replies_since

from snl_pbem.app.intake import ingest
from snl_pbem.mail.commands import Commands, parse_commands
from snl_pbem.mail.quotes import clean_line, read_lines

REPLIES = CORPUS / "replies"


def _load_make() -> Any:
    spec = importlib.util.spec_from_file_location("replies_make", REPLIES / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _load_make()
ROWS: list[dict[str, Any]] = MAKE.rows()
BY_CODE = {row["code"]: row for row in ROWS}
CODES = sorted(BY_CODE)
NEW_ONLY = ((2,), None, ("ann-key-123",))
"""What the reading must give: Ann's new die, no trapdoor, her key only."""


def reading(c: Commands) -> tuple[object, ...]:
    return (c.dice, c.nomination, c.order_keys)


def test_the_table_has_twenty_languages_and_labels_no_list_could_hold() -> None:
    real = [row for row in ROWS if not row.get("invented")]
    assert len(real) >= 20 and len({row["labels"][0] for row in ROWS}) >= 20
    assert [row for row in ROWS if row.get("invented")]
    assert len(CODES) == len(ROWS)
    assert {row["charset"] for row in ROWS} >= {
        "iso-2022-jp",
        "gb2312",
        "big5",
        "ks_c_5601-1987",
        "windows-874",
        "koi8-r",
    }


def test_the_corpus_is_what_make_py_writes() -> None:
    """The committed files and the table agree (run make.py after editing the table)."""
    expected: dict[str, bytes] = {}
    for row in ROWS:
        expected.update(MAKE.build(row))
    on_disk = {p.name: p.read_bytes() for p in REPLIES.glob("*.eml")}
    assert sorted(on_disk) == sorted(expected)
    assert [name for name in expected if on_disk[name] != expected[name]] == []


# -- header blocks, by their shape ------------------------------------------------------

BLOCK_STYLES = [
    (code, style)
    for code in CODES
    for style in ("plain", "rule", "separator")
    if style != "separator" or "separator" in BY_CODE[code]
]
"""No rule line; the rule of underscores; the language's "Original Message" line."""


@pytest.mark.parametrize(("code", "style"), BLOCK_STYLES)
def test_a_header_block_in_any_language_ends_the_reading(code: str, style: str) -> None:
    row = BY_CODE[code]
    body = MAKE.outlook_body(row, rule=style == "rule", separator=style == "separator")
    commands = parse_commands(body, "RE: [g1] orders")
    assert reading(commands) == NEW_ONLY
    assert commands.game == "g1" and commands.problems == ()
    first = {"plain": MAKE.header_block(row)[0], "rule": MAKE.RULE}.get(style, row.get("separator"))
    assert commands.cut == clean_line(first)  # the reply names where reading stopped


@pytest.mark.parametrize("code", CODES)
def test_a_header_block_above_a_marked_quote_reads_on_below_it(code: str) -> None:
    """Outlook set to prefix the original with "> ": the block and the quote are skipped
    and what the player wrote below them is read."""
    row = BY_CODE[code]
    old = [f"> {x}" if x else ">" for x in MAKE.old_text(row)]
    body = "\r\n".join(["KEY ann-key-123", "", *MAKE.header_block(row), "", *old, "", "DICE 2", ""])
    assert reading(parse_commands(body)) == NEW_ONLY


@pytest.mark.parametrize("code", CODES)
def test_a_header_block_without_the_blank_line_below_it(code: str) -> None:
    """Some clients (and a forward of a forward) put the old text right below the block."""
    row = BY_CODE[code]
    lines = [*MAKE.new_text(row), *MAKE.header_block(row), *MAKE.old_text(row)[1:]]
    assert reading(parse_commands("\n".join(lines))) == NEW_ONLY


# -- attribution lines, by their shape --------------------------------------------------


@pytest.mark.parametrize("code", CODES)
def test_an_attribution_line_in_any_language(code: str) -> None:
    row = BY_CODE[code]
    new, old = MAKE.new_text(row), MAKE.old_text(row)
    marked = [f"> {x}" if x else ">" for x in old]
    for attribution in ([row["attribution"]], MAKE.wrapped_attribution(row)):
        # Gmail: the old message quoted with "> "
        body = "\n".join([*new, *attribution, "", *marked])
        assert reading(parse_commands(body)) == NEW_ONLY, body
        # Yahoo and others: the old message below the attribution, unmarked
        body = "\n".join([*new, *attribution, *old])
        commands = parse_commands(body)
        assert reading(commands) == NEW_ONLY, body
        assert commands.cut == clean_line(attribution[0])


ATTRIBUTIONS_BY_SHAPE = [
    "2026年11月30日(月) 9:00 Ann Lee <ann@example.org>:",
    "2026년 11월 30일 (월) 오전 9:00, Ann <ann@example.org>님이 작성:",
    "เมื่อ จ. 30 พ.ย. 2026 09:00 Ann <ann@example.org> เขียนว่า:",
    "Ann Lee <ann@example.org> 于2026年11月30日周一 09:00写道\uff1a",  # a full-width colon
    "ma 30.11.2026 klo 9.00 Ann Lee <ann@example.org> kirjoitti:",
    # 30/11/2026 09:00 in Arabic-Indic digits
    "\u0663\u0660/\u0661\u0661/\u0662\u0660\u0662\u0666 \u0660\u0669:\u0660\u0660 "
    "Ann <ann@example.org>:",
    "Zorp 30-11-2026 @ 09:00 ann@example.org blorg:",
    # a two-digit year, as Thunderbird writes it in some languages
    "Ar 30/11/26 09:00, Ann <ann@example.org> ysgrifennodd:",
    "Þann 30.11.26 kl. 09:00, skrifaði Ann <ann@example.org>:",
]


@pytest.mark.parametrize("line", ATTRIBUTIONS_BY_SHAPE)
def test_an_attribution_is_an_address_a_year_a_time_and_a_colon(line: str) -> None:
    body = f"KEY ann-key-123\nDICE 2\n\n{line}\nKEY ann-key-123\nDICE 4\nTRAPDOOR 12\n"
    assert reading(parse_commands(body)) == NEW_ONLY


NOT_ATTRIBUTIONS = [
    "Meeting on 30.11.2026 with ann@example.org:",  # no time of day
    "See you at 9:00 with ann@example.org:",  # no year
    "On 30.11.2026 at 9:00 I will be away, so:",  # no address
    "On 30.11.2026 at 9:00, ann@example.org said",  # no colon at the end
    "Version 1.2.3.4 from 30/11 with ann@example.org at 9:00:",  # no year of any kind
]


@pytest.mark.parametrize("line", NOT_ATTRIBUTIONS)
def test_a_line_without_the_whole_shape_is_the_players_own(line: str) -> None:
    body = f"KEY ann-key-123\nDICE 2\n{line}\nTRAPDOOR 30\n"
    commands = parse_commands(body)
    assert (commands.dice, commands.nomination, commands.cut) == ((2,), 30, None)


def test_an_attribution_shaped_line_above_the_players_orders_is_read_through() -> None:
    """The rule of read_lines, both sides. Honest: a heading line of the player's own
    with an address, a date and a time above orders, nothing written before it: the
    orders below it are read. Top-posted reply: once an order line stands above such a
    line, what follows it unmarked is the old message and is not read."""
    heading = "Sent from the office on 30.11.2026 at 9:00, ann@example.org:"
    honest = parse_commands(f"{heading}\nGAME g1\nKEY ann-key-123\nDICE 4\nTRAPDOOR 30\n")
    assert (honest.dice, honest.nomination, honest.cut) == ((4,), 30, None)
    assert heading in honest.ignored
    top_posted = parse_commands(f"KEY ann-key-123\nDICE 2\n\n{heading}\nDICE 4\nTRAPDOOR 12\n")
    assert reading(top_posted) == NEW_ONLY and top_posted.cut == heading
    # a greeting above it is not an order: the lines below are still the player's
    greeted = parse_commands(f"Hello,\n{heading}\nKEY ann-key-123\nDICE 4\n")
    assert greeted.dice == (4,)
    # with a known "wrote" word the bar is lower: the old text below never counts
    hinted = parse_commands("Thanks!\nOn 30.11.2026 at 9:00, Ann <ann@example.org> wrote:\nDICE 4")
    assert hinted.dice is None and hinted.cut is not None


# -- what is never a header -------------------------------------------------------------


def test_command_lines_with_colons_are_never_a_header_block() -> None:
    """DICE:, TRAPDOOR:, GAME:, KEY: lines have the shape of labels; they are orders."""
    body = (
        "Hello referee,\n"
        "From: Ann Lee <ann@example.org>\n"
        "Date: 30.11.2026 09:00\n"
        "GAME: g1\n"
        "KEY: ann-key-123\n"
        "DICE: 4\n"
        "TRAPDOOR: 37\n"
    )
    commands = parse_commands(body)
    assert (commands.game, commands.order_keys, commands.dice, commands.nomination) == (
        "g1",
        ("ann-key-123",),
        (4,),
        37,
    )
    # the player's own label lines straight above the orders do not hide them either
    own = (
        "Hi\nName: Ann Lee\nMail: ann@example.org\nWhen: 30.11.2026 09:00\n"
        "KEY: ann-key-123\nDICE: 4"
    )
    assert reading(parse_commands(own)) == ((4,), None, ("ann-key-123",))
    # nor do the command lines themselves, at the top of the message
    top = "DICE: 4\nTRAPDOOR: 37\nGAME: g1\nKEY: abc-123\n"
    commands = parse_commands(top)
    assert (commands.dice, commands.nomination, commands.game, commands.order_keys) == (
        (4,),
        37,
        "g1",
        ("abc-123",),
    )


@pytest.mark.parametrize(
    "lines",
    [
        ["Note: see you at 9:00"],  # one line is never a block
        ["Note: see you at 9:00", "Mail: ann@example.org"],  # two, with no rule above
        ["Subject: my orders", "Status: keen", "Mood: 2026 is my year"],  # no address
        # a signature: a phone number is not a date
        ["Ann Lee", "Phone: +44 20 7946 0000", "Email: ann@example.org", "Web: https://x.org"],
    ],
)
def test_a_players_notes_are_not_a_header_block(lines: list[str]) -> None:
    body = "\n".join(["KEY ann-key-123", "DICE 2", *lines, "", "TRAPDOOR 30"])
    commands = parse_commands(body)
    assert (commands.dice, commands.nomination, commands.cut) == ((2,), 30, None)


def test_a_block_by_shape_at_the_very_top_is_the_players_own() -> None:
    """No client puts a header block above everything with no rule: read on."""
    body = "Name: Ann Lee\nMail: ann@example.org\nDate: 30.11.2026 09:00\n\nKEY ann-key-123\nDICE 4"
    assert parse_commands(body).dice == (4,)
    # a forward with no text of its own starts with the rule, and is not read
    forward = f"{MAKE.RULE}\n{body}\n"
    assert parse_commands(forward).dice is None


NAMES_ONLY_LABELS = {
    "en": ("From", "Sent", "To", "Subject"),
    "de": ("Von", "Gesendet", "An", "Betreff"),
    "fr": ("De", "Envoyé", "À", "Objet"),
    "es": ("De", "Enviado el", "Para", "Asunto"),
    "it": ("Da", "Inviato", "A", "Oggetto"),
    "nl": ("Van", "Verzonden", "Aan", "Onderwerp"),
    "pt": ("De", "Enviado", "Para", "Assunto"),
    "sv": ("Från", "Skickat", "Till", "Ämne"),
    "pl": ("Od", "Wysłano", "Do", "Temat"),
    "cs": ("Od", "Odesláno", "Komu", "Předmět"),
    "ru": ("От", "Отправлено", "Кому", "Тема"),
    "ja": ("差出人", "送信日時", "宛先", "件名"),
    "zh": ("发件人", "发送时间", "收件人", "主题"),
    "ko": ("보낸 사람", "보낸 날짜", "받는 사람", "제목"),
    "tr": ("Kimden", "Gönderildi", "Kime", "Konu"),
    "fi": ("Lähettäjä", "Lähetetty", "Vastaanottaja", "Aihe"),
    "hu": ("Feladó", "Elküldve", "Címzett", "Tárgy"),
    "el": ("Από", "Στάλθηκε", "Προς", "Θέμα"),
    "th": ("จาก", "ส่ง", "ถึง", "เรื่อง"),
    "vi": ("Từ", "Đã gửi", "Đến", "Chủ đề"),
    "he": ("מאת", "נשלח", "אל", "נושא"),
    "ar": ("من", "تاريخ الإرسال", "إلى", "الموضوع"),
}
"""Outlook's labels in 22 languages (the review of issue 20, finding 1)."""


def names_only_block(labels: tuple[str, ...], date: str = "30.11.2026 09:00") -> list[str]:
    """Outlook's header block when it shows names and no addresses."""
    sender, sent, to, subject = labels
    return [
        f"{sender}: Snakes Referee",
        f"{sent}: {date}",
        f"{to}: Ann Lee",
        f"{subject}: [g1] Round 3",
    ]


@pytest.mark.parametrize("rule", [True, False], ids=["rule", "no_rule"])
@pytest.mark.parametrize("code", sorted(NAMES_ONLY_LABELS))
def test_a_names_only_block_below_new_orders_ends_the_reading(code: str, rule: bool) -> None:
    """Once an order line stands above it, a block needs no address: a year and a time
    of day in one value is enough, with or without the rule of underscores."""
    block = names_only_block(NAMES_ONLY_LABELS[code])
    top = [MAKE.RULE] if rule else []
    body = "\n".join(
        [
            *("GAME g1", "KEY ann-key-123", "DICE 2", ""),
            *top,
            *block,
            *("", "GAME g1", "KEY ann-key-123", "DICE 4", "TRAPDOOR 12"),
        ]
    )
    commands = parse_commands(body)
    assert reading(commands) == NEW_ONLY
    assert commands.cut == (MAKE.RULE if rule else block[0])


def test_a_japanese_names_only_block_as_written_in_the_review() -> None:
    body = (
        "GAME g1\nKEY ann-key-123\nDICE 2\n\n" + "_" * 32 + "\n差出人: Snakes Referee\n"
        "送信日時: 2026年11月30日 9:00\n宛先: Ann Lee\n件名: [g1] Round 3\n\n"
        "GAME g1\nKEY ann-key-123\nDICE 4\n"
    )
    assert parse_commands(body).dice == (2,)


@pytest.mark.parametrize(
    "lines",
    [
        ["When: 30.11.2026", "Where: home", "Mood: keen"],  # a year, no time of day
        ["Back: 9:00", "Where: home", "Mood: keen"],  # a time, no year
        ["When: 30.11.2026 09:00", "Where: home"],  # two lines, no rule above them
    ],
)
def test_a_players_notes_without_an_address_below_orders_are_read(lines: list[str]) -> None:
    """The other side of the rule above: what lacks a timestamp, or is too short, is the
    player's own and the orders below it count."""
    body = "\n".join(["KEY ann-key-123", "DICE 2", "", *lines, "", "TRAPDOOR 30"])
    commands = parse_commands(body)
    assert (commands.dice, commands.nomination, commands.cut) == ((2,), 30, None)


def test_a_names_only_block_with_no_order_above_it_is_read_through() -> None:
    """With nothing above it to protect, a block without an address is not a header (the
    reply shows what was read); with an address and a rule it still is."""
    block = names_only_block(NAMES_ONLY_LABELS["ja"])
    body = "\n".join(["Hi", "", *block, "", "KEY ann-key-123", "DICE 4"])
    assert parse_commands(body).dice == (4,)


AWAY_NOTES = [
    "Hi ref,\nI'll be away:\nFrom: 1 Dec 2026\nUntil: 8 Dec 2026\nReach me: ann@example.org\n",
    "Hi ref, I'll be away\nFrom: 1 Dec 2026\nUntil: 8 Dec 2026\nPhone: ann@example.org or 0171\n",
    "Hi ref,\nI'll be away:\nFrom: 1 Dec 2026 9:00\nUntil: 8 Dec 2026 18:00\n"
    "Reach me: ann@example.org\n",
]


@pytest.mark.parametrize("note", AWAY_NOTES)
def test_a_players_own_label_lines_above_her_orders_are_read(note: str) -> None:
    """Finding 2 of the review: a note shaped like a header block, with an address and a
    date, written above the orders and no order above it, does not cut them off."""
    body = note + "\nGAME g1\nKEY ann-key-123\nABSENT UNTIL 2026-12-08\nDICE 4 2\n"
    commands = parse_commands(body)
    assert (commands.game, commands.order_keys, commands.dice, commands.cut) == (
        "g1",
        ("ann-key-123",),
        (4, 2),
        None,
    )
    assert any(action.word == "ABSENT" for action in commands.actions)


@pytest.mark.parametrize("note", AWAY_NOTES)
def test_the_same_lines_below_orders_or_below_a_rule_end_the_reading(note: str) -> None:
    """The other side: below an order line such a block is the top of a quoted message,
    and below a rule it is one even at the very top (a forward)."""
    _greeting, *block = note.splitlines()
    below = "GAME g1\nKEY ann-key-123\nDICE 2\n\n" + "\n".join(block)
    top_posted = parse_commands(below + "\n\nKEY ann-key-123\nDICE 4\nTRAPDOOR 12\n")
    assert (top_posted.dice, top_posted.nomination, top_posted.cut) == ((2,), None, block[0])
    forward = parse_commands(MAKE.RULE + "\n" + "\n".join(block) + "\n\nKEY k-1\nDICE 4\n")
    assert forward.dice is None and forward.cut == MAKE.RULE


def test_a_long_list_of_label_lines_is_not_a_header_block() -> None:
    labels = [f"Item {chr(65 + i)}: ann@example.org 30.11.2026 09:00" for i in range(12)]
    body = "\n".join(["KEY ann-key-123", *labels, "", "DICE 4"])
    assert parse_commands(body).dice == (4,)


HOSTILE_SHAPES = {
    "label_lines": "Abc def: ann@example.org 2026 9:00\n" * 5000,
    "label_and_text": "Abc: ann@example.org 2026\nhello there\n" * 2500,
    "from_lines": "From: ann@example.org\nSent: 9:00\n" * 2500,
    "attribution_soup": ("1 " * 150 + "ann@example.org 2026 9:00\n") * 5000,
    "colon_digits": ("1:" * 500 + "\n") * 5000,
    "at_signs": ("a@" * 500 + "\n") * 5000,
    "long_domains": ("a@" + "b" * 998 + "\n") * 5000,
    "bare_dashes_then_an_order": "--\n" * 4999 + "DICE 4\n",
    "rules": ("-" * 1000 + "\n") * 5000,
    "rule_and_label": "-----\nA: b@c.de 2026\n" * 2500,
    "wrapped_attributions": "2026 x\n9:00 y\nann@example.org z\n" * 1666,
    "pgp_headers": "-----BEGIN PGP SIGNED MESSAGE-----\n" + "Hash: x\n" * 4999,
    "pgp_armour": "-----BEGIN PGP SIGNATURE-----\n" + ("A" * 1000 + "\n") * 4999,
    "dice_comments": ("DICE 4 " + "( " * 400 + "\n") * 5000,
    "names_only_blocks": "DICE 4\n" + "Abc def: Ann Lee 30.11.2026 09:00\n" * 5000,
    "names_only_after_rules": "DICE 4\n" + "_____\nA: 2026 9:00\n" * 2500,
    "bracket_comments": ("DICE 4 " + "(a) 2 " * 30 + "\n") * 5000,
    "arabic_indic_dates": ("\u0660\u0669:\u0660\u0660 \u0662\u0660\u0662\u0666 " * 30 + "a@b.cd:\n")
    * 5000,
}


def test_reading_stays_linear_in_the_message() -> None:
    """Every shape above is at least 5,000 lines (up to 5 MB, 25 times what the intake
    passes: parse.MAX_TEXT_CHARS); each took under 1.5 s on the development machine,
    and the bare-dashes one 15 s before (a look-ahead from every "--" line). A
    quadratic reading of any of them takes minutes, so the 20 s margin cannot mistake
    one for the other."""
    worst = 0.0
    for name, text in HOSTILE_SHAPES.items():
        began = time.perf_counter()
        commands = parse_commands(text)
        worst = max(worst, time.perf_counter() - began)
        assert isinstance(commands, Commands), name
    assert worst < 20, worst


# -- through the intake -----------------------------------------------------------------


def corpus_files(code: str) -> list[Path]:
    return sorted(REPLIES.glob(f"{code}_*.eml"))


@pytest.mark.parametrize("code", CODES)
def test_the_corpus_through_the_intake(sqlite_intake, code: str) -> None:
    """Each of the language's four files, then its header block in memory with and
    without the rule of underscores: every message applies Ann's DICE 2 and nothing
    else; the old orders (hers, or cy's with his key) never count."""
    db, config = sqlite_intake
    row = BY_CODE[code]
    messages = [(path.name, path.read_bytes()) for path in corpus_files(code)]
    assert len(messages) == 4
    for rule in (False, True):
        body = MAKE.outlook_body(row, rule=rule)
        raw = (
            "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: RE: [g1] orders\r\n"
            f"Message-ID: <{code}.{rule}@example.org>\r\nMIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n"
            f"\r\n{body}"
        ).encode()
        messages.append((f"memory rule={rule}", raw))
    for count, (name, raw) in enumerate(messages, start=1):
        result = ingest(db, config, raw, T0, f"file:{name}")
        assert result.status == "processed", (name, result.detail)
        orders = [(o.player, o.dice, o.nomination, o.valid) for o in orders_of(db)]
        assert orders == [("ann", "2", None, True)] * count, name
    replies = replies_since(db, T0)
    assert [r.recipient for r in replies] == ["ann@example.org"] * len(messages)
    assert all(b"cy-key" not in r.message and b"ann-key" not in r.message for r in replies)


def test_a_players_heading_with_an_address_and_a_date_through_the_intake(sqlite_intake) -> None:
    """Both sides of the attribution rule, through the intake: the honest heading above
    the orders is read past; under new orders, the same line starts the old text."""
    db, config = sqlite_intake
    heading = "Sent from the office on 30.11.2026 at 9:00, ann@example.org:"
    for tag, body, expected in [
        ("honest", f"{heading}\r\nKEY ann-key-123\r\nDICE 4\r\nTRAPDOOR 30", ("4", 30)),
        (
            "top",
            f"KEY ann-key-123\r\nDICE 2\r\n\r\n{heading}\r\nDICE 4\r\nTRAPDOOR 12",
            ("2", None),
        ),
    ]:
        raw = (
            "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
            f"Message-ID: <{tag}@example.org>\r\n\r\n{body}\r\n"
        ).encode()
        assert ingest(db, config, raw, T0, tag).status == "processed"
        assert [(o.dice, o.nomination) for o in orders_of(db)][-1] == expected, tag


def test_the_reply_says_where_reading_stopped(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = (REPLIES / "ko_outlook.eml").read_bytes()
    assert ingest(db, config, raw, T0, "t").status == "processed"
    reply = replies_since(db, T0)[-1].message.decode()
    assert "Reading stopped at the line" in reply and "DICE 4" not in reply


# -- comments after the dice, and PGP clear-signed orders ---------------------------------


@pytest.mark.parametrize(
    ("line", "dice", "comment"),
    [
        ("DICE 4 2 (my lucky numbers)", (4, 2), "(my lucky numbers)"),
        ("DICE 4 2 - lucky", (4, 2), "- lucky"),
        ("DICE 4, 2 # comment", (4, 2), "# comment"),
        ("DIE 5 -- because 6 is too far", (5,), "-- because 6 is too far"),
        ("DICE 4 2 [a guess]", (4, 2), "[a guess]"),
        ("dice: 3 // my usual", (3,), "// my usual"),
    ],
)
def test_a_comment_after_the_dice_is_ignored_and_said(line: str, dice, comment: str) -> None:
    commands = parse_commands(f"KEY ann-key-123\n{line}")
    assert (commands.dice, commands.problems, commands.ignored) == (dice, (), (comment,))


@pytest.mark.parametrize(
    "line",
    [
        "DICE 4 - 2",  # no words: not a comment, an unreadable order
        "DICE 4 (2) 5 (x",  # a bracket left open
        "DICE 4 five",  # no comment mark
        "DICE 4 2 (lucky",  # an unclosed bracket
    ],
)
def test_what_is_not_a_comment_stays_an_unreadable_order(line: str) -> None:
    commands = parse_commands(f"KEY ann-key-123\n{line}")
    assert commands.dice == () and commands.problems


@pytest.mark.parametrize(
    ("line", "dice", "comments"),
    [
        ("DICE 4 (turn 1) 2 (turn 2)", (4, 2), ("(turn 1)", "(turn 2)")),
        ("DICE 4 (and) 2", (4, 2), ("(and)",)),
        ("DICE 4 [not 5] 2 # my usual", (4, 2), ("[not 5]", "# my usual")),
    ],
)
def test_comments_between_the_dice_leave_the_values_outside_them(
    line: str, dice: tuple[int, ...], comments: tuple[str, ...]
) -> None:
    """Finding 8 of the review: never DICE 4 with "2 (turn 2)" dropped unseen. The
    values outside the brackets are read, and every comment is said to be ignored."""
    commands = parse_commands(f"KEY ann-key-123\n{line}")
    assert (commands.dice, commands.problems, commands.ignored) == (dice, (), comments)


@pytest.mark.parametrize(
    ("line", "nomination", "none", "ignored"),
    [
        ("TRAPDOOR 37 (the snake)", 37, False, ("(the snake)",)),
        ("TRAPDOOR 37", 37, False, ()),
        ("TRAPDOOR NONE (let it fall)", None, True, ("(let it fall)",)),
    ],
)
def test_a_remark_after_the_trapdoor_is_said_to_be_ignored(
    line: str, nomination: int | None, none: bool, ignored: tuple[str, ...]
) -> None:
    commands = parse_commands(f"KEY ann-key-123\n{line}")
    assert (commands.nomination, commands.no_nomination, commands.ignored) == (
        nomination,
        none,
        ignored,
    )
    assert commands.problems == ()


def test_the_player_is_told_the_comment_was_ignored(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = (
        b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        b"Message-ID: <lucky@example.org>\r\n\r\nKEY ann-key-123\r\n"
        b"DICE 4 (my lucky number)\r\n"
    )
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert [(o.dice, o.valid) for o in orders_of(db)] == [("4", True)]
    reply = replies_since(db, T0)[-1].message.decode()
    assert "Ignored (not commands):" in reply and '"(my lucky number)"' in reply
    assert "Lines not obeyed" not in reply


SIGNED = (
    "-----BEGIN PGP SIGNED MESSAGE-----\r\n"
    "Hash: SHA256\r\n"
    "\r\n"
    "GAME g1\r\n"
    "KEY ann-key-123\r\n"
    "- DICE 4\r\n"
    "TRAPDOOR 30\r\n"
    "\r\n"
    "- -- \r\n"
    "Ann\r\n"
    "-----BEGIN PGP SIGNATURE-----\r\n"
    "\r\n"
    "iHUEARYIAB0WIQTB7dK1vqZl3eHcIUyHqR8dYzBq5AUCZ2x0QwAKCRCHqR8dYzBq\r\n"
    "5M4eAP9n0kO7cN9r7fQwE2nO3uZ5pD8y1b8k0Kk7lZ7C1Lh1rQEA1eP6cW3tI4yV\r\n"
    "q0p3n4wq8K1o5A2eZ6c0Zb3oX9pQ2wM=\r\n"
    "=Xb1D\r\n"
    "-----END PGP SIGNATURE-----\r\n"
)


def test_pgp_clear_signed_orders_are_read_and_the_armour_is_not_reported() -> None:
    commands = parse_commands(SIGNED)
    assert (commands.game, commands.dice, commands.nomination) == ("g1", (4,), 30)
    assert commands.problems == () and commands.ignored == ()
    lines, _dropped, _cut = read_lines(SIGNED)
    assert lines == ["GAME g1", "KEY ann-key-123", "DICE 4", "TRAPDOOR 30"]  # "-- " signs off
    # a quoted signed message stays quoted; an unsigned "- DICE 6" is never unescaped
    quoted = "KEY ann-key-123\nDICE 2\n" + "".join(f"> {x}\n" for x in SIGNED.split("\r\n"))
    assert parse_commands(quoted).dice == (2,)
    assert parse_commands("KEY ann-key-123\nDICE 2\n- DICE 6\n").dice == (2,)


def test_a_truncated_signature_does_not_hide_what_follows() -> None:
    unsigned_off = SIGNED.replace("- -- \r\nAnn\r\n", "")  # no "-- " line to end the reading
    text = unsigned_off.split("=Xb1D")[0] + "TRAPDOOR 44\r\n"
    commands = parse_commands(text)
    assert (commands.dice, commands.nomination) == ((4,), 44)


def test_pgp_clear_signed_orders_through_the_intake(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = (
        "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: [g1] orders\r\n"
        "Message-ID: <signed@example.org>\r\nUser-Agent: Mutt/2.2.12\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n" + SIGNED
    ).encode()
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert [(o.dice, o.nomination, o.valid) for o in orders_of(db)] == [("4", 30, True)]
    reply = replies_since(db, T0)[-1].message.decode()
    assert "Lines not obeyed" not in reply and "Ignored" not in reply and "PGP" not in reply


HTML_NAMES_ONLY = {
    "ja": ("差出人", "送信日時", "宛先", "件名", "2026年11月30日 9:00"),
    "zh": ("发件人", "发送时间", "收件人", "主题", "2026年11月30日 9:00"),
    "ko": ("보낸 사람", "보낸 날짜", "받는 사람", "제목", "2026년 11월 30일 오전 9:00"),
    "th": ("จาก", "ส่ง", "ถึง", "เรื่อง", "30 พฤศจิกายน 2569 9:00"),
}


@pytest.mark.parametrize("language", sorted(HTML_NAMES_ONLY))
def test_an_html_header_block_of_names_only_brings_no_old_orders_back(language: str) -> None:
    """The review's HTML variant: an OWA-style header block in <b>Label:</b> value<br> lines
    that shows names, no addresses. Each <br> ends a line (it does not make a blank one), so
    the labels stand as one block, and the old orders below it do not count."""
    from snl_pbem.mail.parse import parse_message

    sender, sent, to, subject, when = HTML_NAMES_ONLY[language]
    html = (
        "<html><body><div>GAME g1<br>KEY ann-key-123<br>DICE 2<br></div><hr>"
        f"<div><b>{sender}:</b> Snakes Referee<br><b>{sent}:</b> {when}<br>"
        f"<b>{to}:</b> Ann Lee<br><b>{subject}:</b> [g1] Round 3<br></div><br>"
        "<div>GAME g1<br>KEY ann-key-123<br>DICE 4<br></div></body></html>"
    )
    raw = (
        "From: ann@example.org\r\nTo: snl@example.org\r\nSubject: Re: [g1] Round 3\r\n"
        "Message-ID: <h@example.org>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n" + html
    ).encode()
    commands = parse_message(raw, "snl@example.org").commands
    assert commands is not None and commands.dice == (2,) and commands.cut is not None
