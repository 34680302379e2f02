"""Which lines of a message the player wrote now: the quote, attribution, signature and
PGP reader that comes before the order language (:mod:`snl_pbem.mail.commands`).

Quoted lines (``>``), everything after a ``-- `` signature line or a reply header in any
language (a header block, an attribution line, a separator: known by their shape, see
:func:`read_lines`) are not the player's, and only the first 50 non-blank lines are read.
Inline PGP clear-signed text is read without its armour. It runs in the sandbox worker
(mail/sandbox.py), on what a stranger wrote: every pass is linear in the text.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

MAX_COMMAND_LINES = 50
MAX_LINE_LENGTH = 200
COMMAND_WORDS = (
    "GAME",
    "KEY",
    "PASSWORD",
    "ROUND",
    "DICE",
    "DIE",
    "TRAPDOOR",
    "STATUS",
    "HELP",
    "CLEAR",
    "ROLL",
    # joining, leaving and the rest of a player's life cycle (snl_pbem/app/commands/)
    "LIST",
    "JOIN",
    "CONFIRM",
    "RESIGN",
    "ABSENT",
    "NEW",
    "ADDRESS",
    "HISTORY",
    "OBSERVE",
    "UNOBSERVE",
    "LANGUAGE",
    "LANG",
    # the referee's commands (snl_pbem/app/commands/referee.py)
    "EXTEND",
    "PAUSE",
    "RESUME",
    "CLOSE",
    "ROLLBACK",
    "REPLACE",
    "APPROVE",
    "REFUSE",
    "START",
)
"""The first words of the order language. A line that begins with one is the player's
command, never a reply header's line; the order language (mail/commands.py READERS) reads
exactly these, as a test checks."""

_INVISIBLE = re.compile(
    # format characters (Unicode category Cf): zero-width spaces and joiners, the soft
    # hyphen, direction marks, embeddings, overrides and isolates, the BOM, tags
    "[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
    "\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]"
)
_SPACES = re.compile(r"[\s\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_WROTE = (
    r"wrote|a écrit|a ecrit|schrieb|escribió|escribio|ha scritto|schreef|escreveu|skrev|"
    r"pisze|napisał\(a\)|napisał|kirjoitti|пишет|написал\(а\)|написал|yazdı|írta"  # noqa: RUF001 (Cyrillic and Turkish, as written)
)
_WROTE_WORD = re.compile(rf"\b(?:{_WROTE})(?=\W|$)", re.IGNORECASE)


def _is_reply_header(text: str) -> bool:
    """ "On Mon, 30 Nov 2026 at 09:00, Ann <ann@x> wrote:", "Am 30.11.2026 um 09:00 schrieb
    Ann <ann@x>:", "Le lun. 30 nov. 2026 à 09:00, Ann <ann@x> a écrit :", ... Linear in the
    line (no backtracking pattern): a "wrote" word near the end of a line that ends there
    or with a colon, which begins like a client's reply header or names an address."""
    if len(text) > 400 or not (text.endswith(":") or _WROTE_WORD.search(text[-20:])):
        return False
    found = list(_WROTE_WORD.finditer(text))
    if not found or len(text) - found[-1].end() > 120:
        return False
    return "@" in text or (_INTRO.match(text) is not None and any(c.isdigit() for c in text))


_INTRO = re.compile(r"^(on|le|am|el|il|op|em|den|dne|w dniu|в|el día|op \w+ \d)\b", re.IGNORECASE)
"""How a wrapped reply header's first line begins ("On Mon, ...", "Am 30.11.2026 ...")."""
_SEPARATORS = re.compile(
    r"^(?:[-=_*]{2,}\s*(?:original message|ursprüngliche nachricht|message d'origine|"
    r"mensaje original|messaggio originale|oorspronkelijk bericht|mensagem original|"
    r"originalmeddelande|original meddelelse|opprinnelig melding|alkuperäinen viesti|"
    r"oryginalna wiadomość|původní zpráva|исходное сообщение|eredeti üzenet|"
    r"forwarded message|weitergeleitete nachricht|message transféré|mensaje reenviado|"
    r"messaggio inoltrato|doorgestuurd bericht|mensagem encaminhada|"
    r"videresendt melding|vidarebefordrat meddelande)\s*[-=_*]{2,}|_{10,}|"
    r"begin forwarded message:|anfang der weitergeleiteten nachricht:|"
    r"début du message réexpédié\s?:|inicio del mensaje reenviado:)$",
    re.IGNORECASE,
)
_HEADER_FROM = re.compile(
    r"^\**\s*(from|von|de|da|van|fra|från|od|kimden|от|lähettäjä|feladó)\s*:\**\s*\S",
    re.IGNORECASE,
)
_HEADER_SENT = re.compile(
    r"^\**\s*(sent|date|gesendet|datum|envoyé|enviado|fecha|inviato|data|verzonden|"
    r"skickat|sendt|wysłano|odesláno|отправлено|gönderildi|lähetetty|elküldve|to|an|à|a|"
    r"aan|para|til|till|do|кому|subject|betreff|objet|asunto|oggetto|onderwerp|assunto)"
    r"\s*:",
    re.IGNORECASE,
)


