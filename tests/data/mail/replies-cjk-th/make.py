"""Write the corpus of this folder: replies as Chinese and Thai mail clients write them
(issue 25).

    .venv/bin/python tests/data/mail/replies-cjk-th/make.py

tests/data/mail/replies/ (issue 20) holds Outlook-style header blocks and Gmail
attribution lines in 29 languages, written from one table. This folder adds the shapes
that the clients most used in China and Thailand write and that table does not: Apple
Mail's and NetEase's "在 ... 写道：" attributions, Gmail's "于...写道：", QQ Mail's block
under "------------------ 原始邮件 ------------------" (its text part as QQ Mail writes
it, with "&nbsp;" and "&gt;" left in, the "发件人:" line padded with spaces and a blank
line before "主题:"), Foxmail's block with full-width colons and the old message right
below it, Outlook's Chinese blocks without ">" marks, and Thai Gmail, Outlook and Apple
Mail, with Gregorian and Buddhist-era years (2569).

In every message Ann writes her new order above (GAME g1, KEY ann-key-123, DICE 2; in the
QQ Mail one typed in full-width letters, as a Chinese input method types them) and the
old message below holds other orders: another die, TRAPDOOR 12 and, in most, cy's KEY.
A reading that let any of the old text through gives another die, a trapdoor, or two
keys (and so nothing applied at all).

The output is deterministic: tests/mail/test_reply_clients_cjk_th.py checks that the
files are what this script writes, and imports it for the cases.
"""

# ruff: noqa: RUF001, RUF002
# (the clients' words as they write them: full-width colons, commas and letters)

from __future__ import annotations

import base64
import html
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from email import quoprimime
from pathlib import Path

HERE = Path(__file__).parent
REFEREE = "Snakes and Ladders referee <snl@example.org>"
RULE = "_" * 32

NEW_ZH = ["你好，", "", "GAME g1", "KEY ann-key-123", "DICE 2", "", "谢谢！", "安"]
NEW_ZH_FULL_WIDTH = [
    "你好，",
    "",
    "ＧＡＭＥ　ｇ１",
    "ＫＥＹ　ａｎｎ－ｋｅｙ－１２３",
    "ＤＩＣＥ　２",
    "",
    "谢谢！",
]
"""What a Chinese input method types when left in full-width mode (U+FF01-U+FF5E, and the
ideographic space U+3000)."""
NEW_TH = ["สวัสดีค่ะ", "", "GAME g1", "KEY ann-key-123", "DICE 2", "", "ขอบคุณค่ะ", "แอน"]
OLD_ZH_CY = [
    "这是本轮的指令。",
    "",
    "GAME g1",
    "KEY cy-key-123",
    "DICE 6",
    "TRAPDOOR 12",
    "",
    "谢谢！",
]
OLD_ZH_ANN = ["这是本轮的指令。", "", "GAME g1", "KEY ann-key-123", "DICE 4", "TRAPDOOR 12"]
OLD_TH_CY = ["คำสั่งสำหรับรอบนี้", "", "GAME g1", "KEY cy-key-123", "DICE 6", "TRAPDOOR 12"]
OLD_TH_ANN = ["คำสั่งสำหรับรอบนี้", "", "GAME g1", "KEY ann-key-123", "DICE 4", "TRAPDOOR 12"]


@dataclass(frozen=True)
class Case:
    """One client's reply: the file it is written to, and what reading it must show."""

    name: str
    client: str
    new: list[str]
    old: list[str]
    head: list[str]
    """The reply header as the client writes it in the text part: an attribution line, or
    a separator and a header block (what the old message follows)."""
    marked: bool
    """The old message (and in some clients the header too) is quoted with ``> ``."""
    cut: str | None
    """The line where reading stops, as the reply names it (None: a marked quote, read
    past)."""
    write: Callable[[Case], bytes] = field(repr=False)
    below_head: list[str] = field(default_factory=lambda: [""])
    """What the client puts between the header and the old message."""
    above_head: list[str] = field(default_factory=lambda: [""])
    """What the client puts between the new text and the header."""

    def text(self) -> str:
        """The plain-text part, CRLF lines."""
        old = [f"> {x}" if x else ">" for x in self.old] if self.marked else self.old
        lines = [*self.new, *self.above_head, *self.head, *self.below_head, *old]
        return "\r\n".join(lines) + "\r\n"


# -- transfer encodings as the clients write them ----------------------------------------


