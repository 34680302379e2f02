"""Reading an email, whatever arrives: headers that never raise, the text a person wrote.

``parse_message`` never raises on bad input. It reads with the lenient
``compat32`` parser, caps every header and the MIME tree, decodes any text
charset (unknown ones fall back to UTF-8, then Windows-1252; codecs that are
not plain text encodings, such as punycode, are never run), joins the soft
line breaks of ``format=flowed`` text (:mod:`snl_pbem.mail.flowed`), turns HTML
into text in time linear in its size, leaving out quoted parts found by tag,
class or id (:mod:`snl_pbem.mail.htmltext`; also when the text/plain
alternative beside it is blank), never reads an attachment or a forwarded
message, and says when a message was written by a robot (auto-replies, by
their headers or subject, bounces, lists), which must never be answered
(RFC 3834) nor obeyed.

Everything it returns is safe to store: no NUL, no control characters, no
lone surrogates. The server runs it in a worker process with a hard time
and memory limit (:mod:`snl_pbem.mail.sandbox`); it is pure and may also be
called directly.
"""

from __future__ import annotations

import base64
import bisect
import codecs
import email
import email.parser
import functools
import hashlib
import html
import io
import quopri
import re
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from email.generator import BytesGenerator
from email.header import decode_header, make_header
from email.message import Message
from email.policy import Compat32
from email.utils import collapse_rfc2231_value, getaddresses
from typing import Any, TypeVar, cast

from snl_pbem.i18n import LANGUAGES, catalog
from snl_pbem.mail.addrspec import ATOM, PLAIN_ADDRESS
from snl_pbem.mail.autoreply import auto_reply_subject
from snl_pbem.mail.commands import Commands, read_commands
from snl_pbem.mail.dsn import RETURNED_HEADERS, STATUS_PARTS, DeliveryReport, parse_dsn
from snl_pbem.mail.flowed import unflow
from snl_pbem.mail.htmlkeys import CONTROL as _CONTROL
from snl_pbem.mail.htmlkeys import DASHES, replace_key, text_noise
from snl_pbem.mail.htmlkeys import MARKUP as _MARKUP
from snl_pbem.mail.htmltext import html_text
from snl_pbem.mail.ours import without_ours
from snl_pbem.mail.quotes import _INVISIBLE, read_lines, without_full_width
from snl_pbem.rules.words import tr

MAX_HEADER_CHARS = 2000
MAX_PARTS = 200
MAX_DEPTH = 10
MAX_TEXT_CHARS = 200_000
MAX_PART_BYTES = 2 * 1024 * 1024
"""A text part's decoded payload is cut here before any charset decoding."""
MAX_HTML_CHARS = 1_000_000

_FOLD = re.compile(r"[\r\n\t]+")

# Codecs that are not plain text encodings, or are slow on hostile input (punycode
# and idna are quadratic): a part that names one is read as UTF-8/Windows-1252.
_REFUSED_CODECS = frozenset(
    {"punycode", "idna", "unicode_escape", "raw_unicode_escape", "undefined", "mbcs", "oem"}
)


class ParseTimeout(Exception):
    """Reading one message took longer than its time limit (raised by the sandbox)."""


@dataclass(frozen=True)
class ParsedMail:
    message_id: str | None
    sender: str | None
    """The From address, lower-cased; None when there is no single usable one."""
    subject: str
    in_reply_to: str | None
    references: tuple[str, ...]
    automated: str | None
    """Why this mail was sent by a robot (never answer it), or None."""
    authentication_results: tuple[str, ...]
    text: str
    """The text to read commands from."""
    note: str | None = None
    """How the text was found, when that is worth telling (HTML only, no text part)."""
    sender_doubt: str | None = None
    """Why the From header does not plainly show one address (a display name holding
    another address, several addresses, no domain): such mail counts as coming from
    another address than the player's."""
    report: bool = False
    """A delivery report (DSN, multipart/report)."""
    delivery_report: DeliveryReport | None = None
    """What a bounce says (robots' mail only; read here, in the sandbox, like the rest)."""
    commands: Commands | None = None
    """The order language read from ``text`` and the subject (here, in the sandbox: its
    patterns run on what a stranger wrote), with mail/commands.py READERS; the keys it
    reads drive redaction."""
    lines: tuple[str, ...] = ()
    """The lines of ``text`` the player wrote now (:func:`snl_pbem.mail.quotes.read_lines`:
    at most 50, quotes and signature gone), for the app to read again with its command
    registry (snl_pbem/app/commands/); empty for a robot's mail."""
    dropped: int = 0
    """Non-blank lines past the 50 in ``lines`` (not read)."""
    cut: str | None = None
    """The line where reading stopped because quoted text follows it."""
    quoted_keys: tuple[str, ...] = ()
    """Order keys the message shows anywhere, quotes and returned copies included (a bounced
    welcome returns its key): redacted from what is kept, never used."""
    redacted: bytes | None = None
    """The message as it may be kept: every key it shows (``quoted_keys`` and the KEY
    lines read) replaced by ``****`` in every form, and the bodies of parts never read
    dropped (``redact_secrets``); None when reading was too slow to make it. Made here, in
    the same bounded pass as the rest, so keeping a message costs no second trip to the
    sandbox."""


def clean_text(value: str, limit: int | None = None) -> str:
    """Text the database can hold: no NUL or control characters, no lone surrogates."""
    value = _CONTROL.sub("", value)
    value = value.encode("utf-8", "replace").decode("utf-8")
    return value[:limit] if limit is not None else value


def header(msg: Message | _Head, name: str) -> str:
    """A header's decoded, cleaned text ("" when absent or undecodable); never raises."""
    try:
        value = msg.get(name)
    except Exception:
        return ""
    if value is None:
        return ""
    try:
        text = str(value)[:MAX_HEADER_CHARS]
    except Exception:
        return ""
    if "=?" in text:  # (without an encoded word, decoding gives the text as it is)
        with suppress(Exception):  # undecodable encoded-words: keep the raw text
            text = str(make_header(decode_header(text)))
    return clean_text(_FOLD.sub(" ", text).strip(), MAX_HEADER_CHARS)


def _decoded_words(text: str) -> str:
    """A header's text with its encoded words decoded (RFC 2047), cleaned. Text without
    "=?" holds no encoded word, and ``decode_header`` gives it back as it is: not decoded
    (a message's every header is read for keys, ``keys_quoted_in``)."""
    if "=?" in text:
        with suppress(Exception):
            text = str(make_header(decode_header(text)))
    return clean_text(text, MAX_HEADER_CHARS)


def header_names(msg: Message) -> list[str]:
    try:
        return [str(k).lower() for k in msg.keys()[:500]]
    except Exception:
        return []


_ADDRESS_IN_NAME = re.compile(r"[^\s<>\"']+@[^\s<>\"']+")