_FULL_WIDTH = {point: point - 0xFEE0 for point in range(0xFF01, 0xFF5F)}
"""The full-width forms of ASCII (U+FF01-U+FF5E), which Chinese and Japanese input methods
type, mapped to ASCII (U+0021-U+007E) for str.translate. Only that block: other digits
(Thai, Arabic-Indic, Devanagari, superscripts, circled) stay as written, and the order
language answers that they are not written with the digits 0 to 9."""
_FULL_WIDTH_CHAR = re.compile("[\uff01-\uff5e]")


def without_full_width(text: str) -> str:
    """``text`` with its full-width forms of ASCII made ASCII (see _FULL_WIDTH); linear,
    and nothing to do (no copy) for a text that has none."""
    if text.isascii() or _FULL_WIDTH_CHAR.search(text) is None:
        return text
    return text.translate(_FULL_WIDTH)


def clean_line(line: str) -> str:
    """A line as a person meant it: invisible characters gone, odd spaces (the ideographic
    space U+3000 among them) made plain, full-width forms made ASCII (a Chinese input
    method's "DICE 4" in full-width letters and digits is DICE 4). Every line is read
    through here (the quote rules, the order language, what the reply echoes, our own
    mail recognised in a reply), so a key typed full-width is that key, and is redacted
    as one."""
    return _SPACES.sub(" ", without_full_width(_INVISIBLE.sub("", line))).strip()


def _quoted(line: str) -> bool:
    return line.startswith(">") or line.startswith("|")


_RULE_CHARS = "-_=*~\u2013\u2014\u2500\u2501 "
"""What a rule line is drawn with: hyphens, underscores, equals signs, box-drawing lines."""
_DIGIT = re.compile(r"\d")
_ADDRESS = re.compile(r"[^\s@<>()\[\]]@[^\s@<>()\[\].]+\.[^\s@<>()\[\]]")
"""An e-mail address somewhere in a text (ann@example.org, <ann@example.org>,
[mailto:ann@example.org]). Each try stops at the next ``@`` or space: linear in the text."""
_YEAR = re.compile(r"(?<![0-9])(?:19|20|25)[0-9]{2}(?![0-9])|[0-9]\s?[年년]")
"""A year (2026, the Thai 2569, 2026年 / 2026년), in digits made ASCII (see _plain): not
any four digits, so that a phone number or a postcode is not a date."""
_TIME = re.compile(r"(?<![0-9.])[0-9]{1,2}\s?[:\uff1a.]\s?[0-9]{2}(?![0-9.])")
"""A time of day: 9:00, 09:00, 9.00 (Finnish, Danish), not 30.11.2026."""
_SHORT_DATE = re.compile(r"(?<![0-9./-])[0-9]{1,2}([./-])[0-9]{1,2}\1[0-9]{2}(?![0-9]|[./-][0-9])")
"""A date with a two-digit year, as Thunderbird and others write it: 30/11/26, 11/30/26,
30.11.26 (both separators the same; not a version number 1.2.3.4 or an IP address)."""


def _plain(text: str) -> str:
    """A text's words without addresses (ann2026@example.org holds no date), its digits
    of any script made ASCII (٢٠٢٦ is 2026)."""
    plain = " ".join(word for word in text.split() if "@" not in word)
    return plain if plain.isascii() else plain.translate(_ascii_digits())


@functools.cache
def _ascii_digits() -> dict[int, int]:
    """A str.translate table from every decimal digit of Unicode to its ASCII digit (made
    once, when a message first needs it: 660 digits, about 0.2 s)."""
    return {
        code: ord("0") + unicodedata.decimal(chr(code))
        for code in range(sys.maxunicode + 1)
        if chr(code).isdecimal() and code > 0x7F
    }