def b64(data: bytes) -> bytes:
    """base64 in lines of 76 characters, CRLF."""
    return base64.encodebytes(data).replace(b"\n", b"\r\n")


def qp(data: bytes) -> bytes:
    lines = data.decode("latin-1").split("\r\n")
    return "\r\n".join(quoprimime.body_encode(x, 76) for x in lines).encode("ascii")


def encoded(data: bytes, cte: str) -> bytes:
    return b64(data) if cte == "base64" else qp(data) if cte == "quoted-printable" else data


def word(text: str, charset: str, codec: str = "") -> str:
    """An RFC 2047 encoded word (base64), or the text when it is ASCII."""
    if text.isascii():
        return text
    data = text.encode(codec or charset)
    return f"=?{charset}?B?{base64.b64encode(data).decode('ascii')}?="


def message(headers: list[str], body: bytes) -> bytes:
    return "\r\n".join(headers).encode("ascii") + b"\r\n\r\n" + body


def alternative(
    headers: list[str], boundary: str, parts: list[tuple[str, str, bytes]], preamble: str = ""
) -> bytes:
    """multipart/alternative: ``parts`` are (content type line, transfer encoding, body)."""
    body = preamble.encode("ascii")
    for content_type, cte, data in parts:
        body += (
            f"--{boundary}\r\nContent-Type: {content_type}\r\n"
            f"Content-Transfer-Encoding: {cte}\r\n\r\n"
        ).encode("ascii") + data
        body += b"\r\n"
    body += f"--{boundary}--\r\n".encode("ascii")
    return message(headers, body)


def html_lines(lines: list[str]) -> str:
    return "".join(f"<div>{html.escape(x)}</div>" if x else "<div><br></div>" for x in lines)


# -- Apple Mail (macOS and iOS) -----------------------------------------------------------


def apple_mail(case: Case) -> bytes:
    """macOS Mail: multipart/alternative, quoted-printable UTF-8; the attribution line is
    not marked, the old message is, and in the HTML it is a <blockquote type="cite">."""
    boundary = "Apple-Mail=_5F3A9C1E-2B7D-4E8F-A1C3-" + case.name.upper().replace("-", "")[:12]
    plain = qp(case.text().encode("utf-8"))
    rich = (
        '<html><head><meta http-equiv="content-type" content="text/html; charset=utf-8">'
        '</head><body style="overflow-wrap: break-word; -webkit-nbsp-mode: space; '
        f'line-break: after-white-space;">{html_lines(case.new)}<div><br>'
        f'<blockquote type="cite"><div>{html.escape(case.head[0])}</div><br>'
        f"<div><div>{html_lines(case.old)}</div></div></blockquote></div><br></body></html>"
    )
    headers = [
        "From: Ann Lee <ann@example.org>",
        f'Content-Type: multipart/alternative;\r\n\tboundary="{boundary}"',
        "Mime-Version: 1.0 (Mac OS X Mail 16.0 \\(3826.300.87.4.3\\))",
        f"Subject: {word('回复：[g1] orders', 'utf-8')}",
        "Date: Tue, 1 Dec 2026 15:21:07 +0800",
        "References: <old.apple@example.org>",
        f"To: {REFEREE}",
        "In-Reply-To: <old.apple@example.org>",
        f"Message-Id: <8F2C1D3E-6B4A-4C2E-9D71-{case.name.upper()[:12]:X<12}@example.org>",
        "X-Mailer: Apple Mail (2.3826.300.87.4.3)",
    ]
    return alternative(
        headers,
        boundary,
        [
            ("text/plain;\r\n\tcharset=utf-8", "quoted-printable", plain),
            ("text/html;\r\n\tcharset=utf-8", "quoted-printable", qp(rich.encode("utf-8"))),
        ],
    )


def iphone_mail(case: Case) -> bytes:
    """iOS Mail: one text/plain part, base64 UTF-8 when it is not ASCII; the attribution
    line is quoted with the old message, below "发自我的iPhone"."""
    headers = [
        "Content-Type: text/plain;\r\n\tcharset=utf-8",
        "Content-Transfer-Encoding: base64",
        "From: Ann Lee <ann@example.org>",
        "Mime-Version: 1.0 (1.0)",
        "Date: Tue, 1 Dec 2026 15:21:07 +0800",
        f"Subject: {word('回复：[g1] orders', 'utf-8')}",
        "Message-Id: <3B9E1C2D-7A4F-4D1E-8C6B-0F2A3E4D5C6B@example.org>",
        "References: <old.iphone@example.org>",
        "In-Reply-To: <old.iphone@example.org>",
        f"To: {REFEREE}",
        "X-Mailer: iPhone Mail (22B91)",
    ]
    return message(headers, b64(case.text().encode("utf-8")))