def sender_address(msg: Message | _Head) -> tuple[str | None, str | None]:
    """``(address, doubt)``: the From address lower-cased, or None, and why it is doubtful."""
    try:  # addresses are read before encoded words are decoded: an encoded display name
        # may hold a comma ("=?utf-8?q?M=C3=BCller=2C_Ann?=" is "Müller, Ann")
        raw = clean_text(_FOLD.sub(" ", str(msg.get("From") or ""))[:MAX_HEADER_CHARS])
        pairs = _usual_from(raw)
        if pairs is None:
            pairs = [(_decoded_words(n), a) for n, a in getaddresses([raw]) if a or n]
    except Exception:
        return None, tr("unreadable From header")
    if not pairs:
        return None, tr("no From address")
    if len(pairs) > 1:
        return None, tr("more than one From address")
    name, address = pairs[0]
    address = address.strip().strip("<>")
    if address.count("@") != 1 or " " in address or len(address) > 254:
        return None, tr("From address without a domain ({address})", address=repr(address[:60]))
    local, domain = address.split("@")
    if not local or "." not in domain:
        return None, tr("From address without a domain ({address})", address=repr(address[:60]))
    address = f"{local}@{domain}".lower()
    for shown in _ADDRESS_IN_NAME.findall(name):
        if shown.strip(".,;:()[]").lower() != address:
            return address, tr(
                "the From name shows {shown}, but the address is {address}",
                shown=repr(shown[:60]),
                address=address,
            )
    return address, None


_USUAL_FROM = re.compile(
    rf"(?:(?P<name>{ATOM}(?: {ATOM})*) <|(?P<angle><))?"
    rf"(?P<address>{PLAIN_ADDRESS})"
    r"(?(name)>|(?(angle)>))"
)
"""The From a client usually writes, ASCII words only: ``Ann Example <ann@example.org>``,
``<ann@example.org>`` or ``ann@example.org``. No quote, comment, comma, second space or
other character the standard library reads apart in the name (nor a dot, to be safe)."""


def _usual_from(value: str) -> list[tuple[str, str]] | None:
    """``[(name, address)]`` as ``getaddresses`` reads a usual From (``_USUAL_FROM``), in a
    seventh of its time (1.2 us against 8.4; every From is read twice: as its message is
    stored and as it is read); None for any other, read the standard library's way."""
    found = _USUAL_FROM.fullmatch(value)
    if found is None:
        return None
    return [(_decoded_words(found["name"] or ""), found["address"])]


def automated_reason(msg: Message, sender: str | None, game_address: str) -> str | None:
    """Why a message must not be answered or obeyed (RFC 3834 and common practice)."""
    names = header_names(msg)
    auto = header(msg, "Auto-Submitted").lower()
    if auto and not auto.startswith("no"):
        return f"Auto-Submitted: {auto[:40]}"
    if header(msg, "Return-Path").replace(" ", "") == "<>":
        return "null return path (a bounce)"
    precedence = header(msg, "Precedence").lower().replace("-", "_")
    if precedence in ("bulk", "junk", "list", "auto_reply"):
        return f"Precedence: {precedence}"
    lists = [n for n in names if n.startswith("list-")]
    if lists:
        return f"mailing-list mail ({lists[0]})"
    # robots that send none of the standard headers: any value of these counts (some send
    # "X-Autoreply: yes", some "X-Autorespond: <the rule's name>"). Never the Exchange
    # X-Auto-Response-Suppress, which is on ordinary mail (it asks robots not to answer it)
    marker = next((n for n in names if n in _AUTO_REPLY_HEADERS), None)
    if marker is not None:
        return f"auto-reply header ({marker})"
    if header(msg, "X-Autogenerated").lower() == "reply":
        return "auto-reply header (x-autogenerated)"
    if _is_report(msg):
        return "delivery report (bounce)"
    if sender is not None:
        local = sender.split("@")[0].lower()
        if local in ("mailer-daemon", "postmaster", "noreply", "no-reply"):
            return f"sent by {local}"
        if sender == game_address.lower():
            return "sent from the game address itself"
    subject = header(msg, "Subject")
    if auto_reply_subject(subject):  # the last line of defence: see snl_pbem.mail.autoreply
        return f"auto-reply subject ({subject[:60]})"
    return None


_AUTO_REPLY_HEADERS = ("x-autoreply", "x-autorespond", "x-autoresponder")


def _is_report(msg: Message) -> bool:
    try:
        return msg.get_content_type() == "multipart/report"
    except Exception:
        return False


def decode_part(part: Message) -> str:
    """A text part's payload as str, whatever its transfer encoding and charset."""
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        payload = None
    if not isinstance(payload, bytes):
        raw = part.get_payload()
        return clean_text(raw[:MAX_PART_BYTES]) if isinstance(raw, str) else ""
    payload = payload[:MAX_PART_BYTES]
    for charset in (_charset(part), "utf-8"):
        if charset is None:
            continue
        try:
            return clean_text(payload.decode(charset))
        except (UnicodeDecodeError, LookupError):
            continue
    return clean_text(payload.decode("cp1252", errors="replace"))


_T = TypeVar("_T")
_BY_HEADERS: dict[bytes, Any] = {}
"""What ``_by_headers`` worked out, by a hash of the header values it depends on."""
_BY_HEADERS_KEPT = 1024


def _by_headers(part: Message, names: tuple[str, ...], work: Callable[[Message], _T]) -> _T:
    """``work(part)``, which depends only on the first value of each header of ``names``
    (the standard library parses a part's parameters again at every call, 6 us each, and
    a message's reading asks for them nine times: issue 23). Remembered by a hash of
    those values (never the values: a parameter may hold a key); a value that is not a
    plain string is worked out each time, and so is a call that raises."""
    values = [part.get(name) for name in names]
    if not all(value is None or isinstance(value, str) for value in values):
        return work(part)
    key = hashlib.blake2b(
        repr((work.__qualname__, values)).encode("utf-8", "surrogatepass"), digest_size=16
    ).digest()
    try:
        return cast(_T, _BY_HEADERS[key])
    except KeyError:
        pass
    found = work(part)
    if len(_BY_HEADERS) >= _BY_HEADERS_KEPT:
        _BY_HEADERS.clear()
    _BY_HEADERS[key] = found
    return found


def _charset(part: Message) -> str | None:
    try:
        return _by_headers(part, ("Content-Type",), _charset_named)
    except Exception:
        return None


def _charset_named(part: Message) -> str | None:
    name = part.get_content_charset()
    if not name:
        return None
    name = name.strip().lower()
    name = re.sub(r"^(cp|windows)[-_ ]?(\d+)$", r"cp\2", name)  # "cp-1252" and friends
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):  # "x-unknown", or a NUL in the name: fall back
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _REFUSED_CODECS:
        return None
    return info.name


def _walk(msg: Message, depth: int = 0) -> Iterator[Message]:
    """Leaf parts, depth-first, with the tree cut off at MAX_DEPTH. A forwarded message
    (``message/rfc822`` and every other ``message/*``) is not looked into: it is what
    somebody else wrote."""
    if depth > MAX_DEPTH:
        return
    try:
        kind = msg.get_content_type()
        if kind.startswith("message/"):  # also a message whose whole body is a forward
            return
        is_multipart = msg.is_multipart()
        payload = msg.get_payload() if is_multipart else None
    except Exception:
        return
    if not is_multipart:
        yield msg
        return
    if isinstance(payload, list):
        for sub in payload:
            if isinstance(sub, Message):
                yield from _walk(sub, depth + 1)


