"""Replies as real mail clients write them: only what the player newly wrote is obeyed.

Every file in tests/data/mail/clients/ is a reply (or forward) written the way one client
writes it: its headers, MIME structure, transfer encoding, charset, quote header wording
and HTML quote markup. Each quoted part holds different orders from the new text (another
die, a trapdoor, often another player's key), so a server that read the quote would give
a visibly wrong result. Each expectation is what a referee reading the message would say
the player meant, by the rules of DESIGN.md "Orders by email": nothing quoted counts,
whether the reply is above, below or between the quoted lines; attachments (forwarded
messages included) are never orders.
"""

from __future__ import annotations

import email
from dataclasses import dataclass
from email import policy

import pytest
from mailhelpers import CORPUS, T0, orders_of, replies_since

from snl_pbem.app.intake import ingest

CLIENTS = CORPUS / "clients"


@dataclass(frozen=True)
class Expect:
    status: str
    player: str | None
    """Whose orders were stored (None: no orders stored at all)."""
    dice: str | None = None
    nomination: int | None = None
    valid: bool | None = None
    reply_to: tuple[str, ...] = ()
    reply_says: str | None = None
    """A phrase the reply must contain (whitespace-normalised), when the point is what it says."""


ANN, BOB, CY = "ann@example.org", "bob@example.org", "cy@example.org"


def applied(player: str, dice: str, nomination: int | None = None) -> Expect:
    """The player's new orders were applied (round 1 is one turn: one die, valid)."""
    return Expect("processed", player, dice, nomination, True, (f"{player}@example.org",))


NO_ORDERS = "Your message had no orders"
NO_KEY = "Your message had no order key"

EXPECTED: dict[str, Expect] = {
    # Outlook desktop, German, plain text, windows-1252 quoted-printable: the quote after
    # "-----Ursprüngliche Nachricht-----" / Von: / Gesendet: has DICE 4 and TRAPDOOR 12.
    "outlook_de_plain_cp1252.eml": applied("bob", "2"),
    # Outlook desktop, German, HTML: the plain alternative has only a Von:/Gesendet: block
    # (no separator line); the old orders (DICE 6, TRAPDOOR 45) follow it.
    "outlook_de_html.eml": applied("cy", "3", 20),
    # Outlook on the web: the quote follows <div id="divRplyFwdMsg"> and holds CY's key and
    # dice, which must never be applied from Ann's message.
    "owa_reply_quotes_other_player.eml": applied("ann", "1"),
    # Gmail web, top-posted; attribution wrapped after "<"; quote in gmail_quote / "> ".
    "gmail_web_en.eml": applied("bob", "6", 30),
    # Gmail for Android ("On Mon, 30 Nov 2026, 09:00 Name, <addr> wrote:").
    "gmail_android.eml": applied("cy", "5"),
    # Apple Mail on iPhone, quoting ANN's orders (her key, DICE 3, TRAPDOOR 45).
    "apple_iphone_quotes_other_player.eml": applied("bob", "2"),
    # Apple Mail on macOS, plain text, the attribution line itself quoted.
    "apple_mail_macos_plain.eml": applied("ann", "3", 9),
    # Apple Mail on macOS, HTML (<blockquote type="cite">).
    "apple_mail_macos_html.eml": applied("cy", "1", 7),
    # Thunderbird, HTML only: moz-cite-prefix wrapped over two source lines, blockquote cite.
    "thunderbird_html_only.eml": applied("ann", "6", 16),
    # Thunderbird, HTML only, answered inline: its lines stand between the pieces of the
    # split blockquote ("DICE 4" quoted, then "DICE 5"; "TRAPDOOR 12", then "TRAPDOOR 41").
    "thunderbird_html_interleaved.eml": applied("cy", "5", 41),
    # Thunderbird, plain text, format=flowed: TRAPDOOR none replaces the quoted TRAPDOOR 27.
    "thunderbird_plain_flowed.eml": applied("bob", "5", None),
    # mutt, bottom-posted: the new orders are BELOW "On ..., ... wrote:" and the quote.
    "mutt_bottom_post.eml": applied("cy", "2", 33),
    # s-nail, interleaved: "> DICE 4" then "DICE 5" below it, and so on.
    "snail_interleaved.eml": applied("bob", "5", 40),
    # Gmail in French, Spanish, Dutch and Italian, each attribution wrapped over two lines.
    "gmail_fr.eml": applied("ann", "2", 18),
    "gmail_es.eml": applied("bob", "1"),
    "gmail_nl_quotes_other_player.eml": applied("cy", "6"),  # quote has BOB's key
    "gmail_it.eml": applied("ann", "4", 22),
    # Yahoo Mail: the plain part leaves the quote unmarked below an indented "On ... wrote:";
    # the HTML has it in <div class="ydp...yahoo_quoted">.
    "yahoo_web.eml": applied("cy", "3", 31),
    # Outlook for iOS: "Get Outlook for iOS", the underscore line, From:/Sent:, the welcome.
    "outlook_ios.eml": applied("bob", "1"),
    # Outlook for Mac in French: "De : / Date : / À : / Objet :" and no separator line.
    "outlook_mac_fr.eml": applied("ann", "5"),
    # GMX / web.de, HTML only: <div name="quote"> with "Gesendet: / Von: / An: / Betreff:".
    "gmx_de_html_only.eml": applied("cy", "2", 14),
    # Thunderbird (HTML only) "Forward As Attachment": the body has Bob's key but no orders;
    # his old orders are only in the attached message/rfc822. Nothing applied, and he is
    # told the message had no orders.
    "forward_as_attachment_no_orders.eml": Expect(
        "processed", None, reply_to=(BOB,), reply_says=NO_ORDERS
    ),
    # Outlook desktop: Cy's own orders in the body, Ann's message (her key, DICE 3,
    # TRAPDOOR 45) attached as message/rfc822: only the body counts.
    "forward_as_attachment_with_orders.eml": applied("cy", "4"),
    # Thunderbird: an empty body and the orders, key included, only in orders.txt. An
    # attachment is never orders: the message has no key, nothing is applied, Ann is told.
    "attachment_orders_txt_empty_body.eml": Expect(
        "rejected", None, reply_to=(ANN,), reply_says=NO_KEY
    ),
    # Apple Mail: key in the body, DICE/TRAPDOOR only in an attached orders.txt, then a
    # third text part after the attachment. No orders applied; Bob is told.
    "apple_mail_attachment_orders_txt.eml": Expect(
        "processed", None, reply_to=(BOB,), reply_says=NO_ORDERS
    ),
}

