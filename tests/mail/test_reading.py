"""Reading a message's text (issue 20): HTML in linear time whatever its tags, a blank
text/plain alternative beside HTML, format=flowed soft breaks, and auto-replies known by
their subject or by headers other than Auto-Submitted. Each is checked through ``ingest``,
so the test is what happens to the orders, and mail is written as the clients write it."""

from __future__ import annotations

import email
import email.header

import pytest
from mailhelpers import CORPUS, T0, orders_of, replies_since

from snl_pbem.app.intake import ingest
from snl_pbem.mail import htmltext
from snl_pbem.mail.autoreply import AUTOMATIC, AWAY, OUT_OF_OFFICE, auto_reply_subject
from snl_pbem.mail.flowed import unflow
from snl_pbem.mail.parse import decode_part, html_to_text

ANN, BOB = "ann@example.org", "bob@example.org"


def head(sender: str = ANN, subject: str = "Re: [g1] orders", tag: str = "x") -> str:
    return (
        f"From: Ann Example <{sender}>\r\nTo: Snakes and Ladders referee <snl@example.org>\r\n"
        f"Subject: {subject}\r\nDate: Mon, 30 Nov 2026 10:21:48 +0000\r\n"
        f"Message-ID: <{tag}@example.org>\r\nMIME-Version: 1.0\r\n"
    )


def good_order(tag: str = "bob-good") -> bytes:
    return (
        head(BOB, "[g1] orders", tag).replace("Ann Example", "Bob Example")
        + "Content-Type: text/plain; charset=UTF-8\r\n\r\nGAME g1\r\nKEY bob-key-123\r\nDICE 2\r\n"
    ).encode()


def applied(db) -> list[tuple[str, str, int | None]]:
    return [(o.player, o.dice, o.nomination) for o in orders_of(db)]


def replies_to(db, address: str) -> list[str]:
    return [r.recipient for r in replies_since(db, T0) if r.recipient == address]


# -- HTML in linear time -----------------------------------------------------------------

MIB = 1 << 20
SIZE = MIB - 16 * 1024
"""Just under the largest message read (max_message_size, 1 MiB): a bigger one is never
read at all, only its headers kept."""


