"""Real-world and hostile message shapes, each with the outcome a referee would expect."""

from __future__ import annotations

import pytest
from mailhelpers import CORPUS, T0, orders_of, replies_since
from sqlalchemy import select

from snl_pbem.app.intake import ingest
from snl_pbem.store import InboundMessage, OutboxMessage

# file: (status, player whose orders, dice, trapdoor, valid, reply recipients)
EXPECTED = {
    "gmail_alternative.eml": ("processed", "ann", "3", 45, True, ["ann@example.org"]),
    "apple_mail_reply.eml": ("processed", "bob", "5", None, True, ["bob@example.org"]),
    "signature_and_chat.eml": ("processed", "cy", "2", None, True, ["cy@example.org"]),
    "outlook_qp_cp1252.eml": ("processed", "cy", "4", None, True, ["cy@example.org"]),
    "base64_utf8.eml": ("processed", "ann", "2", 7, True, ["ann@example.org"]),
    "iso8859_1.eml": ("processed", "bob", "1", 30, True, ["bob@example.org"]),
    "unknown_charset.eml": ("processed", "bob", "3", None, True, ["bob@example.org"]),
    "html_only.eml": ("processed", "ann", "5", 44, True, ["ann@example.org"]),
    "forwarded_below.eml": ("processed", "bob", "4 2", None, False, ["bob@example.org"]),
    "other_players_key.eml": ("processed", "ann", "1", None, True, ["ann@example.org"]),
    "bounce_of_welcome.eml": ("ignored", None, None, None, None, []),
    "vacation_reply.eml": ("ignored", None, None, None, None, []),
    "mailing_list.eml": ("ignored", None, None, None, None, []),
    "forged_no_key.eml": ("rejected", None, None, None, None, []),
    "wrong_key_registered.eml": ("rejected", None, None, None, None, ["bob@example.org"]),
}


def test_every_corpus_file_has_an_expectation() -> None:
    files = {p.name for p in CORPUS.glob("*.eml")}
    assert set(EXPECTED) <= files
    assert files - set(EXPECTED) == {"hostile_headers.eml"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_message(sqlite_intake, name: str) -> None:
    db, config = sqlite_intake
    status, player, dice, trapdoor, valid, recipients = EXPECTED[name]
    raw = (CORPUS / name).read_bytes()
    result = ingest(db, config, raw, T0, "file:" + name)
    assert (result.status, name) == (status, name), result.detail
    orders = orders_of(db)
    if player is None:
        assert orders == []
    else:
        assert [(o.player, o.dice, o.nomination, o.valid) for o in orders] == [
            (player, dice, trapdoor, valid)
        ]
    replies = replies_since(db, T0)
    assert [r.recipient for r in replies] == recipients
    for reply in replies:
        text = reply.message.decode()
        assert "-key-" not in text  # no key is ever echoed
        assert "Auto-Submitted: auto-replied" in text and "In-Reply-To:" in text
    if name == "other_players_key.eml":
        assert "came from mallory@evil.example" in replies[0].message.decode()


def test_hostile_headers_are_contained(sqlite_intake) -> None:
    db, config = sqlite_intake
    result = ingest(db, config, (CORPUS / "hostile_headers.eml").read_bytes(), T0, "file:h")
    assert result.stored and result.status in ("processed", "rejected")
    with db.transaction() as s:
        row = s.scalar(select(InboundMessage))
        assert row.status == result.status


def test_replay_of_the_same_bytes_is_not_applied_twice(sqlite_intake) -> None:
    db, config = sqlite_intake
    raw = (CORPUS / "gmail_alternative.eml").read_bytes()
    first = ingest(db, config, raw, T0, "imap:x", uidvalidity=1, uid=10)
    again = ingest(db, config, raw, T0, "imap:x", uidvalidity=1, uid=10)
    other_uid = ingest(db, config, raw, T0, "imap:x", uidvalidity=2, uid=1)
    assert first.status == "processed"
    assert again.status == other_uid.status == "duplicate" and again.inbound_id == first.inbound_id
    resent = raw.replace(b"Dice 3", b"Dice 6")  # same Message-ID, new bytes: a replay
    assert ingest(db, config, resent, T0, "imap:x").status == "duplicate"
    assert len(orders_of(db)) == 1
    with db.transaction() as s:
        assert len(s.scalars(select(OutboxMessage).where(OutboxMessage.kind == "ack")).all()) == 1