ON_EACH_DATABASE = [
    "outlook_de_plain_cp1252.eml",
    "owa_reply_quotes_other_player.eml",
    "mutt_bottom_post.eml",
    "gmx_de_html_only.eml",
    "forward_as_attachment_no_orders.eml",
]


def reply_text(raw: bytes) -> str:
    """A reply as its recipient reads it: headers and the decoded body."""
    msg = email.message_from_bytes(raw, policy=policy.default)
    parts = [str(msg["Subject"] or "")]
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            parts.append(part.get_content())
    return "\n".join(parts)


def html_alternative_only(raw: bytes) -> bytes:
    """The same message with only its own text/html alternative, encoded bytes unchanged:
    what a server that reads the HTML (or a gateway that drops text/plain) would see."""
    msg = email.message_from_bytes(raw)
    html = next(p for p in msg.get_payload() if p.get_content_type() == "text/html")
    del msg["Content-Type"], msg["Content-Transfer-Encoding"]
    msg["Content-Type"] = html["Content-Type"]
    if html["Content-Transfer-Encoding"]:
        msg["Content-Transfer-Encoding"] = html["Content-Transfer-Encoding"]
    msg.set_payload(html.get_payload())
    msg.preamble = msg.epilogue = None
    return msg.as_bytes(policy=policy.compat32.clone(linesep="\r\n"))


ALTERNATIVES = sorted(
    name
    for name in EXPECTED
    if email.message_from_bytes((CLIENTS / name).read_bytes()).get_content_type()
    == "multipart/alternative"
)


def check(db, config, name: str, raw: bytes | None = None) -> None:
    expect = EXPECTED[name]
    raw = (CLIENTS / name).read_bytes() if raw is None else raw
    result = ingest(db, config, raw, T0, "file:" + name)
    assert (result.status, name) == (expect.status, name), result.detail
    orders = [(o.player, o.dice, o.nomination, o.valid) for o in orders_of(db)]
    if expect.player is None:
        assert orders == [], name
    else:
        assert orders == [(expect.player, expect.dice, expect.nomination, expect.valid)], name
    replies = replies_since(db, T0)
    assert [r.recipient for r in replies] == list(expect.reply_to), name
    for reply in replies:
        text = reply_text(reply.message)
        flat = " ".join(text.split())
        assert "-key-123" not in text and b"-key-123" not in reply.message  # no key echoed
        # Nothing quoted was read: no command of the new text was met twice.
        assert "more than once" not in flat, f"{name}: {flat}"
        assert "not from your registered" not in flat, name
        if expect.reply_says is not None:
            assert expect.reply_says in flat, f"{name}: {flat}"
        if expect.player is not None and expect.valid:
            assert f"turn 1: {expect.dice}" in flat, f"{name}: {flat}"


def test_every_client_file_has_an_expectation() -> None:
    assert {p.name for p in CLIENTS.glob("*.eml")} == set(EXPECTED)
    assert len(EXPECTED) >= 16


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_client_files_are_real_wire_mail(name: str) -> None:
    """CRLF line endings throughout, 7-bit clean, as the clients put them on the wire."""
    raw = (CLIENTS / name).read_bytes()
    assert raw.count(b"\n") == raw.count(b"\r\n") > 0
    assert raw.isascii()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_only_what_the_player_newly_wrote_is_applied(sqlite_intake, name: str) -> None:
    db, config = sqlite_intake
    check(db, config, name)


@pytest.mark.parametrize("name", ON_EACH_DATABASE)
def test_client_replies_on_each_database(intake, name: str) -> None:
    db, config = intake
    check(db, config, name)


@pytest.mark.parametrize("name", ALTERNATIVES)
def test_the_html_alternative_alone_reads_the_same(sqlite_intake, name: str) -> None:
    """The client's own HTML, quote markup and all (divRplyFwdMsg by id, Outlook's
    border-top block, yahoo_quoted, gmail_quote, blockquote type=cite), read as text."""
    db, config = sqlite_intake
    check(db, config, name, html_alternative_only((CLIENTS / name).read_bytes()))