# -- Gmail --------------------------------------------------------------------------------


def gmail(case: Case) -> bytes:
    """Gmail: multipart/alternative, base64 UTF-8; the attribution line, a blank line and
    the old message quoted with "> " (in the HTML a gmail_quote blockquote)."""
    boundary = "000000000000a1b2c3d4e5f6" + case.name[-6:].replace("-", "0")
    rich = (
        f'<div dir="ltr">{html_lines(case.new)}</div><br>'
        '<div class="gmail_quote gmail_quote_container"><div dir="ltr" class="gmail_attr">'
        f"{html.escape(case.head[0])}<br></div>"
        '<blockquote class="gmail_quote" style="margin:0px 0px 0px 0.8ex;border-left:1px '
        'solid rgb(204,204,204);padding-left:1ex"><div dir="ltr">'
        f"{'<br>'.join(html.escape(x) for x in case.old)}</div></blockquote></div>\r\n"
    )
    headers = [
        "MIME-Version: 1.0",
        "References: <old.gmail@example.org>",
        "In-Reply-To: <old.gmail@example.org>",
        "From: Ann Lee <ann@example.org>",
        "Date: Tue, 1 Dec 2026 15:21:07 +0800",
        f"Message-ID: <CAF7{case.name.replace('-', '').upper():x<20}Qm9vdA@mail.gmail.com>",
        f"Subject: {word('Re: [g1] orders', 'utf-8')}",
        f"To: {REFEREE}",
        f'Content-Type: multipart/alternative; boundary="{boundary}"',
    ]
    return alternative(
        headers,
        boundary,
        [
            ('text/plain; charset="UTF-8"', "base64", b64(case.text().encode("utf-8"))),
            ('text/html; charset="UTF-8"', "base64", b64(rich.encode("utf-8"))),
        ],
    )


# -- NetEase (163.com, 126.com: Coremail) -----------------------------------------------


def netease(case: Case) -> bytes:
    """NetEase Mail (Coremail): multipart/alternative in GBK, base64; "在 <date>，"Name"
    <address> 写道：" and the old message quoted with "> "."""
    boundary = "----=_Part_123456_789012345.1764573667890"
    rich = (
        f'<div style="line-height:1.7;color:#000000;font-size:14px;font-family:Arial">'
        f"{html_lines(case.new)}</div><br><br>"
        '<div style="position:relative;zoom:1"></div><div id="divNeteaseMailCard"></div><br>'
        f"<pre><br>{html.escape(case.head[0])}<br>"
        f"{'<br>'.join('&gt; ' + html.escape(x) for x in case.old)}<br></pre>"
    )
    headers = [
        "Date: Tue, 1 Dec 2026 15:21:07 +0800 (CST)",
        "From: Ann Lee <ann@example.org>",
        f"To: {REFEREE}",
        "Message-ID: <6f1e2d3c.4b5a.19a7c8d9e0f.Coremail.ann@example.org>",
        "In-Reply-To: <old.netease@example.org>",
        "References: <old.netease@example.org>",
        f"Subject: {word('Re:[g1] orders', 'GBK')}",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/alternative; \r\n\tboundary="{boundary}"',
        "X-Originating-IP: [198.51.100.7]",
        "X-Priority: 3",
        "X-Mailer: Coremail Webmail Server Version XT5.0.14 build 20230606(113bd4e2)",
        "X-NTES-SC: AL_Qu2cAf+YvE4r5iSbZukfmkcQ",
    ]
    return alternative(
        headers,
        boundary,
        [
            ("text/plain; charset=GBK", "base64", b64(case.text().encode("gbk"))),
            ("text/html; charset=GBK", "base64", b64(rich.encode("gbk"))),
        ],
    )


# -- QQ Mail ------------------------------------------------------------------------------


QQ_PAD_FROM = " " * 120
QQ_PAD_NAME = " " * 84


