"""Reading a bounce: who could not be reached, why, and which message it returns.

``parse_dsn`` reads a delivery status notification (RFC 3464: multipart/report
with a message/delivery-status part, as Postfix, Exim, Exchange/Outlook, Gmail
and most MTAs send today) and, cheaply, the older free-text bounces (Exim's
"The following address(es) failed", Gmail's "Delivery to the following
recipient failed permanently", Exchange's "did not reach the following
recipient(s)", qmail's "Hi. This is the qmail-send program"). It never raises:
anything it cannot read is simply not a bounce (None).

The returned message is named by its Message-ID, from the returned copy
(message/rfc822, text/rfc822-headers, or their RFC 6533 UTF-8 forms), from a
copy pasted into the text, or from the bounce's own In-Reply-To/References
(some MTAs thread their bounces). Whoever calls this decides which of those
Message-IDs are really its own: a bounce is as easy to forge as any mail.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.parser
import quopri
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from email.utils import getaddresses

MAX_BYTES = 512 * 1024  # the report and the returned headers come first; a body may go
MAX_PARTS = 50
MAX_DEPTH = 5
MAX_IDS = 20
MAX_DIAGNOSTIC = 500

STATUS_PARTS = ("message/delivery-status", "message/global-delivery-status")
RETURNED_MESSAGES = ("message/rfc822", "message/global")
RETURNED_HEADERS = ("text/rfc822-headers", "message/global-headers")
FAILED = "failed"
DELAYED = "delayed"


@dataclass(frozen=True)
class Recipient:
    """One recipient of the returned message, as the report describes its delivery."""

    address: str
    """Final-Recipient (else Original-Recipient), lower-cased; "" when the report gives none."""
    action: str
    """RFC 3464 §2.3.3: failed, delayed, delivered, relayed or expanded."""
    status: str | None = None
    """The enhanced status code (RFC 3463), e.g. ``5.1.1``."""
    diagnostic: str | None = None
    """What the remote server said, e.g. ``550 5.1.1 <ann@example.org>: User unknown``."""
    original: str | None = None
    """Original-Recipient, when given."""

    @property
    def why(self) -> str:
        """The reason in one line, the best the report gives."""
        return self.diagnostic or (f"status {self.status}" if self.status else self.action)


@dataclass(frozen=True)
class DeliveryReport:
    """A bounce (or a delay warning) read from a message."""

    format: str
    """rfc3464, or the free-text kind recognised: exim, gmail, exchange, qmail, text."""
    recipients: tuple[Recipient, ...]
    message_ids: tuple[str, ...]
    """Message-IDs the returned message may have, the most reliable first."""
    reporting_mta: str | None = None

    @property
    def failed(self) -> tuple[Recipient, ...]:
        return tuple(r for r in self.recipients if r.action == FAILED)

    @property
    def is_failure(self) -> bool:
        """True when at least one recipient failed for good (not merely delayed)."""
        return bool(self.failed)

    @property
    def why(self) -> str:
        """The first failed recipient's reason ("" when none failed)."""
        return self.failed[0].why if self.failed else ""


def parse_dsn(raw: bytes) -> DeliveryReport | None:
    """The delivery report in ``raw``, or None when it is not a bounce. Never raises."""
    try:
        head = email.parser.BytesHeaderParser().parsebytes(raw[:65536])
        if not (
            head.get_content_type() == "multipart/report"
            or "X-Failed-Recipients" in head
            or _from_a_daemon(head)
        ):
            return None  # not a bounce: spare the whole parse (lists, vacation replies)
        msg = email.message_from_bytes(raw[:MAX_BYTES])
        return _report(msg)
    except Exception:  # hostile or broken mail is simply not a bounce we can use
        return None


# -- the report ---------------------------------------------------------------------------