def _is_attachment(part: Message) -> bool:
    """An attachment, or a file shown inline: never read as orders."""
    disposition = header(part, "Content-Disposition").lower()
    if disposition.startswith("attachment"):
        return True
    try:
        return _by_headers(part, ("Content-Disposition", "Content-Type"), _has_filename)
    except Exception:
        return True


def _has_filename(part: Message) -> bool:
    return part.get_filename() is not None


# -- HTML -------------------------------------------------------------------------------


def html_to_text(html: str) -> str:
    """HTML made text: block elements become lines; quoted parts (blockquotes, and from
    the first reply header or quote container on, by tag, class or id) are left out. Any
    HTML is read in time linear in its size (:mod:`snl_pbem.mail.htmltext`)."""
    return clean_text(html_text(html[:MAX_HTML_CHARS], MAX_TEXT_CHARS))[:MAX_TEXT_CHARS]


def body_text(msg: Message) -> tuple[str, str | None]:
    """The text to read: the first text/plain part that is not blank (``format=flowed``
    lines joined), else HTML made text. Attachments and forwarded messages are never
    read. A blank text/plain alternative beside HTML is what some clients send when the
    player wrote in HTML (and what a gateway leaves of a text part it could not convert):
    the HTML is then what was written."""
    plain = html = None
    blank_plain = False
    skipped_attachment = False
    for count, part in enumerate(_walk(msg)):
        if count >= MAX_PARTS:
            break
        try:
            kind = part.get_content_type()
        except Exception:
            continue
        if _is_attachment(part):
            skipped_attachment = skipped_attachment or kind.startswith("text/")
            continue
        if kind == "text/plain" and plain is None:
            text = decode_part(part)
            if text.strip():
                plain = _unflowed(part, text[:MAX_TEXT_CHARS])
            else:
                blank_plain = True
        elif kind == "text/html" and html is None:
            html = part
    if plain is not None:
        return plain[:MAX_TEXT_CHARS], None
    if html is not None:
        if blank_plain:
            return html_to_text(decode_part(html)), "blank text part: its HTML read as text"
        return html_to_text(decode_part(html)), "HTML-only message read as text"
    if skipped_attachment:
        return "", "attachments are never read as orders"
    return "", "no text part found"


def _unflowed(part: Message, text: str) -> str:
    """``text`` with its soft line breaks joined when its part is ``format=flowed``."""
    try:
        flowed, delsp = _by_headers(part, ("Content-Type",), _flowed)
    except Exception:
        return text
    return unflow(text, delsp) if flowed else text


def _flowed(part: Message) -> tuple[bool, bool]:
    """(format=flowed, delsp=yes)"""
    flowed = str(part.get_param("format") or "").strip().lower() == "flowed"
    return flowed, str(part.get_param("delsp") or "").strip().lower() == "yes"


def parse_message(raw: bytes, game_address: str, sent: tuple[str, ...] = ()) -> ParsedMail:
    """Everything the intake needs of a raw message. Bad input gives what could be read;
    the standard library's parser may still raise on pathological nesting
    (RecursionError), which the sandbox reports and the intake sets aside.

    ``sent``: the fingerprints of the mail we sent to its sender, newest first
    (:func:`snl_pbem.mail.ours.fingerprint_of_sent`): lines of it that reappear in the
    message are a quote, never orders (:func:`snl_pbem.mail.ours.without_ours`)."""
    began = time.monotonic()
    msg = email.message_from_bytes(raw)
    sender, doubt = sender_address(msg)
    message_id = header(msg, "Message-ID") or None
    references = tuple(header(msg, "References").split()[-20:])
    text, note = body_text(msg)
    automated = automated_reason(msg, sender, game_address)
    subject = header(msg, "Subject")
    lines: list[str] = []
    dropped, cut, commands = 0, None, None
    if not automated:
        lines, dropped, cut = read_lines(without_ours(text, sent))
        commands = read_commands(lines, dropped, cut, subject)
    quoted_keys = keys_quoted_in(msg)
    # the sender's own KEY lines first: redaction looks for the first keys only
    secrets = [*(commands.order_keys if commands else ()), *quoted_keys]
    return ParsedMail(
        message_id=message_id[:998] if message_id else None,
        sender=sender,
        subject=subject,
        in_reply_to=header(msg, "In-Reply-To") or None,
        references=references,
        automated=automated,
        authentication_results=tuple(
            clean_text(str(v), MAX_HEADER_CHARS)
            for v in (msg.get_all("Authentication-Results") or [])[:10]
        ),
        text=text,
        note=note,
        sender_doubt=doubt,
        report=_is_report(msg),
        delivery_report=parse_dsn(raw) if automated else None,
        commands=commands,
        lines=tuple(lines),
        dropped=dropped,
        cut=cut,
        quoted_keys=quoted_keys,
        # a message that was slow to read is not re-encoded part by part as well: the
        # intake then replaces its keys in the bytes (the sandbox's time limit is for reading)
        # the message as read, changed in place (nothing reads it after this): not parsed twice
        redacted=(
            _redacted_copy(raw, secrets, msg)
            if time.monotonic() - began < REDACT_WITHIN_SECONDS
            else None
        ),
    )


REDACT_WITHIN_SECONDS = 2.0
"""Keys are redacted part by part (and the bodies nobody reads dropped) in the reading pass
only when reading took less than this (a real message takes milliseconds); otherwise
``redact_in_bytes`` replaces the keys as written, and the rest is kept as it came."""


def redact_in_bytes(raw: bytes, secrets: list[str] | tuple[str, ...]) -> bytes:
    """Every secret replaced in the bytes as they stand (cheap; encoded parts untouched),
    ASCII case ignored, the longest where several start at the same place. A message's
    usual few keys (its sender's, one or two quoted) are looked for as they are
    (``_few_replaced``); more, with one pattern for all (see ``_trie``): linear in the
    message whatever the keys."""
    keys = _considered(secrets)
    if not keys:
        return raw
    # the keys' bytes, ASCII in lower case (as the search folds it: a tree of keys that
    # differ in case only would take the first branch, not the longest key), one
    # character each (latin-1) for the pattern
    written = {k.encode("utf-8", "surrogateescape").lower() for k in keys}
    if len(written) <= _FEW_KEYS:
        few = _few_replaced(raw, sorted(written), REDACTED.encode())
        if few is not None:
            return few
    ordered = tuple(sorted(k.decode("latin-1") for k in written))
    return _bytes_pattern(ordered).sub(REDACTED.encode(), raw)


_FEW_KEYS = 4
"""Up to this many keys are looked for one by one (``bytes.find``): a pattern made for
each new sender cost more than the whole search (the intake's batches, issue 23)."""
_FEW_FOUND = 64
"""Past this many keys found, the pattern replaces them: one search a key found is slower
than the pattern's one pass (a megabyte of a key repeated: 0.5 s against 0.05)."""