def qq_head(plain_as_web: bool) -> list[str]:
    """QQ Mail's header block. Its web client's text part is made from its HTML and keeps
    "&nbsp;" and "&gt;" as they were, pads the "发件人:" line with spaces, and leaves an
    empty line where a "抄送:" line would be; the rendered form (the brief's) has spaces."""
    if plain_as_web:
        return [
            "------------------&nbsp;原始邮件&nbsp;------------------",
            f'发件人:{QQ_PAD_FROM}"Cy Young"{QQ_PAD_NAME}<cy@example.org&gt;;',
            "发送时间:&nbsp;2026年12月1日(星期二) 下午3:05",
            '收件人:&nbsp;"Snakes and Ladders referee"<snl@example.org&gt;;',
            "",
            "主题:&nbsp;[g1] orders",
        ]
    return [
        "------------------ 原始邮件 ------------------",
        '发件人: "Cy Young"<cy@example.org>;',
        "发送时间: 2026年12月1日(星期二) 下午3:05",
        '收件人: "Snakes and Ladders referee"<snl@example.org>;',
        "主题: [g1] orders",
    ]


def qq_mail(case: Case) -> bytes:
    """QQ Mail (web): multipart/alternative, GB18030, base64; no ">" anywhere: the old
    message below the grey header block."""
    boundary = "----=_NextPart_674C0E23_0A1B2C3D_5E6F7A8B"
    rich = (
        f'<meta http-equiv="Content-Type" content="text/html; charset=GB18030">'
        f"{html_lines(case.new)}<div><br></div><div><br></div>"
        '<div style="font-size: 12px;font-family: Arial Narrow;padding:2px 0 2px 0;">'
        "------------------&nbsp;原始邮件&nbsp;------------------</div>"
        '<div style="font-size: 12px;background:#efefef;padding:8px;">'
        '<div><b>发件人:</b>&nbsp;"Cy Young"&lt;cy@example.org&gt;;</div>'
        "<div><b>发送时间:</b>&nbsp;2026年12月1日(星期二) 下午3:05</div>"
        '<div><b>收件人:</b>&nbsp;"Snakes and Ladders referee"&lt;snl@example.org&gt;;<wbr></div>'
        "<div></div><div><b>主题:</b>&nbsp;[g1] orders</div></div><div>&nbsp;</div>"
        f"{html_lines(case.old)}"
    )
    headers = [
        "X-QQ-FEAT: 3C1ExcAbt6fm9hb3yq4pOXyx1W2QT2l8",
        "X-QQ-SSF: 00000000000000F000000000000000Z",
        "X-QQ-XMAILINFO: NQR8mRxMnur9Ru5ajWb1hLp9bTfGb1z+1gSg",
        "X-QQ-mid: webmail812t1764573667t5307321",
        'From: "=?gb18030?B?sLI=?=" <ann@example.org>',
        f'To: "=?gb18030?B?{base64.b64encode("裁判".encode("gb18030")).decode()}?=" '
        "<snl@example.org>",
        f"Subject: {word('回复：[g1] orders', 'gb18030')}",
        "Mime-Version: 1.0",
        "Content-Type: multipart/alternative;",
        f'\tboundary="{boundary}"',
        "Content-Transfer-Encoding: 8Bit",
        "Date: Tue, 1 Dec 2026 15:21:07 +0800",
        "X-Priority: 3",
        "Message-ID: <tencent_0A1B2C3D4E5F60718293A4B5C6D7E8F9A00B@qq.com>",
        "X-QQ-MIME: TCMime 1.0 by Tencent",
        "X-Mailer: QQMail 2.x",
        "X-QQ-Mailer: QQMail 2.x",
    ]
    return alternative(
        headers,
        boundary,
        [
            ('text/plain;\r\n\tcharset="gb18030"', "base64", b64(case.text().encode("gb18030"))),
            ('text/html;\r\n\tcharset="gb18030"', "base64", b64(rich.encode("gb18030"))),
        ],
        preamble="This is a multi-part message in MIME format.\r\n\r\n",
    )


# -- Foxmail ------------------------------------------------------------------------------