MAX_LABEL_CHARS = 40
MAX_BLOCK_LABELS = 8
"""A run of more ``Label: value`` lines than this is the player's list, not a reply header
(Outlook's longest block is From, Sent, To, Cc, Subject, Importance, Attachments)."""
MAX_ATTRIBUTION_CHARS = 400


def _label_line(line: str) -> str | None:
    """The value of a ``Label: value`` line, or None when the line is not one.

    The label is one to four words of any script, without digits, brackets or ``@``,
    followed by ``:`` or the full-width colon (U+FF1A) and optionally set in bold (``*From:*``).
    A command word always wins (``DICE: 4 2``, ``KEY: abc-123``, ``GAME: g1`` are the
    player's orders, never a header line), and so does a URL."""
    head = line[: MAX_LABEL_CHARS + 8]
    found = [i for i in (head.find(":"), head.find("\uff1a")) if i > 0]
    if not found:
        return None
    colon = min(found)
    label = line[:colon].strip(" *_\t")
    words = label.split()
    if not 1 <= len(words) <= 4 or len(label) > MAX_LABEL_CHARS:
        return None
    if not any(ch.isalpha() for ch in label) or any(
        ch.isdigit() or ch in '@<>()[]{}/\\|=#"' for ch in label
    ):
        return None
    value = line[colon + 1 :].strip(" *_\t")
    if value.startswith("//") or _command_word(label):
        return None
    return value


def _command_word(line: str) -> bool:
    """Whether a line begins with one of the order language's words (DESIGN.md)."""
    match = _FIRST_WORD.match(line)
    return match is not None and match.group(0).upper() in COMMAND_WORDS


_FIRST_WORD = re.compile(r"[A-Za-z]+")


def _has_date(text: str) -> bool:
    """A year or a time of day in a header value."""
    plain = _plain(text)
    return _YEAR.search(plain) is not None or _TIME.search(plain) is not None


def _has_timestamp(text: str) -> bool:
    """A year (or a date with a two-digit year) and a time of day in one header value, as
    in every client's "Sent:" line ("2026年11月30日 9:00", "30.11.2026 09:00", "30/11/26
    09:00"); "Mood: 2026 is my year" has only one of the two."""
    plain = _plain(text)
    dated = _YEAR.search(plain) is not None or _SHORT_DATE.search(plain) is not None
    return dated and _TIME.search(plain) is not None


def _is_attribution(text: str) -> bool:
    """A Gmail-style attribution line by its shape alone, whatever its words: it names an
    address, holds a year (or a date with a two-digit year: 30/11/26) and a time of day,
    and ends with a colon ("2026年11月30日(月) 9:00 Ann Lee <ann@example.org>:",
    "2026년 11월 30일 (월) 오전 9:00, Ann <ann@example.org>님이 작성:"). Every client's
    attribution has all three; a line a player writes rarely does."""
    text = text.rstrip()
    if len(text) > MAX_ATTRIBUTION_CHARS or not text.endswith((":", "\uff1a")):
        return False
    if _ADDRESS.search(text) is None:
        return False
    return _has_timestamp(text)


def _rule(line: str) -> bool:
    """A separator line: a rule of underscores or dashes ("______", "----------"), or a
    rule with a title in any language ("-----Original Message-----", "-----原始邮件-----",
    "---------- Пересылаемое сообщение ----------")."""
    if len(line) >= 5 and not line.strip(_RULE_CHARS):
        return True
    title = line.strip("-=_* ")
    left = len(line) - len(line.lstrip("-=_*"))
    right = len(line) - len(line.rstrip("-=_*"))
    return left >= 2 and right >= 2 and 0 < len(title) <= 60


