"""Auto-replies known by their subject: a second line of defence, for those that come
without the standard headers (``Auto-Submitted``, ``X-Autoreply``, ``Precedence``).

A subject alone is weak evidence, and a message taken for a robot is dropped without an
answer: so a subject counts only in the form robots write it, and a player's subject
that merely mentions being away is orders. An out-of-office reply puts its words before
the subject it answers (``Automatic reply: [g1] Round 3 report``,
``Abwesenheitsnotiz: Re: ...``, ``自动回复: ...``), after nothing but bracketed tags a
gateway may add (``[EXTERNAL]``). Never after a reply or forward prefix (``Re:``,
``AW:``, ``回复:``...): ``Re: Automatic reply: [g1] Round 3 report`` is a person
answering a robot. Two kinds of words:

- words that *say* the reply is automatic (``Automatic reply``, ``Autoreply``,
  ``Réponse automatique``, ``自動応答``, ``Автоответ``...): at the very start, followed
  by a colon, a dash or nothing; or in brackets (``[g1] orders (Auto-Reply)``,
  ``【自动回复】``);
- words that say only that someone is away, which a player may also start a subject
  with (``Out of office``, ``Away``, ``Absent``, ``Abwesenheitsnotiz``, ``Auto``,
  ``不在``...): only followed by a colon and then what a robot puts there, the subject
  of the mail it answers: a reply prefix or the ``[game]`` tag and title of ours
  (``Out of Office: [g1] Round 3 report``, ``Away: Re: [g1] ...``). Never alone nor
  before a player's own words: ``Out of office``, ``Absent: next two rounds``,
  ``Away: orders for round 3``, ``Auto: DICE 4 2`` are orders.

The lists are hints, not the rule: the rule is the standard headers, and a robot
that sends neither these words nor those headers is read as mail. Case is
ignored, and letters are compared without accents (``Respuesta automatica``).
"""

from __future__ import annotations

import re
import unicodedata


def _table(text: str) -> tuple[str, ...]:
    """Phrases written one language a line, separated by " / "."""
    return tuple(p.strip() for line in text.strip().splitlines() for p in line.split(" / "))


AUTOMATIC = _table(
    """
    automatic reply / automatic response / automated reply / automated response / auto reply
    auto-reply / autoreply / auto response / auto-response / autoresponse / autoresponder
    out of office autoreply
    automatische antwort / automatische abwesenheitsnotiz
    réponse automatique
    respuesta automática
    risposta automatica
    automatisch antwoord
    resposta automática
    automatiskt svar / automatisk svar / autosvar / automatisk besked
    automaattinen vastaus
    automatyczna odpowiedź / odpowiedź automatyczna
    automatická odpověď / automatická odpoveď
    automatikus válasz
    răspuns automat
    otomatik yan\u0131t / otomatik cevap
    αυτόματη απάντηση
    автоответ / автоматический ответ
    автовідповідь / автоматична відповідь
    自動応答 / 自動返信
    自动回复 / 自动答复
    自動回覆 / 自動回復 / 自動答覆
    자동 회신 / 자동회신 / 자동 응답 / 자동응답
    ตอบกลับอัตโนมัติ
    رد تلقائي
    מענה אוטומטי / תשובה אוטומטית
    trả lời tự động
    balasan otomatis / balasan automatik
    """
)
"""Words that say the reply is automatic, one language a line (English, German, French,
Spanish, Italian, Dutch, Portuguese, Swedish/Danish/Norwegian, Finnish, Polish, Czech and
Slovak, Hungarian, Romanian, Turkish, Greek, Russian, Ukrainian, Japanese, Chinese
simplified and traditional, Korean, Thai, Arabic, Hebrew, Vietnamese, Indonesian and Malay)."""
OUT_OF_OFFICE = _table(
    """
    out of office / out of the office
    abwesenheitsnotiz
    fuori sede / fuori ufficio
    fuera de la oficina / fuera de oficina
    poza biurem
    mimo kancelář
    вне офиса / нет на месте
    不在通知 / 外出中
    """
)
"""Words that say someone is away, as a notice."""
AWAY = _table(
    """
    away / absent / absence / auto
    abwesenheit / abwesend
    afwezig
    ausente / ausencia
    frånvaro / fravær
    poissa
    nieobecność
    nepřítomnost
    不在 / 外出
    부재중 / 부재 중
    """
)
"""Words that say someone is away, which a player may write too."""