def foxmail(case: Case) -> bytes:
    """Foxmail 7.2: multipart/alternative, GB2312, base64. Below the signature a line of
    one space, then the block with full-width colons (names only, as Foxmail shows them)
    and the old message straight below it: no rule, no blank line, no ">"."""
    boundary = "----=_001_NextPart284716302654_=----"
    rich = (
        '<html><head><meta http-equiv="content-type" content="text/html; charset=GB2312">'
        "<style>body { font-size: 14px; font-family: 'Microsoft YaHei UI'; color: #000000; "
        "line-height: 1.5; }</style></head><body>"
        f'{html_lines(case.new)}<hr style="width: 210px; height: 1px;" color="#b5c4df" '
        'size="1" align="left"><div><span><div style="MARGIN: 10px; FONT-FAMILY: verdana; '
        'FONT-SIZE: 10pt"><div>ann@example.org</div></div></span></div><blockquote '
        'style="margin-Top: 0px; margin-Bottom: 0px; margin-Left: 0.5em; margin-Right: '
        'inherit"><div>&nbsp;</div><div style="border:none;border-top:solid #B5C4DF 1.0pt;'
        'padding:3.0pt 0cm 0cm 0cm"><div style="PADDING-RIGHT: 8px; PADDING-LEFT: 8px; '
        "FONT-SIZE: 12px;FONT-FAMILY:tahoma;COLOR:#000000; BACKGROUND: #efefef; "
        'PADDING-BOTTOM: 8px; PADDING-TOP: 8px">'
    )
    rich += "".join(
        f"<div><b>{html.escape(label)}：</b>&nbsp;{html.escape(value.strip())}</div>"
        for label, _colon, value in (line.partition("：") for line in case.head if "：" in line)
    )
    rich += f"</div></div><div>{html_lines(case.old)}</div></blockquote></body></html>"
    headers = [
        "Date: Tue, 1 Dec 2026 15:21:07 +0800",
        f'From: "{word("安", "GB2312")}" <ann@example.org>',
        f"To: {REFEREE}",
        f"Subject: {word('回复: [g1] orders', 'GB2312')}",
        "References: <old.foxmail@example.org>",
        "X-Priority: 3",
        "X-GUID: 6A1F2B3C-4D5E-6F70-8192-A3B4C5D6E7F8",
        "X-Has-Attach: no",
        "X-Mailer: Foxmail 7.2.25.375[cn]",
        "Mime-Version: 1.0",
        "Message-ID: <202612011521071234567@example.org>",
        "Content-Type: multipart/alternative;",
        f'\tboundary="{boundary}"',
    ]
    return alternative(
        headers,
        boundary,
        [
            ('text/plain;\r\n\tcharset="GB2312"', "base64", b64(case.text().encode("gb2312"))),
            ('text/html;\r\n\tcharset="GB2312"', "quoted-printable", qp(rich.encode("gb2312"))),
        ],
        preamble="This is a multi-part message in MIME format.\r\n\r\n",
    )


# -- Outlook ------------------------------------------------------------------------------


def outlook(charset: str, cte: str, codec: str, language: str) -> Callable[[Case], bytes]:
    """Outlook (classic or new) in plain text: one text/plain part; the old message is
    not marked as quoted."""

    def write(case: Case) -> bytes:
        subject = {"zh-CN": "答复: [g1] orders", "th-TH": "ตอบกลับ: [g1] orders"}[language]
        headers = [
            "From: Ann Lee <ann@example.org>",
            "To: \"'Snakes and Ladders referee'\" <snl@example.org>",
            f"Subject: {word(subject, charset, codec)}",
            "Date: Tue, 1 Dec 2026 08:21:07 +0000",
            f"Message-ID: <000001db{case.name[-4:].encode().hex()}$5a1b2c3d$0e4f5a6b$@example.org>",
            "MIME-Version: 1.0",
            "Content-Type: text/plain;",
            f'\tcharset="{charset}"',
            f"Content-Transfer-Encoding: {cte}",
            "X-Mailer: Microsoft Outlook 16.0",
            "Thread-Index: AQHbY2Fzc2V0dGVzbmFrZXM=",
            f"Content-Language: {language}",
        ]
        return message(headers, encoded(case.text().encode(codec), cte))

    return write


# -- the cases ----------------------------------------------------------------------------