class _Scan:
    """The lines of a message with what each one is, worked out once (so that looking
    ahead from every line stays linear in the message)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.values = [_label_line(line) if line and not _quoted(line) else None for line in lines]
        self.commands = [bool(line) and _command_word(line) for line in lines]

    def next_text(self, index: int, within: int) -> int | None:
        """The first non-blank line after ``index``, at most ``within`` lines on."""
        for k in range(index + 1, min(index + 1 + within, len(self.lines))):
            if self.lines[k]:
                return k
        return None

    def block(
        self, start: int, after_separator: bool, orders_above: bool = False
    ) -> tuple[int, bool]:
        """``(size, hinted)``: how many lines the reply header block starting at ``start``
        takes (0: none), and whether it was known by Outlook's words rather than its shape.

        A block is known by its shape: a run of ``Label: value`` lines (a wrapped value may
        continue on a line of its own) that names an e-mail address and a date or time,
        three lines or more, or two right after a separator line. Once the player has
        written an order line above it (``orders_above``), the address is not needed: a
        value with a year and a time of day is enough, since Outlook may show the names
        alone ("差出人: Snakes Referee" / "送信日時: 2026年11月30日 9:00" / "宛先: Ann Lee").
        Most clients leave a blank line below it, and a run that goes straight on into an
        order line ("DICE: 4") is the player's own list, whatever it looks like, unless
        the player's orders already stand above it and one of its values has a year and
        a time of day: Foxmail puts the old message right below its block ("主题: ..." /
        "GAME g1"), and a second order block under such a run is the old message's.
        The known words of Outlook's "From:" and "Sent:" are a hint that lowers the bar:
        with them two lines are enough, without an address or date ("From: cy" / "Sent:
        Monday")."""
        lines, values = self.lines, self.values
        if values[start] is None or (start > 0 and values[start - 1] is not None):
            return 0, False  # a run is judged from its first line only
        labels: list[int] = []
        address = date = timestamp = False
        wrapped = 0
        k = start
        while k < len(lines) and len(labels) <= MAX_BLOCK_LABELS:
            value = values[k]
            if value is None:
                continuing = (
                    lines[k]
                    and wrapped < 2
                    and not _quoted(lines[k])
                    and not self.commands[k]
                    and k + 1 < len(lines)
                    and values[k + 1] is not None
                )
                if not continuing:
                    break
                wrapped += 1
                address = address or _ADDRESS.search(lines[k]) is not None
                k += 1
                continue
            labels.append(k)
            address = address or _ADDRESS.search(value) is not None
            date = date or _has_date(value)
            timestamp = timestamp or (orders_above and _has_timestamp(value))
            k += 1
        if len(labels) > MAX_BLOCK_LABELS or len(labels) < 2:
            return 0, False
        if k < len(lines) and self.commands[k] and not timestamp:
            return 0, False  # it runs straight into an order line: the player's own list
        hinted = _HEADER_FROM.match(lines[start]) is not None and (
            _HEADER_SENT.match(lines[labels[1]]) is not None
        )
        known = (address and date) or timestamp
        shaped = known and len(labels) >= (2 if after_separator else 3)
        if hinted:
            return k - start, True
        return (k - start if shaped else 0), False

    def attribution(self, index: int) -> int:
        """How many lines (one to three: clients wrap it) a Gmail-style attribution line by
        shape takes at ``index`` (0: none). Its first line has a digit (the date), no
        line of it is a command, and only its last line ends with a colon."""
        lines = self.lines
        line = lines[index]
        if self.commands[index] or len(line) > MAX_ATTRIBUTION_CHARS or not _DIGIT.search(line):
            return 0
        joined = line
        for extra in range(3):
            if extra:
                k = index + extra
                if joined.endswith((":", "\uff1a")):
                    break
                if k >= len(lines) or not lines[k] or _quoted(lines[k]) or self.commands[k]:
                    break
                joined = f"{joined} {lines[k]}"
            if len(joined) > MAX_ATTRIBUTION_CHARS:
                break
            if _is_attribution(joined):
                return extra + 1
        return 0


def _reply_header(scan: _Scan, index: int, top: bool, orders_above: bool) -> tuple[int, bool]:
    """``(size, by_shape_alone)``: how many lines the reply header starting at ``index``
    takes (0: none there), and whether it is known by its shape alone, with no rule line
    above it and none of a client's words: an attribution line, or a header block (see
    :func:`read_lines` for what follows from that). ``orders_above``: the player has
    written an order line above it, which lowers the bar for a block (see _Scan.block).

    In order: a separator whose words are known ("-----Original Message-----"); any rule
    line followed by a header block; a reply header line with a known "wrote" word,
    wrapped over up to three lines ("On Mon, 30 Nov 2026 at 09:00, Ann <" /
    "ann@example.org> wrote:"); a header block by its shape (not at the very top of a
    message, where nothing was written above it); an attribution line by its shape."""
    lines = scan.lines
    line = lines[index]
    # (a separator with words is short: the pattern is not tried on long lines)
    known_separator = len(line) <= 120 and _SEPARATORS.match(line) is not None
    if known_separator and not line.startswith("_"):
        return 1, False
    if known_separator or _rule(line):
        following = scan.next_text(index, 3)
        if following is not None:
            size, _hinted = scan.block(following, True, orders_above)
            if size:
                return following - index + size, False
            if line.startswith("_") and _HEADER_FROM.match(lines[following]):
                return 1, False
        return 0, False
    joined = line
    for extra in range(3 if _INTRO.match(line) else 1):
        if extra:
            if index + extra >= len(lines) or not lines[index + extra]:
                break
            joined = f"{joined} {lines[index + extra]}"
        if _is_reply_header(joined):
            return extra + 1, False
    if not top:
        size, hinted = scan.block(index, False, orders_above)
        if size:
            return size, not hinted
    if _HEADER_FROM.match(line):
        following_lines = [x for x in lines[index + 1 : index + 5] if x]
        below = index + 1
        while (
            below < min(len(lines), index + 1 + MAX_BLOCK_LABELS)
            and lines[below]
            and (_HEADER_SENT.match(lines[below]) or scan.values[below] is not None)
        ):
            below += 1
        if below < len(lines) and scan.commands[below]:
            return 0, False  # "From: ..." / "Date: ..." straight above "DICE: 4": not a header
        if following_lines and _HEADER_SENT.match(following_lines[0]):
            size = 1
            for x in lines[index + 1 : index + 8]:
                if x and not (_HEADER_SENT.match(x) or _HEADER_FROM.match(x)):
                    break
                size += 1
            return size, False
    size = scan.attribution(index)
    return size, size > 0


MAX_SCANNED_LINES = 5000
"""Lines looked at for the player's own (quoted ones included); the rest is not read."""
_ORDER_LINE = re.compile(r"^(game|key|dice|die|trapdoor|round|roll)\b", re.IGNORECASE)
_PGP_BEGIN_SIGNED = "-----BEGIN PGP SIGNED MESSAGE-----"
_PGP_ARMOUR = {
    "-----BEGIN PGP SIGNATURE-----": "-----END PGP SIGNATURE-----",
    "-----BEGIN PGP PUBLIC KEY BLOCK-----": "-----END PGP PUBLIC KEY BLOCK-----",
}
_PGP_HEADER = re.compile(r"^(?:hash|charset|version|comment|messageid)\s*:", re.IGNORECASE)
_BASE64ISH = re.compile(r"^=?[A-Za-z0-9+/=]+$")


def _unarmoured(raw_lines: list[str]) -> list[str]:
    """The lines of an inline PGP clear-signed message as the player wrote them (RFC 4880,
    7): the armour lines, its ``Hash:`` header and the signature block go, and the
    signed text's dash-escaped lines ("- DICE 4", "- -- ") lose their escape. A signature
    block ends at its END line, or at the first line that is not armour (a truncated
    signature never hides what follows it). Quoted armour is left to the quote rules."""
    if not any("BEGIN PGP" in raw for raw in raw_lines):
        return raw_lines
    out: list[str] = []
    state = ""  # "", "headers" (after BEGIN SIGNED), "signed", or the END line awaited
    for raw in raw_lines:
        line = clean_line(raw[:1000])
        if state in ("headers", "signed") and line in _PGP_ARMOUR:
            state = _PGP_ARMOUR[line]
            continue
        if state == "headers":
            if _PGP_HEADER.match(line):
                continue
            state = "signed"
            if not line:
                continue  # the blank line that ends the armour headers
        if state.startswith("-----END"):
            if line == state:
                state = ""
                continue
            if not line or _BASE64ISH.match(line) or _PGP_HEADER.match(line):
                continue
            state = ""
        if state == "signed" and raw.startswith("- "):
            raw = raw[2:]
        if not state and line == _PGP_BEGIN_SIGNED:
            state = "headers"
            continue
        if not state and line in _PGP_ARMOUR:
            state = _PGP_ARMOUR[line]
            continue
        out.append(raw)
    return out


def command_lines(text: str) -> tuple[list[str], int]:
    """The lines the player wrote now, to read as commands, and how many non-blank lines
    were left unread (past MAX_COMMAND_LINES). See :func:`read_lines`."""
    kept, dropped, _cut = read_lines(text)
    return kept, dropped


def read_lines(text: str) -> tuple[list[str], int, str | None]:
    """``(lines, dropped, cut)``: the lines the player wrote now, how many non-blank lines
    past MAX_COMMAND_LINES were not read, and the line where reading stopped because what
    followed it is quoted text (None when nothing below was left unread).

    Quoted text never counts: ``>`` lines are skipped wherever they stand (so a reply
    written below the quote, or between quoted lines, is read), a reply header followed
    by ``>`` lines is skipped with them, and a reply header or separator followed by
    text that is not marked as quoted (Outlook, "-----Ursprüngliche Nachricht-----",
    forwarded mail) ends the reading: everything below it is the old message. The
    signature line ``-- `` ends it too (a bare ``--`` only when no order line follows).

    Reply headers are known by their shape, in any language; the known words of some
    languages are hints that lower the bar, never the rule (see :func:`_reply_header`):

    - A header block (``差出人:`` / ``送信日時:`` / ``宛先:`` / ``件名:``, ``보낸 사람:`` ...)
      is three or more ``Label: value`` lines, none a command, naming an address and a
      date (two lines are enough right below a rule line). Once the player has written an
      order line above it, the address is not needed: a value with a year and a time of
      day will do, for Outlook may show the names alone ("差出人: Snakes Referee"); such
      a block may then run straight into the old message's orders, as Foxmail's does.
    - Below a rule line (``______``, ``-----Original Message-----``) such a block ends
      the reading whenever text follows it unmarked: a player does not draw one above
      her own lines. With no rule above it, a block known by its shape alone is treated
      like an attribution line (below): it ends the reading only when an order line is
      already above it. A player may write such lines herself above her orders ("I'll
      be away:" / "From: 1 Dec 2026" / "Until: 8 Dec 2026" / "Reach me: ann@example.org")
      and those orders are read. A block with Outlook's own "From:" and "Sent:" words
      ends the reading with or without a rule (the words are the hint).
    - An attribution line by shape alone (an address, a year and a time, a colon at the
      end) followed by unmarked text ends the reading only when the player has already
      written an order line above it. That is the top-posted reply ("DICE 2", then the
      attribution, then the old "DICE 4"): nothing below may replace the new orders. A
      player may also write such a line above their own orders ("Sent from the office on
      30.11.2026 at 9:00, ann@example.org:"); with no order above it, what follows it is
      read, because losing an honest player's orders is worse than reading an old copy of
      them, which the reply shows in full. A quote (``>``) after it is skipped as usual.

    Each line's kind is worked out once (_Scan) and a header is looked for from a line
    only over the few lines a header may take, so the reading stays linear in the text.
    """
    raw_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    raw_lines = _unarmoured(raw_lines[:MAX_SCANNED_LINES])
    lines = [clean_line(raw[:1000]) for raw in raw_lines]
    scan = _Scan(lines)
    # is there an order line, not quoted, below each line? (for a bare "--"), worked out once
    order_below = [False] * (len(lines) + 1)
    for k in range(len(lines) - 1, -1, -1):
        line = lines[k]
        order_below[k] = order_below[k + 1] or bool(
            line and not _quoted(line) and _ORDER_LINE.match(line)
        )
    kept: list[str] = []
    dropped = 0
    orders_above = seen = False  # an order line kept; any line (quoted or not) above
    index = 0
    while index < len(lines):
        raw, line = raw_lines[index], lines[index]
        if raw.rstrip("\n") == "-- " or (raw.rstrip("\n") == "--" and not order_below[index + 1]):
            break  # RFC 3676 signature separator (a bare "--" divider above orders is not one)
        if not line or _quoted(line):
            seen = seen or bool(line)
            index += 1
            continue
        header_size, by_shape_alone = _reply_header(scan, index, not seen, orders_above)
        seen = True
        if header_size:
            after = index + header_size
            while after < len(lines) and not lines[after]:
                after += 1
            if after < len(lines) and _quoted(lines[after]):
                index = after  # a marked quote: skip it and read on below it
                continue
            if not by_shape_alone or orders_above:
                # an unmarked quote: the rest is the old message
                return kept, dropped, line[:MAX_LINE_LENGTH] if after < len(lines) else None
        if len(kept) >= MAX_COMMAND_LINES:
            dropped += 1
        else:
            kept.append(line[:MAX_LINE_LENGTH])
            orders_above = orders_above or _ORDER_LINE.match(line) is not None
        index += 1
    return kept, dropped, None
