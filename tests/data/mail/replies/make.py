"""Write the reply corpus of this folder from languages.toml (issue 20).

    .venv/bin/python tests/data/mail/replies/make.py

For each row of the table, four replies in which Ann top-posts new orders (DICE 2) above
an old message whose orders are not to count:

- ``<code>_outlook.eml``: Outlook or OWA plain text in the language's legacy charset and
  transfer encoding, the header block straight after her text (no rule line);
- ``<code>_rule.eml``: the same in UTF-8, with the rule of underscores new Outlook
  writes above the block;
- ``<code>_gmail.eml``: Gmail, multipart/alternative, the attribution line in the
  language, the old message quoted with ``> `` (and in a blockquote in the HTML);
- ``<code>_yahoo.eml``: Yahoo Mail, multipart/alternative, whose plain part has the
  attribution line and below it the old message NOT marked as quoted.

The output is deterministic: tests/mail/test_reply_languages.py checks that the files
are what this script writes, and imports it for the bodies.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import sys
import textwrap
import tomllib
from email import quoprimime
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
TABLE = HERE / "languages.toml"
RULE = "_" * 32
REFEREE = "Snakes and Ladders referee <snl@example.org>"
OLD = {
    "ann": ("Ann Lee", "ann@example.org", "KEY ann-key-123", "DICE 4"),
    "cy": ("Cy Young", "cy@example.org", "KEY cy-key-123", "DICE 6"),
}


def rows() -> list[dict[str, Any]]:
    with TABLE.open("rb") as f:
        return list(tomllib.load(f)["row"])


def new_text(row: dict[str, Any]) -> list[str]:
    """What Ann writes now."""
    return [row["new"], "", "GAME g1", "KEY ann-key-123", "DICE 2", "", row["thanks"], ""]


def old_text(row: dict[str, Any]) -> list[str]:
    """The old message's text: orders that must not count."""
    _name, _address, key, dice = OLD[row.get("quoted", "ann")]
    return [row["old"], "", "GAME g1", key, dice, "TRAPDOOR 12", "", row["thanks"]]


def header_block(row: dict[str, Any]) -> list[str]:
    """The old message's header block as Outlook writes it in plain text."""
    name, address, _key, _dice = OLD[row.get("quoted", "ann")]
    style = row.get("from_style", "addr")
    sender = {
        "addr": f"{name} <{address}>",
        "mailto": f"{name} [mailto:{address}]",
        "name": name,
    }[style]
    to = REFEREE if row.get("quoted", "ann") == "ann" else f"Ann Lee <ann@example.org>; {REFEREE}"
    from_label, sent_label, to_label, subject_label = row["labels"]
    fields = [(from_label, sender), (sent_label, row["date"]), (to_label, to)]
    if "cc" in row:
        fields.append((row["cc"], "Bob Brown <bob@example.org>"))
    fields.append((subject_label, "[g1] orders"))
    colon = row.get("colon", ": ")
    if row.get("bold"):
        return [f"*{label}{colon.rstrip()}* {value}" for label, value in fields]
    return [f"{label}{colon}{value}" for label, value in fields]


def outlook_body(row: dict[str, Any], rule: bool = False, separator: bool = False) -> str:
    """Outlook's plain-text reply: the new text, (a rule or separator line,) the header
    block, a blank line and the old message, none of it marked as quoted."""
    lines = new_text(row)
    if rule:
        lines.append(RULE)
    if separator:
        lines.append(row["separator"])
    lines += [*header_block(row), "", *old_text(row)]
    return "\r\n".join(lines) + "\r\n"


def wrapped_attribution(row: dict[str, Any]) -> list[str]:
    """Gmail's attribution line, hard-wrapped as its plain text is (at 76 characters)."""
    return textwrap.wrap(row["attribution"], 76, break_long_words=False, break_on_hyphens=False)


def gmail_body(row: dict[str, Any]) -> str:
    lines = new_text(row) + wrapped_attribution(row) + [""]
    lines += [f"> {line}" if line else ">" for line in old_text(row)]
    return "\r\n".join(lines) + "\r\n"