def _report(msg: Message) -> DeliveryReport | None:
    param = msg.get_param("report-type", header="content-type")
    report_type = param.strip().lower() if isinstance(param, str) else ""
    if msg.get_content_type() == "multipart/report" and report_type not in (
        "",
        "delivery-status",
        "global-delivery-status",
    ):
        return None  # read receipts (disposition-notification), abuse reports (feedback-report)
    status_parts: list[Message] = []
    returned: list[Message] = []
    texts: list[str] = []
    for part in _leaves(msg):
        kind = part.get_content_type()
        if kind in STATUS_PARTS:
            status_parts.append(part)
        elif kind in RETURNED_MESSAGES or kind in RETURNED_HEADERS:
            head = _returned_headers(part)
            if head is not None:
                returned.append(head)
        elif kind == "text/plain" and not _is_attachment(part) and len(texts) < 3:
            texts.append(_text(part))
    ids = _ids_of_returned(returned)
    if status_parts:
        mta, recipients = _status_fields(status_parts)
        if recipients:
            ids += _text_ids(texts)
            return DeliveryReport("rfc3464", recipients, _finish_ids(ids, msg), mta)
    return _free_text(msg, texts, ids)


def _leaves(msg: Message, depth: int = 0) -> Iterator[Message]:
    """Leaf parts, depth-first; a returned message is one leaf (never searched inside, so
    a bounce quoted in a returned message is not read as this one's report)."""
    count = 0
    stack: list[tuple[Message, int]] = [(msg, depth)]
    while stack and count < MAX_PARTS:
        part, level = stack.pop()
        count += 1
        if part.get_content_maintype() == "multipart" and level < MAX_DEPTH:
            payload = part.get_payload()
            if isinstance(payload, list):
                stack.extend((p, level + 1) for p in reversed(payload) if isinstance(p, Message))
            continue
        yield part


def _is_attachment(part: Message) -> bool:
    return str(part.get("Content-Disposition", "")).lower().startswith("attachment")


ENCODED = ("base64", "quoted-printable")


def _encoding(part: Message) -> str:
    return str(part.get("Content-Transfer-Encoding", "")).strip().lower()


def _decoded(data: bytes, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError):
            return data
    if encoding == "quoted-printable":
        return quopri.decodestring(data)
    return data


def _part_bytes(part: Message) -> bytes:
    """A leaf's content with its transfer encoding undone. The parser reads a message/*
    part as a message even when an MTA base64-encoded it: then the encoded text is the
    body of a header-less message, and is decoded here."""
    payload = part.get_payload()
    if isinstance(payload, list):
        inner = payload[0] if payload and isinstance(payload[0], Message) else None
        if inner is None:
            return b""
        if _encoding(part) not in ENCODED:
            return inner.as_bytes()
        payload = inner.get_payload()
    data = payload.encode("latin-1", "replace") if isinstance(payload, str) else b""
    return _decoded(data, _encoding(part))


def _text(part: Message) -> str:
    data = _part_bytes(part)
    charset = part.get_content_charset() or "utf-8"
    try:
        return data.decode(charset, "replace")
    except LookupError:
        return data.decode("utf-8", "replace")


def _returned_headers(part: Message) -> Message | None:
    """The headers of the message a bounce returns (whole or headers only)."""
    payload = part.get_payload()
    if isinstance(payload, list) and _encoding(part) not in ENCODED:
        first = payload[0] if payload else None
        return first if isinstance(first, Message) else None
    data = _part_bytes(part).replace(b"\r\n", b"\n")
    return email.parser.BytesHeaderParser().parsebytes(data.split(b"\n\n", 1)[0])


# -- message/delivery-status --------------------------------------------------------------


def _status_fields(parts: list[Message]) -> tuple[str | None, tuple[Recipient, ...]]:
    mta: str | None = None
    recipients: list[Recipient] = []
    for part in parts:
        blocks = _field_blocks(part)
        for index, fields in enumerate(blocks):
            if "reporting-mta" in fields and mta is None:
                mta = _typed_value(fields["reporting-mta"])
            if index == 0 and "final-recipient" not in fields and "action" not in fields:
                continue  # the per-message fields (RFC 3464 §2.2)
            recipient = _recipient(fields)
            if recipient is not None:
                recipients.append(recipient)
    return mta, tuple(recipients[:50])


def _field_blocks(part: Message) -> list[dict[str, str]]:
    """The blank-line-separated groups of ``Name: value`` fields, names lower-cased."""
    payload = part.get_payload()
    if (  # the parser splits message/delivery-status into blocks (not the RFC 6533 form)
        part.get_content_type() == "message/delivery-status"
        and isinstance(payload, list)
        and _encoding(part) not in ENCODED
    ):
        return [
            {str(k).lower(): _unfold(str(v)) for k, v in block.items()}
            for block in payload[:60]
            if isinstance(block, Message)
        ]
    return _parse_blocks(_part_bytes(part).decode("utf-8", "replace"))