def _few_replaced(raw: bytes, keys: list[bytes], by: bytes) -> bytes | None:
    """``raw`` with every one of a few ``keys`` replaced by ``by``, as ``_bytes_pattern``
    replaces them: the leftmost first, the longest where several start there, ASCII case
    ignored (``bytes.lower`` folds ASCII only, as a bytes pattern's IGNORECASE does).
    None past ``_FEW_FOUND`` keys found: the pattern is quicker."""
    low = raw.lower()
    keys = [k.lower() for k in keys]
    found = {k: low.find(k) for k in keys}
    parts: list[bytes] = []
    done = 0
    while True:
        live = [(at, -len(k), k) for k, at in found.items() if at >= 0]
        if not live:
            break
        if len(parts) >= 2 * _FEW_FOUND:
            return None
        at, _, key = min(live)
        parts += (raw[done:at], by)
        done = at + len(key)
        for k, where in found.items():
            if 0 <= where < done:
                found[k] = low.find(k, done)
    if not parts:
        return raw
    parts.append(raw[done:])
    return b"".join(parts)


@functools.lru_cache(maxsize=64)
def _bytes_pattern(keys: tuple[str, ...]) -> re.Pattern[bytes]:
    # ASCII case ignored, as the keys may be written
    return re.compile(_trie(keys).encode("latin-1"), re.IGNORECASE)


_MAX_SECRETS = 2000
"""Keys redacted in one message: real keys are few (the sender's, and those quoted from
our mail); a message that shows more is hostile, and only its first keys are looked for
(the pattern costs time to build, about 5 ms a thousand keys, not to run)."""
_MAX_KEY_CHARS = 100
"""Longer "keys" are not keys (ours are 19 characters, a configured one at most 64)
and are not looked for: a search costs up to the longest key for every character."""


def _considered(secrets: list[str] | tuple[str, ...]) -> list[str]:
    """The secrets to redact, in the order given (the caller puts the likeliest first),
    without duplicates (ASCII case ignored, as the bytes are searched: "\u00c9a-key" and
    "\u00e9a-key" are two keys there), too short or too long ones, at most
    ``_MAX_SECRETS``."""
    seen: dict[bytes, str] = {}
    for secret in secrets:
        if 3 <= len(secret) <= _MAX_KEY_CHARS:  # duplicates as the search folds them (ASCII)
            seen.setdefault(secret.encode("utf-8", "surrogatepass").lower(), secret)
            if len(seen) >= _MAX_SECRETS:
                break
    return list(seen.values())


def _trie(keys: tuple[str, ...]) -> str:
    """One regular expression that finds any of ``keys``, the longest where several
    start at the same place: the keys as a tree of their common beginnings
    (``ann\\-key\\-12(?:3|4)?``), so that at each character the search follows one
    branch and gives up after at most the longest key, however many keys there are and
    however alike (one pattern per key costs keys x key length per character: the
    hostile message with 50 keys of 64 characters took minutes)."""
    root: dict[str, Any] = {}
    for key in keys:
        node = root
        for char in key:
            node = node.setdefault(char, {})
        node[""] = {}  # a key ends here

    def branch(node: dict[str, Any]) -> str:
        alternatives = []
        for char in sorted(c for c in node if c):
            literal, below = re.escape(char), node[char]
            while len(below) == 1 and "" not in below:  # a chain: one literal
                ((char, below),) = below.items()
                literal += re.escape(char)
            alternatives.append(literal + branch(below))
        if not alternatives:
            return ""
        # greedy "?": the longer key when one follows, else the one that ends here
        return "(?:" + "|".join(alternatives) + (")?" if "" in node else ")")

    return branch(root)


def _redacted_copy(raw: bytes, secrets: list[str], msg: Message | None = None) -> bytes:
    """``redact_secrets``, falling back to replacing the keys in the bytes as they stand
    when the message cannot be re-encoded part by part."""
    try:
        return redact_secrets(raw, secrets, msg)
    except Exception:
        return redact_in_bytes(raw, secrets)


_KEY_LINE = re.compile(  # within one line: "\s" would run on over every blank line after
    r"^(?:[^\S\r\n]|[>|])*(?:KEY|PASSWORD)[^\S\r\n]*[:=]?[^\S\r\n]*(\S{3,64})[^\S\n]*$",
    re.IGNORECASE | re.M,
)
_GENERATED_KEY = re.compile(  # keys ignore case
    r"\b[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}\b", re.IGNORECASE
)


def _sentence(msgid: str, value: str, capture: str, flags: int = 0) -> re.Pattern[str]:
    """How our mail gives a key or a code in every language (the template's ``msgid``,
    ``%(value)s`` in it, in each catalog: snl_pbem.i18n), as a pattern whose one group is
    the value: known by what we sent, in whichever language we sent it."""
    shapes = []
    for code in LANGUAGES:
        catalog_ = catalog(code)
        words = catalog_.gettext(msgid) if catalog_ is not None else msgid
        before, _, after = without_full_width(words).partition(f"%({value})s")
        shapes.append(re.escape(before.strip()) + r"\s*" + capture + re.escape(after.strip()))
    return re.compile("|".join(f"(?:{shape})" for shape in dict.fromkeys(shapes)), flags)


@functools.cache
def key_sentence() -> re.Pattern[str]:
    """How every mail we send that gives a key gives it (the welcome, a taken-over seat, a
    new key), in any of the players' languages: a sentence ending the line, never a KEY
    line, so that no copy of our mail holds a complete order (the templates' examples say
    ``KEY (your order key)``)."""
    return _sentence(
        "Your order key is %(key)s", "key", r"([^\s<]{6,64})[ \t\r]*$", re.IGNORECASE | re.M
    )


def order_key_given(text: str) -> str | None:
    """The order key one of our mails gives (see key_sentence), or None."""
    found = key_sentence().search(without_full_width(text))
    return next((g for g in found.groups() if g), None) if found else None


@functools.cache
def code_sentence() -> re.Pattern[str]:
    """How a code mail gives its code, in any of the players' languages: in a sentence (its
    example line says ``CONFIRM (your code)``, so that no copy of our mail confirms
    anything)."""
    return _sentence("Your confirmation code is %(code)s", "code", r"(\w{4}-\w{4})", re.I)


def code_given(text: str) -> str | None:
    """The confirmation code one of our code mails gives (see code_sentence), or None."""
    found = code_sentence().search(without_full_width(text))
    return next((g for g in found.groups() if g), None) if found else None