def gmail_html(row: dict[str, Any]) -> str:
    new = "".join(f"<div>{html.escape(x)}</div>" if x else "<div><br></div>" for x in new_text(row))
    old = "<br>".join(html.escape(x) for x in old_text(row))
    return (
        f'<div dir="ltr">{new}</div><br><div class="gmail_quote gmail_quote_container">'
        f'<div dir="ltr" class="gmail_attr">{html.escape(row["attribution"])}<br></div>'
        '<blockquote class="gmail_quote" style="margin:0px 0px 0px 0.8ex;border-left:1px '
        f'solid rgb(204,204,204);padding-left:1ex"><div dir="ltr">{old}</div></blockquote>'
        "</div>\r\n"
    )


def codec(charset: str) -> str:
    """Python's name for a charset as clients label it (windows-874 is cp874)."""
    return re.sub(r"^windows-(\d+)$", r"cp\1", charset)


def encode_body(text: str, charset: str, cte: str) -> bytes:
    if charset == "iso-2022-jp":  # each line returns to ASCII, as Outlook writes it
        return b"\r\n".join(line.encode("iso-2022-jp") for line in text.split("\r\n"))
    data = text.encode(codec(charset))
    if cte == "base64":
        return base64.encodebytes(data).replace(b"\n", b"\r\n")
    if cte == "quoted-printable":
        lines = data.decode("latin-1").split("\r\n")
        return "\r\n".join(quoprimime.body_encode(x, 76) for x in lines).encode("ascii")
    return data


def encoded_word(text: str, charset: str) -> str:
    if text.isascii():
        return text
    data = text.encode(codec(charset))
    return f"=?{charset}?B?{base64.b64encode(data).decode('ascii')}?="


def digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def outlook_message(row: dict[str, Any], utf8_rule: bool) -> bytes:
    charset, cte = ("utf-8", _utf8_cte(row)) if utf8_rule else (row["charset"], row["cte"])
    tag = digest(row["code"], str(utf8_rule))
    headers = [
        "From: Ann Lee <ann@example.org>",
        "To: \"'Snakes and Ladders referee'\" <snl@example.org>",
        f"Subject: {encoded_word(row['re'] + '[g1] orders', charset)}",
        "Date: Tue, 1 Dec 2026 08:12:00 +0000",
        f"Message-ID: <000001{tag[:6]}${tag[6:14]}${tag[14:22]}$@example.org>",
        "MIME-Version: 1.0",
        "Content-Type: text/plain;",
        f'\tcharset="{charset}"',
        f"Content-Transfer-Encoding: {cte}",
        "X-Mailer: Microsoft Outlook 16.0",
        f"Thread-Index: AQH{base64.b64encode(bytes.fromhex(tag[:24])).decode()}",
        f"Content-Language: {row['code']}",
    ]
    body = encode_body(outlook_body(row, rule=utf8_rule), charset, cte)
    return "\r\n".join(headers).encode("ascii") + b"\r\n\r\n" + body


def _utf8_cte(row: dict[str, Any]) -> str:
    """New Outlook's choice: base64 for a text mostly not in Latin letters, else QP."""
    sample = row["new"] + row["old"]
    latin = sum(1 for ch in sample if ch.isascii() or "\u00c0" <= ch <= "\u024f")
    return "quoted-printable" if latin * 2 > len(sample) else "base64"


def gmail_message(row: dict[str, Any]) -> bytes:
    tag = digest(row["code"], "gmail")
    boundary = "0000000000" + tag[:18]
    cte = _utf8_cte(row)
    plain = encode_body(gmail_body(row), "utf-8", cte)
    rich = encode_body(gmail_html(row), "utf-8", cte)
    headers = [
        "MIME-Version: 1.0",
        f"References: <old.{tag[:12]}@example.org>",
        f"In-Reply-To: <old.{tag[:12]}@example.org>",
        "From: Ann Lee <ann@example.org>",
        "Date: Tue, 1 Dec 2026 09:12:00 +0000",
        f"Message-ID: <CAF{tag[12:40]}@mail.gmail.com>",
        f"Subject: {encoded_word('Re: [g1] orders', 'utf-8')}",
        f"To: {REFEREE}",
        f'Content-Type: multipart/alternative; boundary="{boundary}"',
    ]
    parts = [
        f'--{boundary}\r\nContent-Type: text/plain; charset="UTF-8"\r\n'
        f"Content-Transfer-Encoding: {cte}\r\n\r\n".encode()
        + plain,
        f'--{boundary}\r\nContent-Type: text/html; charset="UTF-8"\r\n'
        f"Content-Transfer-Encoding: {cte}\r\n\r\n".encode()
        + rich,
    ]
    return (
        "\r\n".join(headers).encode("ascii")
        + b"\r\n\r\n"
        + b"\r\n".join(parts)
        + f"\r\n--{boundary}--\r\n".encode()
    )