APPLE_ZH_ADDRESS = "在 2026年12月1日 下午3:05，Ann Lee <ann@example.org> 写道："
APPLE_ZH_NAME = "在 2026年12月1日，ann 写道："
GMAIL_ZH = "Ann Lee <ann@example.org> 于2026年12月1日周二 15:05写道："
NETEASE = '在 2026-12-01 15:05:00，"Ann Lee" <ann@example.org> 写道：'
GMAIL_TH = "เมื่อ อ. 1 ธ.ค. 2026 เวลา 15:05 Ann Lee <ann@example.org> เขียนว่า:"
GMAIL_TH_BE = "เมื่อ อ. 1 ธ.ค. 2569 เวลา 15:05 Ann Lee <ann@example.org> เขียนว่า:"
APPLE_TH = "เมื่อ 1 ธ.ค. 2569 เวลา 15:05 Ann Lee <ann@example.org> เขียนว่า:"
ATTRIBUTIONS_BY_SHAPE = [APPLE_ZH_ADDRESS, GMAIL_ZH, NETEASE, GMAIL_TH, GMAIL_TH_BE, APPLE_TH]
"""Attribution lines with an address, a year and a time of day: known by their shape, so
that the old message below them is not read even when a client leaves it unmarked."""
ATTRIBUTIONS_MARKED_ONLY = [APPLE_ZH_NAME]
"""An attribution with neither address nor time: its client always marks the quote."""

FOXMAIL_HEAD = [
    "发件人： Cy Young",
    "发送时间： 2026-12-01 15:05",
    "收件人： Ann Lee",
    "主题： [g1] orders",
]
FOXMAIL_HEAD_TIGHT = [
    "发件人：Cy Young",
    "发送时间：2026-12-01 15:05",
    "收件人：Ann Lee",
    "主题：[g1] orders",
]
FOXMAIL_HEAD_OWN = [
    "发件人： Ann Lee",
    "发送时间： 2026-11-30 09:00",
    "收件人： Snakes and Ladders referee",
    "主题： [g1] orders",
]
"""Ann replying to her own earlier orders (from her sent mail): the old message below the
block begins with an order line, and there is no blank line between them."""
FOXMAIL6_HEAD = [
    RULE,
    "发件人： Cy Young",
    "发送时间： 2026-12-01  15:05:37",
    "收件人： Ann Lee",
    "抄送： Snakes and Ladders referee",
    "主题： [g1] orders",
]
"""Foxmail 6.5: the date and the sender's name between two rules above the block."""
OUTLOOK_ZH_HEAD = [
    "发件人: Ann Lee <ann@example.org>",
    "发送时间: 2026年12月1日 15:05",
    f"收件人: {REFEREE}",
    "主题: [g1] orders",
]
OUTLOOK_ZH_CLASSIC_HEAD = [
    "-----原始邮件-----",
    "发件人: Cy Young [mailto:cy@example.org] ",
    "发送时间: 2026年12月1日 15:05",
    f"收件人: Ann Lee <ann@example.org>; {REFEREE}",
    "抄送: Bob Brown <bob@example.org>",
    "主题: [g1] orders",
]
OUTLOOK_TH_HEAD = [
    "จาก: Cy Young <cy@example.org>",
    "ส่ง: วันอังคารที่ 1 ธันวาคม 2569 15:05",
    f"ถึง: Ann Lee <ann@example.org>; {REFEREE}",
    "เรื่อง: [g1] orders",
]