def keys_quoted_in(msg: Message) -> tuple[str, ...]:
    """Every order key a message shows anywhere, returned copies included: the values of
    KEY lines, the key of our sentence "Your order key is ...", and anything shaped like a
    generated key; in any text part (HTML also with its references resolved and its tags
    dropped, as a reader sees it) and in the headers, decoded. At most 200: our sentences
    first, then KEY lines, then the generated shapes, each in the order they come, so
    that key-shaped decoys never push a real key out."""
    texts = [_decoded_words(str(value)) for _name, value in msg.items()[:_HEADERS_SEARCHED]]
    for count, part in enumerate(_walk_all(msg)):
        if count >= MAX_PARTS:
            break
        try:
            if part.get_content_maintype() != "text":
                continue
            kind = part.get_content_type()
        except Exception:
            continue
        text = decode_part(part)
        texts.append(text)
        if kind == "text/html":  # a tag between two lines ends a line, inside a word not
            texts += [_unmarked(text, "\n"), _unmarked(text)]
    # as the order language reads a line (quotes.clean_line): a KEY line typed in
    # full-width letters is a KEY line, and its key is found, to be redacted in every form
    texts = [without_full_width(_INVISIBLE.sub("", text)) for text in texts]
    found: dict[str, None] = {}  # ordered, without duplicates
    for shape in (key_sentence(), _KEY_LINE, _GENERATED_KEY):  # a welcome's key: the config's
        for text in texts:
            for hit in shape.findall(text):  # one group a language: the one that matched
                found.update(
                    dict.fromkeys([hit] if isinstance(hit, str) else [h for h in hit if h])
                )
            if len(found) >= _KEYS_QUOTED:
                return tuple(found)[:_KEYS_QUOTED]
    return tuple(found)


_KEYS_QUOTED = 200
"""Keys taken from one message (a real one quotes a few; more cost little to redact)."""


_HEADERS_SEARCHED = 100
"""Headers of a message searched for keys (decoding a hostile one is slow)."""


REDACTED = "****"


def redact_secrets(raw: bytes, secrets: list[str], msg: Message | None = None) -> bytes:
    """The message as it may be kept. Every secret (an order key) is replaced by ``****``
    in every form a reader could see it: in the bytes as they stand; in headers' encoded
    words (base64 or Q, split over several words, folded) and RFC 2231 parameters; in text
    parts whatever their transfer encoding and charset; in HTML written with entities or
    split by tags. The bodies of parts nobody reads (attachments, forwarded messages,
    non-text parts, parts past the reader's limits) are replaced by a one-line note of
    their size; their headers stay. Linear in the message; when nothing needs changing,
    the message is returned as it came. ``msg``: ``raw`` as ``email.message_from_bytes``
    reads it, when the caller has read it already and is done with it (it is changed in
    place)."""
    secrets = _considered(secrets)
    if msg is None:
        msg = email.message_from_bytes(raw)
    plain = _plain_redacted(raw, secrets, msg)
    if plain is not None:
        return plain
    forms = _KeyForms(secrets) if secrets else None
    if not _keep_what_is_read(msg, forms):
        return redact_in_bytes(raw, secrets)
    # the literal pass again, last: whatever no part holds (a preamble, an epilogue)
    return redact_in_bytes(_as_received(msg, raw), secrets)


_TRAILING_SPACE = re.compile(rb" \r?\n")
_PLAIN_KEY = re.compile(r"[^\s\x00-\x1f\x7f]+")
"""A key the plain message's pass may look for (``_plain_redacted``): no space, no
control character (nor, checked apart, an invisible one)."""


def _plain_redacted(raw: bytes, secrets: list[str], msg: Message) -> bytes | None:
    """``redact_secrets`` for the commonest message, without taking it apart: one part of
    plain text (mutt, a phone's mail app, Thunderbird writing plain text), neither an
    attachment nor transfer-encoded, in UTF-8 or ASCII, with no encoded word (``=?``)
    anywhere in it and no RFC 2231 parameter (a ``*`` in its one Content-Type or
    Content-Disposition), its header section whole (no defect: it ends at a blank line)
    with no header line ending in a space. Such a message reads, headers and body alike,
    as its own bytes decoded as UTF-8: every key is replaced in that text as
    ``_KeyForms.redact`` replaces it in each header and in the body (folded, with what a
    reader drops between its characters), then in the bytes. The whole text holds each
    header and the body as they stand, so every key found in one of them is found in it:
    a key of no space, control or invisible character, and no match can join two of them
    (what joins lines, a soft break, is a space before the line's end; a blank line is
    never dropped). A capital sigma anywhere (the one letter whose lower case depends on
    the letters around it, which the parts and the whole text may not share) and a key
    not of that shape leave it to the pass part by part, as any other message. About half
    the time of that pass for an order of a few lines (0.041 against 0.087 ms; issue 23)."""
    mime = [
        (name.lower(), str(value))
        for name, value in msg.items()
        if name.lower() in ("content-type", "content-disposition", "content-transfer-encoding")
    ]
    if (
        msg.is_multipart()
        or msg.defects
        or b"=?" in raw
        or any("*" in value for name, value in mime if name != "content-transfer-encoding")
        or len({name for name, _ in mime}) != len(mime)  # one of each at most
        or _TRAILING_SPACE.search(headers_only(raw))
        or _content_type(msg) != "text/plain"
        or dict(mime).get("content-transfer-encoding", "").strip().lower()
        not in ("", "7bit", "8bit", "binary")
        or _charset(msg) not in (None, "ascii", "utf-8")
        or _is_attachment(msg)
        or not all(_PLAIN_KEY.fullmatch(k) and not _INVISIBLE.search(k) for k in secrets)
    ):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\u03a3" in text:
        return None
    if not secrets:
        return raw
    redacted = _KeyForms(secrets).redact(text)
    return redact_in_bytes(raw if redacted == text else redacted.encode("utf-8"), secrets)


def _walk_all(msg: Message, depth: int = 0) -> Iterator[Message]:
    """Every leaf part, forwarded messages included (redaction looks everywhere)."""
    if depth > MAX_DEPTH:
        return
    try:
        payload = msg.get_payload()
    except Exception:
        return
    if isinstance(payload, list):
        for sub in payload:
            if isinstance(sub, Message):
                yield from _walk_all(sub, depth + 1)
    else:
        yield msg


# -- what is kept: no form of a key, and no body nobody reads ----------------------------

NOT_KEPT = "[snl-pbem: body of {size} bytes not kept: this part is never read]"
"""What the kept copy holds in place of the body of a part nobody reads."""
_WORD = r"=\?[^?\s]{1,75}\?[bBqQ]\?[^?\s]{0,4000}\?="
_ENCODED_RUN = re.compile(rf"{_WORD}(?:[ \t\r\n]+{_WORD})*")
"""Encoded words side by side (RFC 2047): a reader joins them, so a key may be split
across them. Bounded by "?" and spaces: linear whatever the header."""
_ENCODED_WORD = re.compile(r"=\?[^?]*?\?[bBqQ]\?.*?\?=")
"""An encoded word as the standard library finds one (looser than RFC 2047)."""
_HEADERS_DECODED = 500
"""Headers per message whose encoded words are decoded whole, as the reader would, to
check that no key is left: the standard library's search is slow on hostile headers."""
_HTML_REDACTED_IN_PLACE = 256 * 1024
"""Characters of HTML per message in which keys (64 characters of them in all; fewer
characters for more) are replaced where they stand; past them, HTML that shows a key is
kept as the text read from it (bounded time)."""
_RUNS_DECODED = 2000
"""Runs of encoded words per message decoded to look for keys (each costs a little
Python); past them a run is replaced whole."""