def fill(unit: str, size: int = SIZE) -> str:
    return (unit * (size // len(unit) + 1))[:size]


WORST_SHAPES = {
    "nested_div": fill("<div>"),
    "nested_blockquote": fill("<blockquote>"),
    "nested_div_table": fill("<div><table><tr><td>"),
    "nested_li": fill("<ul><li>"),
    "nested_span": fill("<span>"),
    "div_siblings": fill("<div>x</div>"),
    "many_attributes": "<div " + " ".join(f"a{i}=b" for i in range(SIZE // 9)) + ">",
    "long_attribute": '<div title="' + fill("x", SIZE - 20) + '">',
    "mismatched": fill("<b><i></b></i>"),
    "b_closing_div": fill("<b></div>"),
    "unclosed_comments": fill("<!--<!--<p"),
    "cdata": fill("<![CDATA[x]]>"),
    "br_flood": fill("<br>"),
    "entity_flood": fill("&#45;"),
    "script_flood": fill("<script>x</script>"),
    "gmail_quote_flood": fill('<div class="gmail_quote">x</div>'),
    "text_node": fill("lorem ipsum "),
}
ORDERS_AND_QUOTE = (
    '<div dir="ltr">GAME g1<br>KEY ann-key-123<br>DICE 4</div>'
    "<blockquote>GAME g1<br>KEY bob-key-123<br>DICE 6</blockquote>"
)


def html_mail(html: str, tag: str, sender: str = ANN) -> bytes:
    """An HTML-only message, its lines cut at 900 characters as an MTA needs them."""
    body = "\r\n".join(html[i : i + 900] for i in range(0, len(html), 900))
    return (
        head(sender, "[g1] orders", tag)
        + "Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
        + body
        + "\r\n"
    ).encode()


@pytest.mark.parametrize("name", sorted(WORST_SHAPES))
def test_the_worst_html_is_read_and_the_next_players_order_counts(sqlite_intake, name) -> None:
    """Just under 1 MiB of each shape, the player's orders and a quote of another's on top,
    is read in the sandbox (before, nested divs ran into its 10 s limit and the message
    was set aside): her orders count, the quote does not, and the next player's order is
    then counted as usual."""
    db, config = sqlite_intake
    raw = html_mail(ORDERS_AND_QUOTE + WORST_SHAPES[name], name)
    assert len(raw) <= config.settings.mail.max_message_size
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "processed", result.detail  # read, not set aside
    assert ingest(db, config, good_order(), T0, "t").status == "processed"
    assert applied(db) == [("ann", "4", None), ("bob", "2", None)]


def client_html() -> dict[str, str]:
    """The HTML of every message of the corpus, as it is read."""
    found = {}
    for path in sorted(CORPUS.rglob("*.eml")):
        msg = email.message_from_bytes(path.read_bytes())
        for part in msg.walk():
            if part.get_content_type() == "text/html":
                found[path.name] = decode_part(part)
    return found


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def test_the_corpus_has_html_from_many_clients() -> None:
    assert len(client_html()) >= 15


@pytest.mark.parametrize("name", sorted(client_html()))
def test_the_strip_reads_real_mail_as_the_parser_does(name: str) -> None:
    """The fallback applies the parser's quote rules by name: on every HTML message of the
    corpus (Gmail, Outlook, OWA, Apple, Thunderbird, Yahoo, GMX...) it reads the same
    lines, quotes left out the same way."""
    html = client_html()[name]
    assert lines(htmltext.strip_html(html, 200_000)) == lines(htmltext.html_text(html, 200_000))


def test_the_strip_follows_the_quote_rules() -> None:
    strip = htmltext.strip_html
    below = '<div>hi</div><BLOCKQUOTE type="cite"><div>DICE 6</div></BLOCKQUOTE><div>DICE 4</div>'
    assert lines(strip(below, 999)) == ["hi", "DICE 4"]  # a reply written below the quote
    nested = (
        '<div class="gmail_quote"><div><div class="x">KEY cy-key-123</div></div>'
        "<div>DICE 6</div></div>DICE 4"
    )
    assert lines(strip(nested, 999)) == ["DICE 4"]
    outlook = (
        "<p class=MsoNormal>DICE 4</p><div style='border:none;border-top:solid #E1E1E1 1.0pt'>"
        "<p><b>From:</b> cy</p></div><p>DICE 6</p>"
    )
    assert lines(strip(outlook, 999)) == ["DICE 4"]
    owa = '<div>DICE 4</div><div id="appendonsend"></div><div>DICE 6</div>'
    assert lines(strip(owa, 999)) == ["DICE 4"]
    noise = "<!-- DICE 6 --><script>var x = '</div>DICE 6';</script><style>p{}</style>DICE 4"
    assert lines(strip(noise, 999)) == ["DICE 4"]
    entities = "KEY&nbsp;ann&#45;key&#x2d;123<br>DICE&#32;4 &lt;b&gt;"
    assert lines(strip(entities, 999)) == ["KEY\xa0ann-key-123", "DICE 4 <b>"]
    made_tag = "<<b>div>x" * 3  # text that becomes a tag once others are removed stays text
    assert strip(made_tag, 999) == "<div>x" * 3


def test_too_many_quote_containers_leave_out_the_rest() -> None:
    """Each quote container costs a few Python calls: past MAX_CHECKS, the rest of the
    message is taken as quoted (conservative: a quote is never read as orders)."""
    many = "DICE 4" + '<div class="gmail_quote">x</div>' * (htmltext.MAX_CHECKS + 10) + "DICE 6"
    assert lines(htmltext.strip_html(many, 999)) == ["DICE 4"]


def test_the_readers_are_chosen_by_shape() -> None:
    """A real reply goes to the parser; too many tags, too deep, or too many attributes
    in a tag go to the strip (both give the same text here)."""
    small = '<div dir="ltr">KEY ann-key-123<br>DICE 4</div>'
    for html in (
        small,
        small + "<div>" * (htmltext.MAX_DEPTH + 1),
        small + "<span></span>" * (htmltext.MAX_TAGS // 2 + 1),
        small + "<p " + " ".join(f"a{i}" for i in range(htmltext.MAX_ATTRIBUTES + 1)) + ">",
    ):
        assert lines(html_to_text(html)) == ["KEY ann-key-123", "DICE 4"]


# -- a blank text/plain alternative: the HTML is what was written --------------------------

GMAIL_HTML = (
    '<div dir="ltr"><div>GAME g1</div><div>KEY ann-key-123</div><div>DICE 4</div></div><br>'
    '<div class="gmail_quote gmail_quote_container"><div dir="ltr" class="gmail_attr">On Mon, '
    '30 Nov 2026 at 09:00, Snakes and Ladders referee &lt;<a href=3D"mailto:snl@example.org">'
    'snl@example.org</a>&gt; wrote:<br></div><blockquote class=3D"gmail_quote" style=3D"margin:'
    '0px 0px 0px 0.8ex;border-left:1px solid rgb(204,204,204);padding-left:1ex">GAME g1<br>KEY '
    "cy-key-123<br>DICE 6</blockquote></div>"
).replace('=3D"', '"')
OUTLOOK_HTML = (
    '<html xmlns:o="urn:schemas-microsoft-com:office:office"><head><meta http-equiv="Content-'
    'Type" content="text/html; charset=us-ascii"><style><!--p.MsoNormal{margin:0cm;}--></style>'
    '</head><body lang="EN-GB"><div class="WordSection1"><p class="MsoNormal">GAME g1<o:p></o:p>'
    '</p><p class="MsoNormal">KEY ann-key-123<o:p></o:p></p><p class="MsoNormal">DICE 4<o:p>'
    '</o:p></p><div><div style="border:none;border-top:solid #E1E1E1 1.0pt;padding:3.0pt 0cm 0cm'
    ' 0cm"><p class="MsoNormal"><b>From:</b> Snakes and Ladders referee &lt;snl@example.org&gt;'
    '<br><b>Sent:</b> 30 November 2026 09:00</p></div></div><p class="MsoNormal">GAME g1<br>KEY '
    "cy-key-123<br>DICE 6<o:p></o:p></p></div></body></html>"
)
APPLE_HTML = (
    '<html><head><meta http-equiv="content-type" content="text/html; charset=utf-8"></head>'
    '<body style="overflow-wrap: break-word; -webkit-nbsp-mode: space; line-break: after-white-'
    'space;">GAME g1<div>KEY ann-key-123</div><div>DICE 4</div><div><br><blockquote type="cite">'
    "<div>On 30 Nov 2026, at 09:00, Snakes and Ladders referee &lt;snl@example.org&gt; wrote:"
    '</div><br class="Apple-interchange-newline"><div><div>KEY cy-key-123<br>DICE 6</div></div>'
    "</blockquote></div><br></body></html>"
)

BLANK_PLAIN = {
    # Gmail's boundary style; the plain alternative is a lone line break
    "gmail": (
        "000000000000a1b2c3d4e5f60718",
        'Content-Type: text/plain; charset="UTF-8"\r\n\r\n\r\n',
        'Content-Type: text/html; charset="UTF-8"\r\n\r\n' + GMAIL_HTML,
    ),
    # Outlook: us-ascii quoted-printable, the plain part only blank lines
    "outlook_qp": (
        "_000_AM0PR01MB1234ABCDexampleorg_",
        'Content-Type: text/plain; charset="us-ascii"\r\n'
        "Content-Transfer-Encoding: quoted-printable\r\n\r\n\r\n\r\n",
        'Content-Type: text/html; charset="us-ascii"\r\n'
        "Content-Transfer-Encoding: quoted-printable\r\n\r\n" + OUTLOOK_HTML.replace("=", "=3D"),
    ),
    # Apple Mail: 7bit parts, Apple's boundary, the plain part a no-break space and CRLF
    "apple_nbsp": (
        "Apple-Mail=_5B6E1C1A-2F0B-4E0E-9C1D-3A4B5C6D7E8F",
        "Content-Transfer-Encoding: quoted-printable\r\nContent-Type: text/plain;\r\n"
        "\tcharset=utf-8\r\n\r\n=C2=A0\r\n",
        "Content-Transfer-Encoding: 7bit\r\nContent-Type: text/html;\r\n\tcharset=utf-8\r\n\r\n"
        + APPLE_HTML,
    ),
    # a webmail that base64-encodes everything: the plain part decodes to CRLF
    "base64": (
        "=-=-=boundary-42",
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
        "DQo=\r\n",
        "Content-Type: text/html; charset=utf-8\r\n\r\n" + GMAIL_HTML,
    ),
}


@pytest.mark.parametrize("name", sorted(BLANK_PLAIN))
def test_a_blank_plain_alternative_reads_the_html(sqlite_intake, name: str) -> None:
    """The orders are in the HTML alternative only: they count (before: nothing was read
    and the player was told there was no key); the quote in the HTML still does not."""
    db, config = sqlite_intake
    boundary, plain, html = BLANK_PLAIN[name]
    raw = (
        head(tag=name)
        + f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n'
        + f"--{boundary}\r\n{plain}\r\n--{boundary}\r\n{html}\r\n--{boundary}--\r\n"
    ).encode()
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "processed", result.detail
    assert applied(db) == [("ann", "4", None)]


def test_a_plain_alternative_with_text_is_still_the_one_read(sqlite_intake) -> None:
    db, config = sqlite_intake
    boundary = "000000000000a1b2c3d4e5f60719"
    raw = (
        head(tag="both")
        + f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n'
        + f'--{boundary}\r\nContent-Type: text/plain; charset="UTF-8"\r\n\r\n'
        + "GAME g1\r\nKEY ann-key-123\r\nDICE 5\r\n\r\n"
        + f'--{boundary}\r\nContent-Type: text/html; charset="UTF-8"\r\n\r\n{GMAIL_HTML}\r\n'
        + f"--{boundary}--\r\n"
    ).encode()
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert applied(db) == [("ann", "5", None)]


# -- format=flowed (RFC 3676) --------------------------------------------------------------


def thunderbird(body: str, tag: str, params: str = "format=flowed") -> bytes:
    return (
        head(tag=tag)
        + "User-Agent: Mozilla Thunderbird\r\nContent-Language: en-GB\r\n"
        + f"Content-Type: text/plain; charset=UTF-8; {params}\r\n"
        + "Content-Transfer-Encoding: 7bit\r\n\r\n"
        + body
    ).encode()


def test_a_soft_break_inside_an_order_is_joined(sqlite_intake) -> None:
    """'DICE 4 \\r\\n2' is 'DICE 4 2' (round 1 has one turn: two values are read, and
    refused as too many, instead of 'DICE 4' and a stray '2')."""
    db, config = sqlite_intake
    body = "GAME g1\r\nKEY ann-key-123\r\nDICE 4 \r\n2\r\n\r\nAnn\r\n"
    assert ingest(db, config, thunderbird(body, "soft"), T0, "t").status == "processed"
    assert applied(db) == [("ann", "4 2", None)]
    plain = thunderbird(body, "fixed", "format=fixed")  # not flowed: lines as they stand
    assert ingest(db, config, plain, T0, "t").status == "processed"
    assert applied(db)[-1] == ("ann", "4", None)


def test_a_flowed_reply_quotes_stay_quotes(sqlite_intake) -> None:
    """Thunderbird's reply, bottom-posted: the quoted report is soft-wrapped (its lines
    end in a space), the new lines below; no quoted line is joined to the player's."""
    db, config = sqlite_intake
    body = (
        "On 30/11/2026 09:00, Snakes and Ladders referee wrote:\r\n"
        "> Round 1 of g1 closes on Friday 4 January at 18:00. Send your orders as \r\n"
        "> plain text, for example: \r\n"
        "> KEY (your order key) \r\n"
        "> DICE 6 \r\n"
        "\r\n"
        "GAME g1\r\nKEY ann-key-123\r\nDICE 3\r\n\r\n-- \r\nAnn Example \r\nDICE 5 forever\r\n"
    )
    assert ingest(db, config, thunderbird(body, "quoted"), T0, "t").status == "processed"
    assert applied(db) == [("ann", "3", None)]


def test_a_typed_trailing_space_does_not_join_two_orders(sqlite_intake) -> None:
    """RFC 3676 asks senders to trim the space before a hard break; a client that keeps
    the one the player typed would send 'KEY ann-key-123 ' + 'DICE 4': two orders, so
    they stay two lines (a line starting with an order word is never joined to)."""
    db, config = sqlite_intake
    body = "Thanks for the reminder! \r\nGAME g1 \r\nKEY ann-key-123 \r\nDICE 4 \r\n"
    assert ingest(db, config, thunderbird(body, "typed"), T0, "t").status == "processed"
    assert applied(db) == [("ann", "4", None)]


def test_unflow_follows_rfc_3676() -> None:
    assert unflow("DICE 4 \r\n2\r\n") == "DICE 4 2\n"
    assert unflow("abc \r\ndef\r\n", delsp=True) == "abcdef\n"  # DelSp=yes
    assert unflow("> old \r\n>> older \r\n>> still \r\nnew\r\n") == (
        "> old \n>> older still \nnew\n"  # depth changes end a paragraph
    )
    assert unflow("> quoted \r\n4 2\r\n") == "> quoted \n4 2\n"  # never joined into a quote
    assert unflow("DICE 4\r\n-- \r\nAnn\r\n") == "DICE 4\n-- \nAnn\n"  # the signature line
    assert unflow("text \r\n-- \r\nAnn\r\n") == "text \n-- \nAnn\n"  # nor joined into it
    assert unflow(" From here\r\n >not a quote\r\n") == "From here\n>not a quote\n"  # stuffing
    assert unflow("> > spaced \r\n> > quote\r\n").startswith(">")  # "> >" is depth 1


# -- auto-replies without the standard headers ------------------------------------------

AUTO_SUBJECTS = {
    "english_outlook": "Automatic reply: [g1] Round 1 report",
    "english_lotus": "Out of Office AutoReply: [g1] Round 1 report",
    "english_ooo": "Out of Office: Re: [g1] orders",
    "english_notes": "Auto: [g1] Round 1 report",
    "english_autoreply": "Autoreply: [g1] Round 1 report",
    "english_away": "Away: [g1] Round 1 report",
    "english_bracket": "[g1] Round 1 report (Auto-Reply)",
    "gateway_tag": "[EXTERNAL] Automatic reply: [g1] Round 1 report",
    "german_notiz": "Abwesenheitsnotiz: [g1] Runde 1",
    "german_reply": "Automatische Antwort: AW: [g1] Runde 1",
    "french": "Réponse automatique : [g1] Round 1 report",
    "french_absence": "Absence : [g1] Round 1 report",
    "spanish": "Respuesta automática: [g1] Round 1 report",
    "italian": "Risposta automatica: [g1] Round 1 report",
    "dutch": "Automatisch antwoord: [g1] Round 1 report",
    "portuguese": "Resposta automática: [g1] Round 1 report",
    "swedish": "Automatiskt svar: [g1] Round 1 report",
    "polish": "Automatyczna odpowiedź: [g1] Round 1 report",
    "japanese": "自動応答: [g1] Round 1 report",
    "japanese_absent": "不在: [g1] Round 1 report",
    "chinese_simplified": "自动回复: 回复: [g1] Round 1 report",
    "chinese_fullwidth_colon": "自动回复\uff1a[g1] Round 1 report",
    "chinese_traditional": "自動回覆: [g1] Round 1 report",
    "korean": "자동 회신: [g1] Round 1 report",
    "thai": "ตอบกลับอัตโนมัติ: [g1] Round 1 report",
    "russian": "Автоответ: [g1] Round 1 report",
    "russian_long": "Автоматический ответ: [g1] Round 1 report",
    "turkish": "Otomatik yan\u0131t: [g1] Round 1 report",
    "greek": "Αυτόματη απάντηση: [g1] Round 1 report",
    "ukrainian": "Автовідповідь: [g1] Round 1 report",
    "czech": "Automatická odpověď: [g1] Round 1 report",
    "hungarian": "Automatikus válasz: [g1] Round 1 report",
    "finnish": "Automaattinen vastaus: [g1] Round 1 report",
    "norwegian": "Autosvar: [g1] Round 1 report",
    "romanian": "Răspuns automat: [g1] Round 1 report",
    "vietnamese": "Trả lời tự động: [g1] Round 1 report",
    "indonesian": "Balasan otomatis: [g1] Round 1 report",
    "arabic": "رد تلقائي: [g1] Round 1 report",
    "hebrew": "מענה אוטומטי: [g1] Round 1 report",
}


def encoded(subject: str) -> str:
    """The subject as a client puts it on the wire (an RFC 2047 word when not ASCII)."""
    if subject.isascii():
        return subject
    return email.header.Header(subject, "utf-8").encode()


def pasted_welcome(subject: str, tag: str, extra: str = "") -> bytes:
    """An out-of-office reply that pasted the mail it answers unquoted, orders and all."""
    return (
        head(subject=encoded(subject), tag=tag)
        + extra
        + "Content-Type: text/plain; charset=UTF-8\r\n\r\n"
        + "I am away until 7 December and will read your mail then.\r\n\r\n"
        + "GAME g1\r\nKEY ann-key-123\r\nDICE 6\r\nTRAPDOOR 12\r\n"
    ).encode()


@pytest.mark.parametrize("name", sorted(AUTO_SUBJECTS))
def test_auto_reply_subjects_are_never_orders_nor_answered(sqlite_intake, name: str) -> None:
    db, config = sqlite_intake
    result = ingest(db, config, pasted_welcome(AUTO_SUBJECTS[name], name), T0, "t")
    assert result.status == "ignored", result.detail
    assert "auto-reply subject" in result.detail
    assert applied(db) == [] and replies_to(db, ANN) == []


def test_the_lists_hold_many_languages() -> None:
    assert len(AUTOMATIC) >= 40 and len(OUT_OF_OFFICE) + len(AWAY) >= 25
    assert len({n.split("_")[0] for n in AUTO_SUBJECTS}) >= 20


AUTO_HEADERS = {
    "x_autoreply": "X-Autoreply: yes\r\n",
    "x_autorespond": "X-Autorespond: Vacation rule 3\r\n",
    "x_autoresponder": "X-AutoResponder: on\r\n",
    "precedence_auto_reply": "Precedence: auto_reply\r\n",
    "precedence_auto_reply_hyphen": "Precedence: auto-reply\r\n",
    "x_autogenerated": "X-Autogenerated: Reply\r\n",
}


@pytest.mark.parametrize("name", sorted(AUTO_HEADERS))
def test_auto_reply_headers_are_never_orders_nor_answered(sqlite_intake, name: str) -> None:
    """A plain subject, only the header says it: no answer, nothing applied."""
    db, config = sqlite_intake
    raw = pasted_welcome("Re: [g1] Round 1 report", name, AUTO_HEADERS[name])
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "ignored", result.detail
    assert applied(db) == [] and replies_to(db, ANN) == []


PLAYERS_SUBJECTS = [
    "Re: [g1] back from my absence, orders",
    "[g1] Out of office next week, ABSENT UNTIL 2030-01-10",
    "Away",
    "Absence",
    "Re: [g1] automatic replies are off now",
    "Auto roll please",
    "Autorepair shop closed, orders",
    "AW: [g1] Runde 1 - abwesend bis Freitag",
    "Re: Re: [g1] orders",
    # a subject alone never makes a robot of a player (the reviewer's five, and more)
    "Absent: next two rounds",
    "Out of office",
    "Away: orders for round 3",
    "Auto: DICE 4 2",
    "Re: Automatic reply: [g1] Round 3 report",
    "AW: Automatische Antwort: [g1] Runde 1",
    "Fwd: Out of Office: [g1] Round 3 report",
    "Abwesend: Runde 3",
    "不在: 来週",
    "Out of office: [g1]",
]


@pytest.mark.parametrize("subject", PLAYERS_SUBJECTS)
def test_a_players_own_subject_is_not_an_auto_reply(sqlite_intake, subject: str) -> None:
    """The words count at the start and in a robot's form only, not in a sentence."""
    db, config = sqlite_intake
    raw = (
        head(subject=subject, tag="own")
        + "Content-Type: text/plain; charset=UTF-8\r\n\r\nGAME g1\r\nKEY ann-key-123\r\nDICE 4\r\n"
    ).encode()
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert applied(db) == [("ann", "4", None)] and replies_to(db, ANN) == [ANN]


def test_exchanges_auto_response_suppress_is_ordinary_mail(sqlite_intake) -> None:
    """X-Auto-Response-Suppress is on normal Outlook mail (it asks robots not to answer
    it): it is no sign of an auto-reply."""
    db, config = sqlite_intake
    raw = (
        head(subject="RE: [g1] Round 1 report", tag="exchange")
        + "X-Auto-Response-Suppress: All\r\nX-MS-Has-Attach: \r\nX-MS-TNEF-Correlator: \r\n"
        + 'Content-Type: text/plain; charset="us-ascii"\r\n'
        + "Content-Transfer-Encoding: 7bit\r\n\r\nGAME g1\r\nKEY ann-key-123\r\nDICE 4\r\n"
    ).encode()
    assert ingest(db, config, raw, T0, "t").status == "processed"
    assert applied(db) == [("ann", "4", None)]


def test_subject_rule_edges() -> None:
    assert auto_reply_subject("Automatic reply") is not None  # the whole subject
    assert auto_reply_subject("Out of office") is None  # alone: could be a player
    assert auto_reply_subject("Out of office until Monday") is None
    assert auto_reply_subject("Out of office: Re: x") is not None  # before a reply
    assert auto_reply_subject("Away: [g1] Round 3 report") is not None  # before ours
    assert auto_reply_subject("Away: Snakes and Ladders: About your message") is not None
    assert auto_reply_subject("Away: orders [g1]") is None  # before the player's words
    assert auto_reply_subject("Automatic reply - x") is not None  # a dash after it
    assert auto_reply_subject("Autoreplying is off") is None  # more letters of a word
    assert auto_reply_subject("Awayday: [g1]") is None
    assert auto_reply_subject("RE[2]: Odp: Automatic reply: x") is None  # a person's reply
    assert auto_reply_subject("[EXT] [x] Automatic reply: x") is not None  # after tags
    assert auto_reply_subject("Respuesta automatica: x") is not None  # without accents
    assert auto_reply_subject("AUTOMATIC REPLY: X") is not None  # any case


def test_a_parts_parameters_read_once_follow_its_own_headers() -> None:
    """The charset, the filename and format=flowed of a part are worked out once per set
    of header values (issue 23): each part is read by its own headers, a header changed
    in place (as redaction does) is read anew, and what is kept holds no header's text."""
    from snl_pbem.mail import parse

    body = "DICE 4\r\nKEY caf\u00e9-k\u00e9y-1 \r\nTRAPDOOR 12\r\n"

    def part(content_type: str, disposition: str | None = None, charset: str = "utf-8"):
        head = f"Content-Type: {content_type}\r\n"
        if disposition:
            head += f"Content-Disposition: {disposition}\r\n"
        return email.message_from_bytes(head.encode() + b"\r\n" + body.encode(charset))

    for _ in range(2):  # the second time from what was kept
        latin = part("text/plain; charset=iso-8859-1", charset="latin-1")
        utf8 = part("text/plain; charset=utf-8")
        assert decode_part(latin) == decode_part(utf8) == body
        assert parse._charset(latin) == "iso8859-1" and parse._charset(utf8) == "utf-8"
        flowed = part("text/plain; charset=utf-8; format=flowed")
        assert parse._unflowed(flowed, "DICE 4 \n2") == "DICE 4 2"
        assert parse._unflowed(utf8, "DICE 4 \n2") == "DICE 4 \n2"
        named = part("text/plain; charset=utf-8", 'inline; filename="orders.txt"')
        by_type = part('text/plain; charset=utf-8; name="orders.txt"')
        assert parse._is_attachment(named) and parse._is_attachment(by_type)
        assert not parse._is_attachment(part("text/plain; charset=utf-8", "inline"))

    changed = part("text/plain; charset=iso-8859-1", charset="latin-1")
    assert parse._charset(changed) == "iso8859-1"
    changed.replace_header("Content-Type", "text/plain; charset=utf-8")
    assert parse._charset(changed) == "utf-8"
    assert all(isinstance(key, bytes) and b"8859" not in key for key in parse._BY_HEADERS)

    for n in range(parse._BY_HEADERS_KEPT + 10):  # bounded
        parse._charset(part(f'text/plain; charset=utf-8; x-n="{n}"'))
    assert len(parse._BY_HEADERS) <= parse._BY_HEADERS_KEPT


def test_a_charset_named_with_a_nul_is_read_as_utf8() -> None:
    """A charset the codecs refuse for a NUL in its name (``ValueError``, not
    ``LookupError``) falls back as an unknown one does: the text read as UTF-8, the orders
    obeyed, and the key redacted in the copy kept (it was set aside unread before)."""
    from snl_pbem.mail.parse import parse_message

    raw = (
        b"From: ann@example.org\r\nTo: snl@example.org\r\nSubject: o\r\n"
        b"Message-ID: <nul-charset@example.org>\r\n"
        b'Content-Type: text/plain; charset="utf\x008"\r\n\r\n'
        b"GAME g1\r\nKEY abcd-efgh-jkmn-pqrs\r\nDICE 4\r\n"
    )
    parsed = parse_message(raw, "snl@example.org")
    assert parsed.commands is not None and parsed.commands.dice == (4,)
    assert parsed.redacted is not None and b"abcd-efgh-jkmn-pqrs" not in parsed.redacted