_COLONS = ":\uff1a"  # and the full-width colon of Chinese and Japanese
_DASHES = "\\-\u2013\u2014"  # hyphen, en dash, em dash
_REPLY_PREFIX = re.compile(
    # reply and forward markers as mail clients write them, with an optional count
    r"(?:re|aw|antw|antwort|sv|vs|odp|rif|r|res|ref|fw|fwd|wg|tr|enc|rv|i|doorst|ynt|yn"
    r"|回复|回覆|答复|答覆|转发|轉寄|轉發|返信|转|ответ|отв|пер|σχετ|απ|השב|رد|tl|ang)"
    rf"\s*(?:\[\d+\]|\(\d+\))?\s*[{_COLONS}]",
    re.IGNORECASE,
)
_TAG = re.compile(r"[\[【「(][^\]】」)]{0,60}[\]】」)]")
_LETTER_AFTER = r"(?![^\W\d_])"
"""Not followed by more letters of a word (CJK phrases are followed by anything: a
phrase in a script without spaces is whole where it stands)."""


def _fold(text: str) -> str:
    """Lower case, accents off (NFKD without the combining marks, then composed again, so
    that Hangul stays syllables), spaces made single."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(unicodedata.normalize("NFC", plain).split())


def _is_cjk(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F") or "\u0e00" <= char <= "\u0e7f"


def _phrase_pattern(phrases: tuple[str, ...], tail: str) -> re.Pattern[str]:
    folded = sorted({_fold(p) for p in phrases}, key=len, reverse=True)
    parts = [re.escape(p) + ("" if _is_cjk(p[-1]) else _LETTER_AFTER) for p in folded]
    return re.compile(rf"(?:{'|'.join(parts)}){tail}")


_SEPARATOR = rf"\s*(?:[{_COLONS}{_DASHES}]|$)"
_AUTOMATIC_START = _phrase_pattern(AUTOMATIC, _SEPARATOR)
_AUTOMATIC_IN_BRACKETS = re.compile(
    rf"[\[【「(]\s*(?:{'|'.join(re.escape(_fold(p)) for p in AUTOMATIC)})\s*[\]】」)]"
)
_AWAY_START = _phrase_pattern((*OUT_OF_OFFICE, *AWAY), rf"\s*[{_COLONS}]\s*")
_OUR_SUBJECT = re.compile(r"\[[^\]\s]{1,60}\]\s*\S|snakes and ladders\s*:")
"""How every subject we send starts (``snl_pbem.app.replies.subject``)."""


def auto_reply_subject(subject: str) -> str | None:
    """The auto-reply words a subject starts with in a robot's form (see the module's
    docstring), folded (lower case, no accents), or None."""
    rest = _fold(subject[:300])
    for _tag in range(10):  # tags a gateway puts in front, and nothing else
        rest = rest.lstrip(" *")
        tag = _TAG.match(rest)
        if tag is None or _AUTOMATIC_IN_BRACKETS.match(rest):
            break
        rest = rest[tag.end() :]
    if _REPLY_PREFIX.match(rest):
        return None  # a person replying to (or forwarding) whatever follows
    found = _AUTOMATIC_START.match(rest) or _AUTOMATIC_IN_BRACKETS.search(rest)
    if found:
        return found.group(0).strip(" -\u2013\u2014" + _COLONS)
    found = _AWAY_START.match(rest)
    if found:
        answered = rest[found.end() :]
        if _REPLY_PREFIX.match(answered) or _OUR_SUBJECT.match(answered):
            return found.group(0).strip(" " + _COLONS)
    return None
