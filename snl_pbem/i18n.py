"""The players' languages: English, Simplified Chinese and Thai (issue 25).

Every mail a player gets is written in their language: the game's ``language`` (config),
or their own (``language`` in their config entry, ``LANGUAGE`` by mail, ``JOIN ...
LANGUAGE``); a stranger's HELP and LIST in the language their message was written in,
where that is clear (:func:`written_in`). The referee's mail and the command line stay
English.

The words come from gettext catalogs, one per language, at
``snl_pbem/locale/<locale>/LC_MESSAGES/snl_pbem.po``: Babel extracts the message ids from
the templates (Jinja2's i18n extension) and from the code (``tr`` and ``ntr`` in
``snl_pbem.rules.words``), and compiles each catalog when it is first used. Adding a
language is one catalog file and one line in :data:`LANGUAGES`.

While a mail is rendered (:func:`speaking`), ``str()`` of a ``Text`` or a :class:`When`
gives it in the mail's language; their ``str`` value is English everywhere else (logs, the
referee's mail, tests).

The command words are the protocol and stay English in every language: a translated HELP
shows them exactly as they must be written.
"""

from __future__ import annotations

import gettext
import io
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from snl_pbem.rules.words import Translator, reset_translator, set_translator
from snl_pbem.timeutil import show

if TYPE_CHECKING:  # (PyThaiNLP is imported when a Thai line is first wrapped)
    from pythainlp.util import Trie


@dataclass(frozen=True)
class Language:
    code: str
    """As players and the config write it, and as ``Content-Language`` says it (BCP 47)."""
    locale: str
    """Babel's and the catalog folder's name."""
    name: str
    """The language's own name for itself."""
    date_pattern: str
    """A time (a deadline) in this language: a CLDR pattern (the seconds are added when
    the time has any, and the zone's abbreviation after it, as in English)."""
    aliases: tuple[str, ...] = ()
    """Other ways a player may write it (case-blind)."""


ENGLISH = Language("en", "en", "English", "", ("english", "eng", "en-gb", "en-us"))
LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        ENGLISH,
        Language(
            "zh-Hans",
            "zh_Hans",
            "简体中文",
            "y年M月d日 EEE HH:mm",
            (
                "zh",
                "zh-cn",
                "zh-sg",
                "zh_cn",
                "zh_hans",
                "cn",
                "chinese",
                "中文",
                "简体中文",
                "汉语",
            ),
        ),
        Language("th", "th", "ไทย", "EEE d MMM y HH:mm", ("th-th", "thai", "ไทย", "ภาษาไทย")),
    )
}
"""Every language the players may choose, by code; English first."""
DEFAULT = ENGLISH.code


def language(text: str | None) -> str | None:
    """The code of the language ``text`` names (``zh``, ``Chinese``, ``ไทย``...), or None."""
    if not text:
        return None
    wanted = text.strip().casefold()
    for lang in LANGUAGES.values():
        if wanted == lang.code.casefold() or wanted in lang.aliases:
            return lang.code
    return None


def codes_text() -> str:
    """The codes a player may write, for a message naming them: "en, zh-Hans, th"."""
    return ", ".join(LANGUAGES)


@cache
def catalog(code: str) -> Translator | None:
    """The compiled catalog of ``code`` (None for English, whose words are the ids)."""
    lang = LANGUAGES.get(code, ENGLISH)
    if lang is ENGLISH:
        return None
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    source = resources.files("snl_pbem") / "locale" / lang.locale / "LC_MESSAGES" / "snl_pbem.po"
    with source.open("rb") as po:
        messages = read_po(po, locale=lang.locale, domain="snl_pbem")
    compiled = io.BytesIO()
    write_mo(compiled, messages, use_fuzzy=False)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


@contextmanager
def speaking(code: str | None) -> Iterator[str]:
    """Write in ``code`` (None or unknown: English) until the block ends: ``Text`` and
    :class:`When` show themselves in it. Yields the code used."""
    lang = LANGUAGES.get(code or DEFAULT, ENGLISH)
    token = set_translator(catalog(lang.code))
    code_token = _CURRENT.set(lang.code)
    try:
        yield lang.code
    finally:
        _CURRENT.reset(code_token)
        reset_translator(token)


_CURRENT: ContextVar[str] = ContextVar("snl_pbem_language", default=DEFAULT)


def current() -> str:
    """The language being written now (English outside :func:`speaking`)."""
    return _CURRENT.get()