def _cases() -> list[Case]:
    zh_outlook = outlook("gb2312", "base64", "gb2312", "zh-CN")
    zh_new_outlook = outlook("utf-8", "base64", "utf-8", "zh-CN")
    th_outlook = outlook("windows-874", "quoted-printable", "cp874", "th-TH")
    th_new_outlook = outlook("utf-8", "base64", "utf-8", "th-TH")
    return [
        Case(
            "zh_apple_mail",
            "Apple Mail, macOS, zh-Hans",
            NEW_ZH,
            OLD_ZH_CY,
            [APPLE_ZH_ADDRESS],
            True,
            None,
            apple_mail,
        ),
        Case(
            "zh_apple_mail_name",
            "Apple Mail, macOS, zh-Hans, a name and no time",
            NEW_ZH,
            OLD_ZH_ANN,
            [APPLE_ZH_NAME],
            True,
            None,
            apple_mail,
        ),
        Case(
            "zh_iphone_mail",
            "iOS Mail, zh-Hans: the attribution quoted too",
            [*NEW_ZH, "", "发自我的iPhone"],
            OLD_ZH_CY,
            [f"> {APPLE_ZH_NAME}", ">"],
            True,
            None,
            iphone_mail,
            below_head=[],
        ),
        Case("zh_gmail", "Gmail, zh-CN", NEW_ZH, OLD_ZH_CY, [GMAIL_ZH], True, None, gmail),
        Case(
            "zh_netease",
            "NetEase 163 Mail",
            NEW_ZH,
            OLD_ZH_CY,
            [NETEASE],
            True,
            None,
            netease,
            below_head=[],
        ),
        Case(
            "zh_qq_mail",
            "QQ Mail (web), its text part as it writes it",
            NEW_ZH_FULL_WIDTH,
            OLD_ZH_CY,
            qq_head(True),
            False,
            "------------------&nbsp;原始邮件&nbsp;------------------",
            qq_mail,
            below_head=["", "", ""],
            above_head=["", "", ""],
        ),
        Case(
            "zh_qq_mail_rendered",
            "QQ Mail, the header block as it shows it",
            NEW_ZH,
            OLD_ZH_CY,
            qq_head(False),
            False,
            "------------------ 原始邮件 ------------------",
            qq_mail,
        ),
        Case(
            "zh_foxmail",
            "Foxmail 7.2, zh",
            NEW_ZH,
            OLD_ZH_CY,
            FOXMAIL_HEAD,
            False,
            FOXMAIL_HEAD[0],
            foxmail,
            below_head=[],
            above_head=["", "", "ann@example.org", " "],
        ),
        Case(
            "zh_foxmail_tight",
            "Foxmail, no space after the full-width colons",
            NEW_ZH,
            OLD_ZH_ANN,
            FOXMAIL_HEAD_TIGHT,
            False,
            FOXMAIL_HEAD_TIGHT[0],
            foxmail,
            below_head=[],
            above_head=["", " "],
        ),
        Case(
            "zh_foxmail_own_orders",
            "Foxmail, a reply to her own orders",
            NEW_ZH,
            OLD_ZH_ANN[2:],
            FOXMAIL_HEAD_OWN,
            False,
            FOXMAIL_HEAD_OWN[0],
            foxmail,
            below_head=[],
            above_head=["", " "],
        ),
        Case(
            "zh_foxmail6",
            "Foxmail 6.5, the rules around the signature",
            NEW_ZH,
            OLD_ZH_CY,
            FOXMAIL6_HEAD,
            False,
            RULE,
            foxmail,
            below_head=[],
            above_head=["", "2026-12-01", RULE, "ann", RULE],
        ),
        Case(
            "zh_outlook",
            "Outlook, zh-CN, no rule, GB2312",
            NEW_ZH,
            OLD_ZH_ANN,
            OUTLOOK_ZH_HEAD,
            False,
            OUTLOOK_ZH_HEAD[0],
            zh_outlook,
        ),
        Case(
            "zh_outlook_rule",
            "new Outlook, zh-CN, the rule of underscores",
            NEW_ZH,
            OLD_ZH_ANN,
            [RULE, *OUTLOOK_ZH_HEAD],
            False,
            RULE,
            zh_new_outlook,
        ),
        Case(
            "zh_outlook_classic",
            "Outlook 2010, zh-CN, -----原始邮件-----",
            NEW_ZH,
            OLD_ZH_CY,
            OUTLOOK_ZH_CLASSIC_HEAD,
            False,
            OUTLOOK_ZH_CLASSIC_HEAD[0],
            zh_outlook,
        ),
        Case("th_gmail", "Gmail, Thai", NEW_TH, OLD_TH_CY, [GMAIL_TH], True, None, gmail),
        Case(
            "th_gmail_be",
            "Gmail, Thai, a Buddhist-era year",
            NEW_TH,
            OLD_TH_ANN,
            [GMAIL_TH_BE],
            True,
            None,
            gmail,
        ),
        Case(
            "th_apple_mail",
            "Apple Mail, macOS, Thai",
            NEW_TH,
            OLD_TH_CY,
            [APPLE_TH],
            True,
            None,
            apple_mail,
        ),
        Case(
            "th_outlook",
            "Outlook, Thai, no rule, windows-874",
            NEW_TH,
            OLD_TH_CY,
            OUTLOOK_TH_HEAD,
            False,
            OUTLOOK_TH_HEAD[0],
            th_outlook,
        ),
        Case(
            "th_outlook_rule",
            "new Outlook, Thai, the rule of underscores",
            NEW_TH,
            OLD_TH_ANN,
            [RULE, *OUTLOOK_TH_HEAD],
            False,
            RULE,
            th_new_outlook,
        ),
    ]


CASES = _cases()


def build() -> dict[str, bytes]:
    """The files, by name."""
    return {f"{case.name}.eml": case.write(case) for case in CASES}


def main() -> int:
    for name, data in build().items():
        (HERE / name).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
