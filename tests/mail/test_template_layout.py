"""Every template keeps its lines apart, and its signature separator alone on its line.

Issue 21: a STATUS reply with no note after it read ``Your orders for it: dice 3,
valid-- ``. The templates are rendered with ``trim_blocks``, which drops the line break
after a block tag, so a line of text ending in an inline ``{% endif %}`` ran into the
next one; here the next one was the signature separator, which mail programs know only
on a line of its own (``-- ``, RFC 3676 4.3), so the signature became part of the text.

Two checks, over every template file (so a new one cannot escape them):

- the source: a line of text ending in a block tag is followed by an empty line, the one
  whose break the tag leaves in place (how every such line here is written);
- the output: each template rendered many times with its values drawn at random (each
  optional part present or empty, each value set or not, each list empty or not), the
  ``-- `` separator always on a line of its own after a line break.
"""

from __future__ import annotations

import email
import email.policy
import re

import pytest
from mailhelpers import T0
from sqlalchemy import select
from templatehelpers import FOLDER, INCLUDED_ONLY, TEMPLATES, renderings

from snl_pbem.app.intake import ingest
from snl_pbem.store import OutboxMessage

TAG = re.compile(r"{%.*?%}|{{.*?}}|{#.*?#}", re.DOTALL)


def test_the_template_list_is_every_file() -> None:
    assert len(TEMPLATES) > 30 and "player/more_commands.txt.j2" in INCLUDED_ONLY


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_line_ending_in_a_block_tag_keeps_its_break(name: str) -> None:
    source = (FOLDER / name).read_text()
    for tag in TAG.finditer(source):
        end = tag.end()
        if tag.group().startswith("{{") or tag.group().endswith(("+%}", "-%}")):
            continue  # trim_blocks drops the break after a plain block tag (or a comment) only
        if source[end : end + 1] != "\n":
            continue
        line_start = source.rfind("\n", 0, tag.start()) + 1
        before = TAG.sub("", source[line_start : tag.start()]).strip()
        if before:  # text, then the tag: the next source line must be the empty one
            number = source.count("\n", 0, end) + 1
            assert source[end + 1 : end + 2] == "\n", (
                f"{name}:{number}: this line's text runs into the next line's (the "
                f"block tag at its end takes its line break): "
                f"{source[line_start:end]!r}"
            )


@pytest.mark.parametrize("name", sorted(set(TEMPLATES) - INCLUDED_ONLY))
def test_the_signature_separator_is_alone_on_its_line(name: str) -> None:
    for text in renderings(name):
        assert re.search(r"\n-- \n", text), (name, text[-300:])
        glued = re.search(r"[^\n]-- *\n|\n--[^ \n]*\n", text)
        assert glued is None, f"{name}: the signature runs into the text:\n{text[-300:]}"


def test_a_status_reply_ends_its_orders_line_before_the_signature(sqlite_intake) -> None:
    """The reply of issue 21 itself, through the intake: STATUS with no note after it."""
    db, config = sqlite_intake

    def mail(body: str, tag: str) -> bytes:
        return (
            f"From: ann@example.org\r\nSubject: [g1]\r\nMessage-ID: <{tag}@x.org>\r\n\r\n"
            f"KEY ann-key-123\r\n{body}\r\n"
        ).encode()

    ingest(db, config, mail("DICE 3", "a"), T0, "t")
    assert ingest(db, config, mail("STATUS", "b"), T0, "t").status == "processed"
    with db.transaction() as s:
        raw = s.scalars(select(OutboxMessage.message).order_by(OutboxMessage.id.desc())).first()
    message = email.message_from_bytes(raw, policy=email.policy.default)
    text = message.get_content().replace("\r\n", "\n")
    assert "Your orders for it: dice 3, valid\n-- \nThe g1 referee" in text, text