class When(str):
    """A time for people in a game's zone: its ``str`` value is the English
    (``timeutil.show``: ``Sat 5 Dec 2026 18:00 GMT``); written into a mail in another
    language, it is that language's (Babel's ``format_datetime``: ``2026年12月5日 周六
    18:00 GMT``, ``ส. 5 ธ.ค. 2026 18:00 GMT``)."""

    __slots__ = ("moment", "zone")
    moment: datetime
    zone: ZoneInfo

    def __new__(cls, moment: datetime, zone: ZoneInfo) -> When:
        self = super().__new__(cls, show(moment, zone))
        self.moment, self.zone = moment, zone
        return self

    def __str__(self) -> str:
        return local_time(self.moment, self.zone, current())

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __reduce__(self) -> tuple[object, ...]:
        return (When, (self.moment, self.zone))


def local_time(moment: datetime, zone: ZoneInfo, code: str) -> str:
    """``moment`` in ``zone``, as the language ``code`` writes a time."""
    lang = LANGUAGES.get(code, ENGLISH)
    if lang is ENGLISH:
        return show(moment, zone)
    from babel.dates import format_datetime

    local = moment.astimezone(zone)
    pattern = lang.date_pattern + (":ss" if local.second else "")
    text = format_datetime(local, pattern, tzinfo=zone, locale=lang.locale)
    return f"{text} {local.tzname()}"


# -- which language a stranger wrote in --------------------------------------------------


def written_in(text: str) -> str | None:
    """The language ``text`` is clearly written in, by its letters: Thai script is Thai,
    Han characters (with no Japanese kana) are Chinese; None when it is not clear (a
    reply then goes out in English)."""
    thai = han = kana = 0
    for ch in text:
        if "\u0e00" <= ch <= "\u0e7f":
            thai += 1
        elif "\u3040" <= ch <= "\u30ff":
            kana += 1
        elif "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf":
            han += 1
    if thai >= 2 and thai > han:
        return "th"
    if han >= 2 and not kana:
        return "zh-Hans"
    return None


# -- the width of a line, and wrapping it ------------------------------------------------


def width(text: str) -> int:
    """The columns ``text`` takes in a fixed-width font: a Chinese character two, a Thai
    vowel or tone mark above or below its letter none."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


def wrap(text: str, columns: int, code: str) -> list[str]:
    """``text`` (one paragraph) in lines of at most ``columns`` columns, broken only where
    the language allows: between words (Thai words found by PyThaiNLP's dictionary, since
    Thai puts no spaces between them), or between any two Chinese characters (but never
    before a closing mark such as "，" or "。")."""
    if code == "th":
        pieces = _thai_words(text)
    elif code == "zh-Hans":
        pieces = _cjk_pieces(text)
    else:
        pieces = _spaced(text)
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and width(line + piece.rstrip()) > columns:
            lines.append(line.rstrip())
            line = piece.lstrip()
        else:
            line += piece
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def _spaced(text: str) -> list[str]:
    """Words with the spaces after them (and any spaces the text starts with, apart)."""
    return re.findall(r"\S+ *| +", text)


_NO_BREAK_BEFORE = set("，。、；：？！）》」』】〕,.;:?!)")
_NO_BREAK_AFTER = set("（《「『【〔(")


def _cjk_pieces(text: str) -> list[str]:
    """Pieces a Chinese line may break between: a break falls between two Chinese
    characters (never before a closing mark such as "，" or "。", nor after an opening one
    such as "（"), or after a space; digits and Latin letters written against a Chinese
    character stay with it ("12月24日" is never cut)."""
    out: list[str] = []
    piece = ""
    for ch in text:
        before = piece[-1:] if piece else ""
        if before and (
            (before == " " and ch != " ")
            or (
                _wide(before)
                and _wide(ch)
                and ch not in _NO_BREAK_BEFORE
                and before not in _NO_BREAK_AFTER
            )
        ):
            out.append(piece)
            piece = ""
        piece += ch
    if piece:
        out.append(piece)
    return out


def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


_THAI_PHRASES = frozenset(
    ("ตาละแต้ม", "ไม่นาน", "ตามด้วย", "ชุดหกตา", "ประตูกล", "รหัสผ่าน", "กำหนดส่ง", "เชิงบันได")
)
"""The glossary's terms and set phrases a line must not cut (docs/glossary.md): words to
PyThaiNLP's dictionary, so that "ตา|ละแต้ม" stays one piece."""


@cache
def _thai_dictionary() -> Trie:
    from pythainlp.corpus.common import thai_words
    from pythainlp.util import dict_trie

    return dict_trie(set(thai_words()) | _THAI_PHRASES)


def _thai_words(text: str) -> list[str]:
    from pythainlp.tokenize import word_tokenize

    out: list[str] = []
    for token in word_tokenize(
        text, custom_dict=_thai_dictionary(), engine="newmm", keep_whitespace=True
    ):
        glued = out and (
            token.isspace()
            or token[0] in _NO_BREAK_BEFORE  # ")" stays with the word it closes
            or (out[-1][-1] in _NO_BREAK_AFTER)  # "(" with the word it opens
        )
        if glued:
            out[-1] += token
        else:
            out.append(token)
    return out
