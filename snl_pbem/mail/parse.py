"""Reading an email, whatever arrives: headers that never raise, the text a person wrote.

``parse_message`` never raises on bad input. It reads with the lenient
``compat32`` parser, caps every header and the MIME tree, decodes any
charset (unknown ones fall back to UTF-8, then Windows-1252), turns an
HTML-only message into text (leaving out quoted parts), and says when a
message was written by a robot (auto-replies, bounces, lists), which must
never be answered (RFC 3834) nor obeyed.
"""

from __future__ import annotations

import codecs
import email
import email.parser
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses
from html.parser import HTMLParser
from typing import ClassVar

MAX_HEADER_CHARS = 2000
MAX_PARTS = 200
MAX_DEPTH = 10
MAX_TEXT_CHARS = 200_000
PARSE_SECONDS = 5.0


class ParseTimeout(Exception):
    """Parsing one message took longer than its time limit."""


@dataclass(frozen=True)
class ParsedMail:
    message_id: str | None
    sender: str | None
    """The From address, lower-cased; None when there is no usable one."""
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


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`ParseTimeout` if the block runs longer than ``seconds``.

    Uses SIGALRM, so it works in the main thread (where the server ingests);
    elsewhere the block runs without a limit (inputs are capped in size anyway).
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise ParseTimeout(f"parsing took longer than {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def header(msg: Message, name: str) -> str:
    """A header's decoded text ("" when absent or undecodable); never raises."""
    try:
        value = msg.get(name)
    except Exception:
        return ""
    if value is None:
        return ""
    text = str(value)[:MAX_HEADER_CHARS]
    with suppress(Exception):  # undecodable encoded-words: keep the raw text
        text = str(make_header(decode_header(text)))
    return re.sub(r"[\r\n\t]+", " ", text).strip()[:MAX_HEADER_CHARS]


def header_names(msg: Message) -> list[str]:
    try:
        return [str(k).lower() for k in msg.keys()[:500]]
    except Exception:
        return []


def sender_address(msg: Message) -> str | None:
    raw = header(msg, "From")
    try:
        pairs = getaddresses([raw])
    except Exception:
        return None
    for _name, address in pairs[:5]:
        address = address.strip().strip("<>")
        if address.count("@") == 1 and " " not in address and len(address) <= 254:
            local, domain = address.split("@")
            if local and "." in domain:
                return f"{local}@{domain}".lower()
    return None


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
    try:
        if msg.get_content_type() == "multipart/report":
            return "delivery report (bounce)"
    except Exception:
        pass
    if sender is not None:
        local = sender.split("@")[0].lower()
        if local in ("mailer-daemon", "postmaster", "noreply", "no-reply"):
            return f"sent by {local}"
        if sender == game_address.lower():
            return "sent from the game address itself"
    return None


def decode_part(part: Message) -> str:
    """A text part's payload as str, whatever its transfer encoding and charset."""
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        payload = None
    if not isinstance(payload, bytes):
        raw = part.get_payload()
        return raw if isinstance(raw, str) else ""
    for charset in (_charset(part), "utf-8"):
        if charset is None:
            continue
        try:
            return payload.decode(charset)
        except (UnicodeDecodeError, LookupError):
            continue
    return payload.decode("cp1252", errors="replace")


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
        return codecs.lookup(name).name
    except LookupError:
        return None  # "x-unknown": fall back


def _walk(msg: Message, depth: int = 0) -> Iterator[Message]:
    """Leaf parts, depth-first, with the tree cut off at MAX_DEPTH."""
    if depth > MAX_DEPTH:
        return
    try:
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
    disposition = header(part, "Content-Disposition").lower()
    return disposition.startswith("attachment")


class _HtmlText(HTMLParser):
    """HTML to text: block elements become lines, quoted parts are left out."""

    BLOCKS: ClassVar[frozenset[str]] = frozenset(
        {"br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "table", "pre"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0  # inside script/style/quotes
        self.stopped = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = " ".join(v or "" for k, v in attrs if k == "class").lower()
        if tag in ("script", "style", "blockquote", "head") or "quote" in classes:
            self.skip += 1
        if "gmail_quote" in classes or "divrplyfwdmsg" in classes.replace("_", ""):
            self.stopped = True
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "blockquote", "head") and self.skip:
            self.skip -= 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip and not self.stopped:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _HtmlText()
    try:
        parser.feed(html[:MAX_TEXT_CHARS])
        parser.close()
    except Exception:
        pass
    return "".join(parser.parts)


def body_text(msg: Message) -> tuple[str, str | None]:
    """The text to read: the first text/plain part, else HTML made text."""
    plain = html = None
    for count, part in enumerate(_walk(msg)):
        if count >= MAX_PARTS:
            break
        try:
            kind = part.get_content_type()
        except Exception:
            continue
        if _is_attachment(part):
            continue
        if kind == "text/plain" and plain is None:
            plain = part
        elif kind == "text/html" and html is None:
            html = part
    if plain is not None:
        return decode_part(plain)[:MAX_TEXT_CHARS], None
    if html is not None:
        return html_to_text(decode_part(html)), "HTML-only message read as text"
    return "", "no text part found"


def parse_message(raw: bytes, game_address: str, seconds: float = PARSE_SECONDS) -> ParsedMail:
    """Everything the intake needs of a raw message. Raises only :class:`ParseTimeout`."""
    with time_limit(seconds):
        msg = email.message_from_bytes(raw)
        sender = sender_address(msg)
        message_id = header(msg, "Message-ID") or None
        references = tuple(header(msg, "References").split()[-20:])
        text, note = body_text(msg)
        return ParsedMail(
            message_id=message_id[:998] if message_id else None,
            sender=sender,
            subject=header(msg, "Subject"),
            in_reply_to=header(msg, "In-Reply-To") or None,
            references=references,
            automated=automated_reason(msg, sender, game_address),
            authentication_results=tuple(
                str(v)[:MAX_HEADER_CHARS]
                for v in (msg.get_all("Authentication-Results") or [])[:10]
            ),
            text=text,
            note=note,
        )


def message_id_of(raw: bytes) -> str | None:
    """Only the Message-ID, read from the headers alone (cheap; never raises)."""
    try:
        head = email.parser.BytesHeaderParser().parsebytes(raw[:65536])
    except Exception:
        return None
    value = header(head, "Message-ID")
    return value[:998] or None