class _KeyForms:
    """The keys to redact, and patterns that find them as a reader sees them: in text,
    with the characters a reader drops between theirs (control and invisible characters,
    a format=flowed soft break); in HTML, also as character references (``&#45;``,
    ``&#x2d;``, ``&hyphen;``) and split by tags or comments (``ann-<b>key</b>-123``).
    Text is searched once for all the keys together (``_normalised``, ``_trie``); HTML
    in place key by key (``htmlkeys.replace_key``), within a budget
    (``html_affordable``)."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = _considered(secrets)
        self.finder = _finder(tuple(sorted({_folded_key(k) for k in self.secrets})))
        self.headers_decoded = 0
        self.runs_decoded = 0
        # a key's HTML pattern, when it is made (``htmlkeys``), is slow when the HTML is
        # much like the key (about 0.1 s for each million characters x key characters): a
        # budget of characters x key characters, as 256 KiB with keys of 64 characters
        self.html_budget = _HTML_REDACTED_IN_PLACE * 64
        self.html_cost = sum(len(k) for k in self.secrets)

    def found(self, text: str) -> bool:
        """True when ``text`` shows a key."""
        return bool(self.secrets) and self.finder.found(_normalised(text))

    def redact(self, text: str) -> str:
        """Every key in ``text`` replaced, as a reader sees it: the text is searched once,
        folded (see ``_normalised``), and each key found is replaced with whatever a
        reader drops between its characters."""
        if not self.secrets:
            return text
        found_all = self.finder.spans(_normalised(text))
        if not found_all:
            return text
        starts, origins = _pieces(text)
        pieces, done = [], 0
        for start, stop in found_all:
            begin = _origin(starts, origins, start)
            end = _origin(starts, origins, stop - 1) + 1
            pieces += [text[done:begin], REDACTED]
            done = end
        return "".join([*pieces, text[done:]])

    def html_affordable(self, markup: str) -> bool:
        """Whether the keys may still be replaced in ``markup`` where they stand (bounded
        time)."""
        cost = len(markup) * self.html_cost
        if cost > self.html_budget:
            return False
        self.html_budget -= cost
        return True

    def redact_html(self, markup: str) -> str:
        """Every form of every key in ``markup`` replaced where it stands."""
        for key in self.secrets:
            markup = replace_key(markup, key, REDACTED)
        return markup

    def shown_in_html(self, markup: str) -> bool:
        """True when a reader of this HTML would still see a key: with its tags stripped
        and its references resolved, or as this module reads HTML."""
        if self.found(_unmarked(markup)):
            return True
        return self.found(html_to_text(markup))


class _Finder:
    """Where any of some keys stands in a text, as ``_trie``'s pattern finds them: the
    leftmost first, the longest of those that start there, then on after it."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def found(self, text: str) -> bool:
        return self.pattern.search(text) is not None

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [found.span() for found in self.pattern.finditer(text)]