def _parse_blocks(text: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    name = ""
    for line in text.splitlines()[:2000]:
        if not line.strip():
            if current:
                blocks.append(current)
            current, name = {}, ""
        elif line[0] in " \t" and name:
            current[name] += " " + line.strip()
        elif ":" in line:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            current.setdefault(name, value.strip())
    if current:
        blocks.append(current)
    return blocks


def _recipient(fields: dict[str, str]) -> Recipient | None:
    final = _address(fields.get("final-recipient", ""))
    original = _address(fields.get("original-recipient", "")) or None
    action = fields.get("action", "").strip().lower().split(" ")[0]
    if not (final or original) and not action:
        return None
    status = status_code(fields.get("status", ""))
    if not action:  # some MTAs leave it out: the status class says it (RFC 3463)
        action = FAILED if status and status.startswith("5") else DELAYED
    diagnostic = _typed_value(fields.get("diagnostic-code", "")) or None
    return Recipient(
        address=final or original or "",
        action=action[:20],
        status=status,
        diagnostic=_one_line(diagnostic) if diagnostic else None,
        original=original,
    )


def _typed_value(value: str) -> str:
    """``rfc822; ann@example.org`` -> ``ann@example.org`` (the type is optional in practice)."""
    kind, sep, rest = value.partition(";")
    if sep and re.fullmatch(r"\s*[A-Za-z][A-Za-z0-9-]*\s*", kind):
        value = rest
    return _unfold(value)


def _address(value: str) -> str:
    text = _typed_value(value[:1000]).strip().strip("<>").strip()
    if "@" not in text or " " in text or len(text) > 254:
        found = _ADDRESS.search(text)
        text = found.group(0) if found else ""
    return text.lower()


def status_code(value: str) -> str | None:
    """The first enhanced status code (RFC 3463) in ``value``, e.g. ``5.1.1``."""
    found = re.search(r"\b[245]\.\d{1,3}\.\d{1,3}\b", value)
    return found.group(0) if found else None


def _unfold(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip()


def _one_line(value: str) -> str:
    return _unfold(re.sub(r"[\x00-\x1f\x7f]+", " ", value))[:MAX_DIAGNOSTIC]


# -- the returned message's Message-ID ----------------------------------------------------

_MESSAGE_ID = re.compile(r"<[^<>\s@]{1,200}@[^<>\s@]{1,200}>")
_ID_LINE = re.compile(r"(?im)^[ \t>]*message-id:[ \t]*(<[^<>\s@]{1,200}@[^<>\s@]{1,200}>)")
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")


def _ids_of_returned(returned: list[Message]) -> list[str]:
    ids = []
    for head in returned:
        for value in head.get_all("Message-ID") or []:
            found = _MESSAGE_ID.search(str(value))
            if found:
                ids.append(found.group(0))
    return ids


def _text_ids(texts: list[str]) -> list[str]:
    """Message-ID lines of a copy pasted into the text (Exim, qmail, old Gmail, Exchange's
    "Original message headers")."""
    return [m.group(1) for text in texts for m in _ID_LINE.finditer(text[:200_000])]


def _finish_ids(ids: list[str], msg: Message) -> tuple[str, ...]:
    """Add the bounce's own In-Reply-To and References (the fallback), without repeats."""
    for name in ("In-Reply-To", "References"):
        ids += _MESSAGE_ID.findall(str(msg.get(name, "")))[:MAX_IDS]
    seen: dict[str, None] = {}
    for value in ids:
        seen.setdefault(value, None)
    return tuple(seen)[:MAX_IDS]


# -- free-text bounces --------------------------------------------------------------------

_COPY = re.compile(
    r"(?im)^[ \t-]*("
    r"this is a copy of the message|"  # Exim
    r"original message|"  # old Gmail
    r"below this line is a copy of the message|"  # qmail
    r"original message headers|"  # Exchange 2007+
    r"the original message was received|"
    r"returned message|"
    r"message headers follow"
    r")"
)
_FAILURE = re.compile(
    r"(?i)(could not be delivered|following address\(es\) failed|failed permanently|"
    r"permanent (fatal )?error|did not reach the following recipient|"
    r"delivery has failed|undeliverable|unable to deliver|user unknown|"
    r"no such user|mailbox unavailable|recipient address rejected|"
    r"this is the qmail-send program)"
)
_DELAY = re.compile(
    r"(?i)(\bdelayed\b|has not yet been delivered|will (continue|keep) (to )?(try|retry)|"
    r"still trying|not been delivered yet|warning: message)"
)
_CUES = re.compile(
    r"(?i)(following address\(es\) failed|following recipient|following recipients|"
    r"did not reach the following|delivery has failed to these recipients|"
    r"could not be delivered to|unable to deliver to|qmail-send program)"
)
_SMTP_REPLY = re.compile(r"(?:^|[\s:;(])([45]\d\d(?:[ -][245]\.\d{1,3}\.\d{1,3})?\b[^\n]*)")
_DAEMONS = ("mailer-daemon", "postmaster", "mail-daemon", "maildaemon")


def _free_text(msg: Message, texts: list[str], ids: list[str]) -> DeliveryReport | None:
    failed_header = str(msg.get("X-Failed-Recipients", ""))[:2000]
    subject = _unfold(str(msg.get("Subject", "")))
    if not texts and not msg.is_multipart():
        texts = [_text(msg)]
    human = ""
    for text in texts:
        copy = _COPY.search(text)
        human += (text[: copy.start()] if copy else text)[:50_000] + "\n"
    if not failed_header and not _from_a_daemon(msg):
        return None
    if not failed_header and not _FAILURE.search(human + " " + subject):
        return None
    delayed = bool(_DELAY.search(subject) or _DELAY.search(human)) and not re.search(
        r"(?i)permanent|failed permanently|could not be delivered", human
    )
    action = DELAYED if delayed else FAILED
    addresses = [a.lower() for _name, a in getaddresses([failed_header]) if "@" in a]
    if not addresses:
        addresses = _cued_addresses(human, str(msg.get("To", "")))
    reply = _SMTP_REPLY.search(human)
    diagnostic = _one_line(reply.group(1)) if reply else _reason_after(human, addresses)
    status = status_code(diagnostic or "")
    recipients = tuple(
        Recipient(address=a, action=action, status=status, diagnostic=diagnostic)
        for a in dict.fromkeys(addresses)
    ) or (Recipient(address="", action=action, status=status, diagnostic=diagnostic),)
    ids += _text_ids(texts)
    return DeliveryReport(_kind(human), recipients[:50], _finish_ids(ids, msg))


def _from_a_daemon(msg: Message) -> bool:
    if str(msg.get("Return-Path", "")).replace(" ", "") == "<>":
        return True
    sender = str(msg.get("From", "")).lower()
    return any(name in sender for name in _DAEMONS)


def _cued_addresses(human: str, to: str) -> list[str]:
    """Addresses in the lines after a "the following recipients failed" cue (ours, in
    To, left out)."""
    ours = {a.lower() for _n, a in getaddresses([to])}
    lines = [line[:1000] for line in human.splitlines()]  # the pattern is quadratic in a line
    found: list[str] = []
    for index, line in enumerate(lines):
        if _CUES.search(line):
            for follow in lines[index : index + 12]:
                found += [a.lower() for a in _ADDRESS.findall(follow.replace("mailto:", " "))]
    return [a for a in found if a not in ours][:50]


def _reason_after(human: str, addresses: list[str]) -> str | None:
    """No SMTP reply quoted (Exchange 5.5/2003): the line after the first failed address."""
    lines = [line.strip() for line in human.splitlines()]
    cue = next((i for i, line in enumerate(lines) if _CUES.search(line)), 0)
    for index, line in enumerate(lines[cue:], start=cue):
        if addresses and addresses[0] in line.lower():
            for follow in lines[index + 1 : index + 3]:
                if follow and "@" not in follow:
                    return _one_line(follow)
            return None
    return None


def _kind(human: str) -> str:
    lowered = human.lower()
    if "following address(es) failed" in lowered:
        return "exim"
    if "qmail-send program" in lowered:
        return "qmail"
    if "failed permanently" in lowered:
        return "gmail"
    if "did not reach the following recipient" in lowered or "microsoft exchange" in lowered:
        return "exchange"
    return "text"
