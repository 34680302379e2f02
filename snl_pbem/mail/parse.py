"""Reading an email, whatever arrives: headers that never raise, the text a person wrote.

``parse_message`` never raises on bad input. It reads with the lenient
``compat32`` parser, caps every header and the MIME tree, decodes any text
charset (unknown ones fall back to UTF-8, then Windows-1252; codecs that are
not plain text encodings, such as punycode, are never run), turns an
HTML-only message into text with a C parser (leaving out quoted parts, found
by tag, class or id), never reads an attachment or a forwarded message, and
says when a message was written by a robot (auto-replies, bounces, lists),
which must never be answered (RFC 3834) nor obeyed.

Everything it returns is safe to store: no NUL, no control characters, no
lone surrogates. The server runs it in a worker process with a hard time
and memory limit (:mod:`snl_pbem.mail.sandbox`); it is pure and may also be
called directly.
"""

from __future__ import annotations

import codecs
import email
import email.encoders
import email.parser
import re
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses

from selectolax.lexbor import LexborHTMLParser

from snl_pbem.mail.commands import Commands, parse_commands
from snl_pbem.mail.dsn import DeliveryReport, parse_dsn

MAX_HEADER_CHARS = 2000
MAX_PARTS = 200
MAX_DEPTH = 10
MAX_TEXT_CHARS = 200_000
MAX_PART_BYTES = 2 * 1024 * 1024
"""A text part's decoded payload is cut here before any charset decoding."""
MAX_HTML_CHARS = 1_000_000

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FOLD = re.compile(r"[\r\n\t]+")
_CUT = "\ue000snl-cut\ue000"
"""A marker put into HTML before the first quoted part (private-use characters)."""

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
    patterns run on what a stranger wrote)."""
    quoted_keys: tuple[str, ...] = ()
    """Order keys the message shows anywhere, quotes and returned copies included (a bounced
    welcome returns its key): redacted from what is kept, never used."""
    redacted: bytes | None = None
    """The message as it may be kept: every key it shows (``quoted_keys`` and the KEY
    lines read) replaced by ``****``; None when it shows none. Made here, in the same
    bounded pass as the rest, so keeping a message costs no second trip to the sandbox."""


def clean_text(value: str, limit: int | None = None) -> str:
    """Text the database can hold: no NUL or control characters, no lone surrogates."""
    value = _CONTROL.sub("", value)
    value = value.encode("utf-8", "replace").decode("utf-8")
    return value[:limit] if limit is not None else value


def header(msg: Message, name: str) -> str:
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
    with suppress(Exception):  # undecodable encoded-words: keep the raw text
        text = str(make_header(decode_header(text)))
    return clean_text(_FOLD.sub(" ", text).strip(), MAX_HEADER_CHARS)


def _decoded_words(text: str) -> str:
    with suppress(Exception):
        text = str(make_header(decode_header(text)))
    return clean_text(text, MAX_HEADER_CHARS)


def header_names(msg: Message) -> list[str]:
    try:
        return [str(k).lower() for k in msg.keys()[:500]]
    except Exception:
        return []


_ADDRESS_IN_NAME = re.compile(r"[^\s<>\"']+@[^\s<>\"']+")


def sender_address(msg: Message) -> tuple[str | None, str | None]:
    """``(address, doubt)``: the From address lower-cased, or None, and why it is doubtful."""
    try:  # addresses are read before encoded words are decoded: an encoded display name
        # may hold a comma ("=?utf-8?q?M=C3=BCller=2C_Ann?=" is "Müller, Ann")
        raw = clean_text(_FOLD.sub(" ", str(msg.get("From") or ""))[:MAX_HEADER_CHARS])
        pairs = [(_decoded_words(n), a) for n, a in getaddresses([raw]) if a or n]
    except Exception:
        return None, "unreadable From header"
    if not pairs:
        return None, "no From address"
    if len(pairs) > 1:
        return None, "more than one From address"
    name, address = pairs[0]
    address = address.strip().strip("<>")
    if address.count("@") != 1 or " " in address or len(address) > 254:
        return None, f"From address without a domain ({address[:60]!r})"
    local, domain = address.split("@")
    if not local or "." not in domain:
        return None, f"From address without a domain ({address[:60]!r})"
    address = f"{local}@{domain}".lower()
    for shown in _ADDRESS_IN_NAME.findall(name):
        if shown.strip(".,;:()[]").lower() != address:
            return address, f"the From name shows {shown[:60]!r}, but the address is {address}"
    return address, None


def automated_reason(msg: Message, sender: str | None, game_address: str) -> str | None:
    """Why a message must not be answered or obeyed (RFC 3834 and common practice)."""
    names = header_names(msg)
    auto = header(msg, "Auto-Submitted").lower()
    if auto and not auto.startswith("no"):
        return f"Auto-Submitted: {auto[:40]}"
    if header(msg, "Return-Path").replace(" ", "") == "<>":
        return "null return path (a bounce)"
    if header(msg, "Precedence").lower() in ("bulk", "junk", "list", "auto_reply"):
        return f"Precedence: {header(msg, 'Precedence').lower()}"
    lists = [n for n in names if n.startswith("list-")]
    if lists:
        return f"mailing-list mail ({lists[0]})"
    if any(n in ("x-autoreply", "x-autorespond", "x-autoresponder") for n in names):
        return "auto-reply header"
    if _is_report(msg):
        return "delivery report (bounce)"
    if sender is not None:
        local = sender.split("@")[0].lower()
        if local in ("mailer-daemon", "postmaster", "noreply", "no-reply"):
            return f"sent by {local}"
        if sender == game_address.lower():
            return "sent from the game address itself"
    return None


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


def _charset(part: Message) -> str | None:
    try:
        name = part.get_content_charset()
    except Exception:
        return None
    if not name:
        return None
    name = name.strip().lower()
    name = re.sub(r"^(cp|windows)[-_ ]?(\d+)$", r"cp\2", name)  # "cp-1252" and friends
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None  # "x-unknown": fall back
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
        return part.get_filename() is not None
    except Exception:
        return True


# -- HTML -------------------------------------------------------------------------------

_DROP = (
    # quoted parts that are whole elements: they go, what stands after them stays (a reply
    # written below the quote)
    "head, script, style, title, template, blockquote, .moz-cite-prefix, .gmail_attr, "
    ".gmail_quote, .gmail_quote_container, .yahoo_quoted, .moz-forward-container, "
    "[id*='quote' i], [class*='quote' i], #mail-editor-reference-message-container"
)
_QUOTE_STARTS = (
    # Outlook's reply headers: the quote is not inside them but follows them, so the first
    # of these in document order starts the quote, and everything after it goes
    "#divRplyFwdMsg, #appendonsend, #x_divRplyFwdMsg, #x_appendonsend, "
    "[class*='OutlookMessageHeader' i], hr#stopSpelling, "
    "div[style*='border-top:solid #E1E1E1' i], div[style*='border-top: solid #E1E1E1' i], "
    "div[style*='border-top:solid #B5C4DF' i], div[style*='border-top: solid #B5C4DF' i]"
)
_BLOCKS = (
    "br, p, div, li, tr, td, th, h1, h2, h3, h4, h5, h6, table, pre, hr, ul, ol, "
    "address, article, section, header, footer, dd, dt"
)


def html_to_text(html: str) -> str:
    """HTML made text: block elements become lines; quoted parts (blockquotes, and from
    the first reply header or quote container on, by tag, class or id) are left out."""
    html = html[:MAX_HTML_CHARS].replace("\ue000", "")
    try:
        tree = LexborHTMLParser(html)
        for node in tree.css(_DROP):
            node.decompose()
        for node in tree.css(_QUOTE_STARTS):
            node.insert_before(_CUT)
        for node in tree.css(_BLOCKS):
            node.insert_before("\n")
            node.insert_after("\n")
        root = tree.body or tree.root
        text = root.text(deep=True) if root is not None else ""
    except Exception:  # a parser failure leaves nothing to read, never a crash
        return ""
    return clean_text(text.split(_CUT, 1)[0].replace("\ue000", ""))[:MAX_TEXT_CHARS]


def body_text(msg: Message) -> tuple[str, str | None]:
    """The text to read: the first text/plain part, else HTML made text. Attachments
    and forwarded messages are never read."""
    plain = html = None
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
            plain = part
        elif kind == "text/html" and html is None:
            html = part
    if plain is not None:
        return decode_part(plain)[:MAX_TEXT_CHARS], None
    if html is not None:
        return html_to_text(decode_part(html)), "HTML-only message read as text"
    if skipped_attachment:
        return "", "attachments are never read as orders"
    return "", "no text part found"


def parse_message(raw: bytes, game_address: str) -> ParsedMail:
    """Everything the intake needs of a raw message. Bad input gives what could be read;
    the standard library's parser may still raise on pathological nesting
    (RecursionError), which the sandbox reports and the intake sets aside."""
    began = time.monotonic()
    msg = email.message_from_bytes(raw)
    sender, doubt = sender_address(msg)
    message_id = header(msg, "Message-ID") or None
    references = tuple(header(msg, "References").split()[-20:])
    text, note = body_text(msg)
    automated = automated_reason(msg, sender, game_address)
    subject = header(msg, "Subject")
    commands = None if automated else parse_commands(text, subject)
    quoted_keys = keys_quoted_in(msg)
    secrets = sorted({*quoted_keys, *(commands.order_keys if commands else ())})
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
        quoted_keys=quoted_keys,
        # a message that was slow to read is not re-encoded part by part as well: the
        # intake then replaces its keys in the bytes (the sandbox's time limit is for reading)
        redacted=(
            _redacted_copy(raw, secrets)
            if secrets and time.monotonic() - began < REDACT_WITHIN_SECONDS
            else None
        ),
    )


REDACT_WITHIN_SECONDS = 2.0
"""Keys are redacted part by part in the reading pass only when reading took less than
this (a real message takes milliseconds); otherwise ``redact_in_bytes`` does it."""


def redact_in_bytes(raw: bytes, secrets: list[str] | tuple[str, ...]) -> bytes:
    """Every secret replaced in the bytes as they stand (cheap; encoded parts untouched)."""
    for secret in (s for s in secrets if len(s) >= 3):
        raw = re.sub(re.escape(secret.encode()), REDACTED.encode(), raw, flags=re.IGNORECASE)
    return raw


def _redacted_copy(raw: bytes, secrets: list[str]) -> bytes:
    """``redact_secrets``, falling back to replacing the keys in the bytes as they stand
    when the message cannot be re-encoded part by part."""
    try:
        return redact_secrets(raw, secrets)
    except Exception:
        return redact_in_bytes(raw, secrets)


_KEY_LINE = re.compile(r"^[\s>|]*(?:KEY|PASSWORD)\s*[:=]?\s*(\S{3,64})\s*$", re.IGNORECASE | re.M)
_GENERATED_KEY = re.compile(r"\b[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}\b")


def keys_quoted_in(msg: Message) -> tuple[str, ...]:
    """Every order key a message shows anywhere, returned copies included: the values of
    KEY lines, and anything shaped like a generated key (as a welcome mail shows it)."""
    found: set[str] = set()
    for count, part in enumerate(_walk_all(msg)):
        if count >= MAX_PARTS:
            break
        try:
            if part.get_content_maintype() != "text":
                continue
        except Exception:
            continue
        text = decode_part(part)
        found.update(_KEY_LINE.findall(text))
        found.update(_GENERATED_KEY.findall(text))
    return tuple(sorted(found))[:50]


REDACTED = "****"


def redact_secrets(raw: bytes, secrets: list[str]) -> bytes:
    """The message with every secret (an order key) replaced by ``****`` wherever a
    reader would see it: in the bytes as they stand, and inside text parts encoded as
    base64 or quoted-printable (those parts are re-encoded; the rest is kept as it was)."""
    secrets = [s for s in secrets if len(s) >= 3]
    if not secrets:
        return raw
    pattern = re.compile(
        "|".join(re.escape(s) for s in sorted(secrets, key=len, reverse=True)), re.IGNORECASE
    )
    bytes_pattern = re.compile(
        b"|".join(re.escape(s.encode("utf-8")) for s in sorted(secrets, key=len, reverse=True)),
        re.IGNORECASE,
    )
    raw = bytes_pattern.sub(REDACTED.encode(), raw)
    msg = email.message_from_bytes(raw)
    changed = False
    for count, part in enumerate(_walk_all(msg)):
        if count >= MAX_PARTS:
            break
        try:
            if part.get_content_maintype() != "text":
                continue
            encoding = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
            if encoding not in ("base64", "quoted-printable"):
                continue
            payload = part.get_payload(decode=True)
            if not isinstance(payload, bytes):
                continue
            charset = _charset(part) or "utf-8"
            text = payload.decode(charset, errors="replace")
            if not pattern.search(text):
                continue
            redacted = pattern.sub(REDACTED, text).encode(charset, errors="replace")
            del part["Content-Transfer-Encoding"]
            part.set_payload(redacted)
            if encoding == "base64":
                email.encoders.encode_base64(part)
            else:
                email.encoders.encode_quopri(part)
            changed = True
        except Exception:  # a part we cannot re-encode: left as the bytes pass made it
            continue
    if not changed:
        return raw
    try:
        return msg.as_bytes()
    except Exception:
        return raw


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


def envelope_of(raw: bytes) -> tuple[str | None, str | None]:
    """``(Message-ID, From address)`` read from the headers alone: cheap, bounded (the
    first 64 KiB), cleaned for the database; never raises."""
    try:
        head = email.parser.BytesHeaderParser().parsebytes(raw[:65536])
    except Exception:
        return None, None
    value = header(head, "Message-ID")
    sender, _doubt = sender_address(head)
    return value[:998] or None, sender


def headers_only(raw: bytes, limit: int = 65536) -> bytes:
    """The header section of a raw message (at most ``limit`` bytes)."""
    head = raw[:limit]
    for separator in (b"\r\n\r\n", b"\n\n"):
        end = head.find(separator)
        if end >= 0:
            return head[: end + len(separator)]
    return head