class _FewFinder(_Finder):
    """A few keys (none empty) looked for one by one (``str.find``): a message shows its
    sender's key and perhaps one or two quoted, and a pattern compiled for each new sender
    cost more than reading the rest of the message (issue 23). Finds what the pattern
    would (``_few_replaced`` is the same search in bytes)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def found(self, text: str) -> bool:
        return any(key in text for key in self.keys)

    def spans(self, text: str) -> list[tuple[int, int]]:
        at = {key: text.find(key) for key in self.keys}
        spans: list[tuple[int, int]] = []
        while True:
            live = [(where, -len(key), key) for key, where in at.items() if where >= 0]
            if not live:
                return spans
            where, _, key = min(live)
            done = where + len(key)
            spans.append((where, done))
            for other, its in at.items():
                if 0 <= its < done:
                    at[other] = text.find(other, done)


def _finder(keys: tuple[str, ...]) -> _Finder:
    """What finds ``keys`` (sorted, distinct) in a folded text."""
    if keys and len(keys) <= _FEW_KEYS and all(keys):
        return _FewFinder(keys)
    return _Finder(_text_pattern(keys))


@functools.lru_cache(maxsize=64)  # a worker reads many messages with the same keys
def _text_pattern(keys: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(_trie(keys)) if keys else re.compile(r"(?!)")


_TEXT_DROPPED = re.compile(f"(?:{text_noise()})+")
"""What a reader drops from text: control and invisible characters, a format=flowed soft
break."""


def _normalised(text: str) -> str:
    """``text`` as a reader reads a key in it: without what a reader drops, folded
    (``_folded``); ``_pieces`` maps it back."""
    return _folded(_TEXT_DROPPED.sub("", text))


def _pieces(text: str) -> tuple[list[int], list[int]]:
    """The map from ``_normalised(text)`` back to ``text``: piece ``i`` of it (a stretch
    between dropped characters) starts at ``starts[i]`` and comes from ``origins[i]``,
    character for character. Made only when a key is found (it costs a little Python
    for each stretch)."""
    starts: list[int] = []
    origins: list[int] = []
    size = done = 0
    for dropped in [*_TEXT_DROPPED.finditer(text), None]:
        begin = len(text) if dropped is None else dropped.start()
        if begin > done:
            starts.append(size)
            origins.append(done)
            size += begin - done
        if dropped is not None:
            done = dropped.end()
    return starts, origins


def _origin(starts: list[int], origins: list[int], index: int) -> int:
    """Where character ``index`` of a ``_normalised`` text came from."""
    piece = bisect.bisect_right(starts, index) - 1
    return origins[piece] + index - starts[piece]


def _folded(text: str) -> str:
    """Text as a key in it is compared, one character for one: lower case, look-alikes a
    person reads as the same as ASCII (fullwidth forms; any dash as "-")."""
    lower = text.lower()
    if len(lower) != len(text):  # a letter whose lower case is two ("İ"): kept as it is
        lower = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    return lower.translate(_LOOK_ALIKES)


def _folded_key(key: str) -> str:
    return _folded(_INVISIBLE.sub("", key))


_LOOK_ALIKES: dict[int, str] = {
    **{point: chr(point - 0xFEE0) for point in range(0xFF01, 0xFF5F)},  # fullwidth ASCII
    **{ord(dash): "-" for dash in DASHES},
}


def _unmarked(markup: str, tag: str = "") -> str:
    """HTML with its tags and comments replaced by ``tag`` and its references resolved."""
    return html.unescape(_MARKUP.sub(tag, markup))


def _keep_what_is_read(msg: Message, forms: _KeyForms | None) -> bool:
    """Redact ``msg`` in place (every header, the bodies that are read) and drop the
    bodies nobody reads; True when anything changed. One pass over the tree without
    recursion (a hostile message may nest deeper than any recursion limit); everything
    below the depth the reader stops at goes as one body."""
    read = _read_parts(msg)
    changed = False
    stack: list[tuple[Message, int, bool]] = [(msg, 0, False)]
    while stack:
        part, depth, report = stack.pop()
        if forms is not None:
            changed = _redact_headers(part, forms) or changed
        kind = _content_type(part)
        payload = part.get_payload()
        if isinstance(payload, list):
            # a delivery report's status part is header blocks only (read by parse_dsn)
            if depth >= MAX_DEPTH and kind != "message/delivery-status":
                changed = _drop_body(part, _size(part)) or changed
                continue
            report = report or kind in STATUS_PARTS or kind in RETURNED_HEADERS
            if forms is not None:
                changed = _redact_around_parts(part, forms) or changed
            subparts = [sub for sub in payload if isinstance(sub, Message)]
            stack.extend((sub, depth + 1, report) for sub in reversed(subparts))
        elif id(part) in read or report or kind in RETURNED_HEADERS:  # parse_dsn reads those
            if forms is not None:
                changed = _redact_body(part, forms, is_html=kind == "text/html") or changed
        elif isinstance(payload, str) and payload.strip():
            changed = _drop_body(part, len(payload)) or changed
    return changed


def _redact_around_parts(part: Message, forms: _KeyForms) -> bool:
    """A preamble or epilogue (text around a multipart's parts, which nobody reads) that
    shows a key in a form the bytes pass cannot find goes, for a note of its size."""
    changed = False
    for place in ("preamble", "epilogue"):
        text = getattr(part, place, None)
        if isinstance(text, str) and (forms.found(text) or forms.found(_unmarked(text))):
            setattr(part, place, NOT_KEPT.format(size=len(text)))
            changed = True
    return changed


def _read_parts(msg: Message) -> set[int]:
    """The parts ``body_text`` may read, by id: every text/plain and text/html part that
    is not an attachment among the leaves it walks (which alternative it reads depends on
    what they hold, so all are kept)."""
    read: set[int] = set()
    for count, part in enumerate(_walk(msg)):
        if count >= MAX_PARTS:
            break
        if _content_type(part) in ("text/plain", "text/html") and not _is_attachment(part):
            read.add(id(part))
    return read


def _content_type(part: Message) -> str:
    try:
        return part.get_content_type()
    except Exception:
        return ""


def _size(part: Message) -> int:
    """The bytes of every body under ``part``."""
    size, stack = 0, [part]
    while stack:
        payload = stack.pop().get_payload()
        if isinstance(payload, list):
            stack.extend(sub for sub in payload if isinstance(sub, Message))
        elif isinstance(payload, str):
            size += len(payload)
    return size


def _drop_body(part: Message, size: int) -> bool:
    """The body replaced by a note of its size; the headers stay (the transfer encoding
    says what the note is: plain text)."""
    encoding = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
    if encoding and encoding not in ("7bit", "8bit", "binary"):
        part.replace_header("Content-Transfer-Encoding", "7bit")
    part.set_payload(NOT_KEPT.format(size=size) + "\n")
    return True


def _redact_body(part: Message, forms: _KeyForms, *, is_html: bool) -> bool:
    """Every key in a text part replaced, the part encoded again as it came (same
    transfer encoding and charset). HTML that still shows a key afterwards (split by a
    script, or by a tag too long to pass over) is replaced by the text read from it."""
    try:
        data = part.get_payload(decode=True)
    except Exception:
        data = None
    if not isinstance(data, bytes) or not data:
        return False
    text, charset, errors = _decoded_as_read(part, data)
    if not is_html:
        redacted = forms.redact(text)
    elif not forms.shown_in_html(text):
        return False
    elif forms.html_affordable(text):
        redacted = forms.redact_html(text)
        if forms.shown_in_html(redacted):
            redacted = _html_as_read(text, forms)
    else:
        redacted = _html_as_read(text, forms)
    if redacted == text:
        return False
    try:
        new = redacted.encode(charset, errors)
    except (UnicodeError, LookupError):  # a codec that cannot write back: UTF-8 then
        new = redacted.encode("utf-8", "surrogateescape")
        part.set_param("charset", "utf-8")
    _set_body(part, new)
    return True


def _decoded_as_read(part: Message, data: bytes) -> tuple[str, str, str]:
    """(text, charset, errors): decoded as ``decode_part`` decodes it, and how to encode
    it back to the same bytes."""
    for charset in (_charset(part), "utf-8"):
        if charset is None:
            continue
        with suppress(UnicodeDecodeError, LookupError):
            return data.decode(charset), charset, "strict"
    return data.decode("cp1252", "surrogateescape"), "cp1252", "surrogateescape"


def _set_body(part: Message, data: bytes) -> None:
    """``data`` as the part's body, in its transfer encoding (base64 for any other than
    the plain ones and quoted-printable)."""
    encoding = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
    if encoding == "quoted-printable":
        body = quopri.encodestring(data, quotetabs=True).decode("ascii")
    elif encoding in ("", "7bit", "8bit", "binary"):
        body = data.decode("ascii", "surrogateescape")  # written back byte for byte
    else:
        if encoding != "base64":  # x-uuencode and the like
            part.replace_header("Content-Transfer-Encoding", "base64")
        body = base64.encodebytes(data).decode("ascii")
    part.set_payload(body)


def _html_as_read(markup: str, forms: _KeyForms) -> str:
    read = forms.redact(html_to_text(markup))
    return (
        "<!-- snl-pbem: this HTML showed an order key where it could not be replaced; "
        "it is kept as the text read from it -->\n<pre>"
        + html.escape(read, quote=False)
        + "</pre>\n"
    )


def _redact_headers(part: Message, forms: _KeyForms) -> bool:
    """Every key in the part's headers replaced, wherever it stands: as written, in
    encoded words, in RFC 2231 parameters."""
    headers = vars(part).get("_headers")  # compat32's list: headers of one name may repeat
    if not isinstance(headers, list):
        return False
    changed = False
    for index, item in enumerate(headers):
        name, value = item
        if isinstance(value, str):
            new = _redacted_header(value, forms)
            if new != value:
                headers[index] = (name, new)
                changed = True
    for name in ("Content-Type", "Content-Disposition"):
        changed = _redact_parameters(part, name, forms) or changed
    return changed


def _redacted_header(value: str, forms: _KeyForms) -> str:
    shown = _utf8_shown(value)
    if shown is not None:  # a header in UTF-8 as it stands (RFC 6532): its text searched
        redacted = forms.redact(shown)
        if redacted != shown:
            value = redacted.encode("utf-8").decode("ascii", "surrogateescape")
    value = forms.redact(value)
    if "=?" not in value:
        return value
    value = _ENCODED_RUN.sub(lambda m: _redacted_words(m.group(0), forms), value)
    if forms.headers_decoded < _HEADERS_DECODED:
        # what the reader decodes (the first MAX_HEADER_CHARS): a key left in a word the
        # standard library reads but RFC 2047 does not allow goes with the word
        forms.headers_decoded += 1
        head = value[:MAX_HEADER_CHARS]
        if forms.found(_decoded_words(head)):
            value = _ENCODED_WORD.sub(REDACTED, head) + value[MAX_HEADER_CHARS:]
    return value


def _utf8_shown(value: str) -> str | None:
    """A header value the parser read from 8-bit bytes (each byte past ASCII one
    surrogate), as a reader shows it when those bytes are UTF-8; None when there are
    none, or they are not UTF-8. Searched as it stood, a key written with an invisible
    character or a look-alike in such a header was kept."""
    if value.isascii() or not _SURROGATE.search(value):
        return None
    try:
        return value.encode("ascii", "surrogateescape").decode("utf-8")
    except UnicodeError:  # (not UTF-8, or a character the parser did not give)
        return None


_SURROGATE = re.compile("[\udc80-\udcff]")


def _redacted_words(run: str, forms: _KeyForms) -> str:
    """Encoded words side by side, written again (UTF-8, base64) with every key they
    show replaced; unchanged when they show none. Past ``_RUNS_DECODED`` in a message
    (only hostile mail has so many) each is replaced whole, unread."""
    forms.runs_decoded += 1
    if forms.runs_decoded > _RUNS_DECODED:
        return REDACTED
    try:
        decoded = str(make_header(decode_header(run)))
    except Exception:  # an unknown charset: no reader can show it either
        return run
    if not forms.found(decoded):
        return run
    redacted = forms.redact(decoded).encode("utf-8", "replace").decode("utf-8")
    chunks = [redacted[i : i + 40] for i in range(0, len(redacted), 40)] or [""]
    return " ".join(
        f"=?utf-8?b?{base64.b64encode(chunk.encode()).decode('ascii')}?=" for chunk in chunks
    )


def _redact_parameters(part: Message, name: str, forms: _KeyForms) -> bool:
    """A key in an RFC 2231 parameter (``filename*=utf-8''ann%2Dkey%2D123``) replaced
    with the whole value; other parameters are redacted with their header."""
    value = part.get(name)
    if value is None or "*" not in str(value):
        return False
    try:
        params = part.get_params(header=name) or []
    except Exception:
        return False
    changed = False
    for key, param in params[1:]:
        shown = collapse_rfc2231_value(param) if isinstance(param, tuple) else str(param)
        if forms.found(shown) or forms.found(_decoded_words(shown)):
            with suppress(Exception):
                part.set_param(key, REDACTED, header=name, replace=True)
                changed = True
    return changed


class _AsReceived(Compat32):
    """Headers written back as they came (``compat32`` would fold them again), so that a
    kept copy differs from the message only where something was redacted or dropped."""

    def fold_binary(self, name: str, value: Any) -> bytes:
        if not isinstance(value, str):
            return super().fold_binary(name, value)
        return f"{name}: {value}{self.linesep}".encode("utf-8", "surrogateescape")


def _as_received(msg: Message, raw: bytes) -> bytes:
    """``msg`` as bytes, with the line endings ``raw`` came with."""
    linesep = "\r\n" if b"\r\n" in headers_only(raw) else "\n"
    out = io.BytesIO()
    policy = _AsReceived(linesep=linesep)
    BytesGenerator(out, mangle_from_=False, policy=policy).flatten(msg)
    return out.getvalue()


ENVELOPE_BYTES = 65536
"""``envelope_of`` reads a message's first 64 KiB at most."""