def yahoo_body(row: dict[str, Any]) -> str:
    """Yahoo Mail's plain part: the attribution indented on one line, the old message
    below it not marked as quoted at all."""
    lines = [*new_text(row), f"    {row['attribution']}  ", " ", *(f" {x}" for x in old_text(row))]
    return "\r\n".join(lines) + "\r\n"


def yahoo_html(row: dict[str, Any]) -> str:
    new = "".join(f"<div>{html.escape(x)}</div>" if x else "<div><br></div>" for x in new_text(row))
    old = "".join(f"<div>{html.escape(x)}</div>" if x else "<div><br></div>" for x in old_text(row))
    return (
        '<html><head></head><body><div class="ydp5e1f2c3byahoo-style-wrap" style="font-family:'
        f'Helvetica Neue, Helvetica, Arial, sans-serif;font-size:13px;">{new}</div>'
        '<div id="ydp9f1e0yahoo_quoted_4312" class="ydp9f1e0yahoo_quoted"><div style="font-'
        f'family:Helvetica Neue, Helvetica, Arial, sans-serif;font-size:13px;color:#26282a;">'
        f"<div>{html.escape(row['attribution'])}</div><div><br></div>{old}</div></div>"
        "</body></html>\r\n"
    )


def yahoo_message(row: dict[str, Any]) -> bytes:
    tag = digest(row["code"], "yahoo")
    boundary = f"----=_Part_{int(tag[:7], 16)}_{int(tag[7:14], 16)}.1764580320122"
    cte = _utf8_cte(row)
    headers = [
        "Date: Tue, 1 Dec 2026 09:12:00 +0000 (UTC)",
        "From: Ann Lee <ann@example.org>",
        f"To: {REFEREE}",
        f"Message-ID: <{int(tag[14:24], 16)}.{int(tag[24:31], 16)}.1764580320123@mail.yahoo.com>",
        f"Subject: {encoded_word('Re: [g1] orders', 'utf-8')}",
        "MIME-Version: 1.0",
        "Content-Type: multipart/alternative; ",
        f'\tboundary="{boundary}"',
        "X-Mailer: WebService/1.1.24652 YMailNorrin",
    ]
    parts = [
        f"--{boundary}\r\nContent-Type: text/plain; charset=UTF-8\r\n"
        f"Content-Transfer-Encoding: {cte}\r\n\r\n".encode()
        + encode_body(yahoo_body(row), "utf-8", cte),
        f"--{boundary}\r\nContent-Type: text/html; charset=UTF-8\r\n"
        f"Content-Transfer-Encoding: {cte}\r\n\r\n".encode()
        + encode_body(yahoo_html(row), "utf-8", cte),
    ]
    return (
        "\r\n".join(headers).encode("ascii")
        + b"\r\n\r\n"
        + b"\r\n".join(parts)
        + f"\r\n--{boundary}--\r\n".encode()
    )


def build(row: dict[str, Any]) -> dict[str, bytes]:
    """The files of one row, by name."""
    code = row["code"]
    return {
        f"{code}_outlook.eml": outlook_message(row, utf8_rule=False),
        f"{code}_rule.eml": outlook_message(row, utf8_rule=True),
        f"{code}_gmail.eml": gmail_message(row),
        f"{code}_yahoo.eml": yahoo_message(row),
    }


def main() -> int:
    for row in rows():
        for name, data in build(row).items():
            (HERE / name).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