_HEADER_LINE = re.compile(r"(From |[\041-\071\073-\176]*:|[\t ])")
"""A line of the header section, as the parser knows one (``email.feedparser.headerRE``,
which typeshed does not declare): the first line that is not one ends them (an empty
line, or a body without the empty line before it)."""


class _Head(dict[str, str]):
    """The first value of some headers, by lower-cased name, as a compat32 ``Message``
    gives them: ``get`` is ``Message.get`` (any case), all ``header`` and
    ``sender_address`` call. ``eight_bit``: a value held 8-bit bytes (the parser gives a
    ``Header`` for it, and it is left out here). ``cut``: the one whose value ran to the
    limit read, with more of the message after it (it may go on past it: left out)."""

    eight_bit = False
    cut: str | None = None

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


def first_headers(raw: bytes, names: tuple[str, ...], limit: int = ENVELOPE_BYTES) -> _Head:
    """The first value of each of ``names`` (lower-case) in ``raw[:limit]``, as
    ``BytesHeaderParser`` (compat32) reads it, without building its message: the header
    section is cut into lines as its parser cuts them (at CR, LF or CRLF), a header's
    lines joined as ``Compat32.header_source_parse`` joins them, a first line starting
    ``From `` taken as the envelope's, one elsewhere or starting with ``:`` set aside, a
    continuation with no header before it too. A value with 8-bit bytes, or cut by the
    limit, is left out (``_Head.eight_bit``, ``_Head.cut``). About 8 us for an order's
    head, against 35 us through the parser (issue 23: the poller reads each message's
    envelope before storing it)."""
    found = _Head()
    name, value = "", ""  # the header being read, when one of ``names``
    text = raw[:limit].decode("ascii", "surrogateescape")
    for line in io.StringIO(text, newline=""):  # the parser's lines (BufferedSubFile)
        if not _HEADER_LINE.match(line):
            break
        if line[0] in " \t":  # then as ``FeedParser._parse_headers``, kept to ``names``
            if name:
                value += line
            continue
        if name and name not in found:
            found[name] = value.rstrip("\r\n")
        name = value = ""
        if line.startswith("From "):
            continue  # the envelope's (first line), set aside (elsewhere), or the body's
        colon = line.find(":")
        if colon == 0:
            continue
        lower = line[:colon].lower()
        if lower in names:
            name, value = lower, line[colon + 1 :].lstrip(" \t")
    else:  # the limit reached within the header section
        if name and name not in found and len(raw) > limit:
            found.cut, name = name, ""  # (its end, or a fold of it, may lie past the limit)
    if name and name not in found:
        found[name] = value.rstrip("\r\n")
    for key in [key for key, kept in found.items() if not kept.isascii()]:
        found.eight_bit = True  # (decoded as ASCII: anything else is an 8-bit byte)
        del found[key]
    return found


def envelope_of(raw: bytes) -> tuple[str | None, str | None]:
    """``(Message-ID, From address)`` read from the headers alone: cheap, bounded (the
    first 64 KiB), cleaned for the database; never raises. A Message-ID or From whose
    value runs to the 64 KiB, with more after it, is not read: a From's first 64 KiB may
    name another sender than the whole of it (``parse_message``'s reading), and the lines
    of this message would be compared with what we sent that other one."""
    try:
        fast = first_headers(raw, ("message-id", "from"))
        head: Message | _Head = fast
        if fast.eight_bit:
            head = email.parser.BytesHeaderParser().parsebytes(raw[:ENVELOPE_BYTES])
    except Exception:
        return None, None
    value = header(head, "Message-ID") if fast.cut != "message-id" else ""
    sender = sender_address(head)[0] if fast.cut != "from" else None
    # 998 bytes, not characters: 998 CJK characters are 2,994 bytes, past PostgreSQL's
    # index row limit (2,704), and the database refusing the row refused its whole batch
    kept = value.encode("utf-8", "surrogatepass")[:998].decode("utf-8", "ignore")
    return kept or None, sender


def headers_only(raw: bytes, limit: int = 65536) -> bytes:
    """The header section of a raw message (at most ``limit`` bytes)."""
    head = raw[:limit]
    for separator in (b"\r\n\r\n", b"\n\n"):
        end = head.find(separator)
        if end >= 0:
            return head[: end + len(separator)]
    return head
