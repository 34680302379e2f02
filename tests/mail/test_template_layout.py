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
import random
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jinja2 import meta
from mailhelpers import T0
from sqlalchemy import select

from snl_pbem.app.intake import ingest
from snl_pbem.mail.render import environment
from snl_pbem.store import OutboxMessage

FOLDER = Path(str(resources.files("snl_pbem.templates")))
TEMPLATES = sorted(p.relative_to(FOLDER).as_posix() for p in FOLDER.rglob("*.j2"))
INCLUDED_ONLY = {n for n in TEMPLATES if not (FOLDER / n).read_text().startswith("Subject: ")}
"""Parts pulled into other templates with ``{% include %}``: checked inside them."""
RENDERS = 300
"""Random renderings per template: enough for every template here to reach each of its
branches next to its signature many times over (the STATUS bug above shows in about one
rendering in ten)."""

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


class Value(int):
    """Any value a template may be given, each of its parts drawn at random but the same
    every time the template looks at it: true or false, empty or holding two items, a
    number (2 or 0) or a word. An ``int``, so that ``%d`` and ``%-*s`` take it."""

    _path: str
    _draw: random.Random
    _seen: dict[str, bool]

    def __new__(cls, path: str, draw: random.Random, seen: dict[str, bool]) -> Value:
        if path not in seen:
            seen[path] = draw.random() < 0.5
        value = super().__new__(cls, 2 if seen[path] else 0)
        value._path, value._draw, value._seen = path, draw, seen
        return value

    def _part(self, name: str) -> Value:
        return Value(f"{self._path}.{name}", self._draw, self._seen)

    def __getattr__(self, name: str) -> Value:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._part(name)

    def __getitem__(self, key: object) -> Value:
        return self._part(f"[{key}]")

    def __call__(self, *args: object, **kwargs: object) -> Value:
        return self._part("()")

    def __iter__(self) -> Iterator[Value]:
        return iter([self._part("[0]"), self._part("[1]")] if self else [])

    def __len__(self) -> int:
        return 2 if self else 0

    def __str__(self) -> str:
        return "word" if self else ""

    def __eq__(self, other: object) -> bool:
        return bool(self._part(f"=={other!r}"))

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: object) -> bool:
        return bool(self._part(f"<{other!r}"))

    __le__ = __gt__ = __ge__ = __lt__

    def __hash__(self) -> int:
        return hash(self._path)

    def __contains__(self, item: object) -> bool:
        return bool(self._part(f"has {item!r}"))

    def __add__(self, other: object) -> Value:
        return self._part("+")

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __add__


def names_of(name: str) -> set[str]:
    """The top-level names a template (and what it includes) reads."""
    env = environment()
    source = env.loader.get_source(env, name)[0]  # type: ignore[union-attr]
    found = set(meta.find_undeclared_variables(env.parse(source)))
    for included in meta.find_referenced_templates(env.parse(source)):
        if included:
            found |= names_of(included)
    return found


def renderings(name: str) -> Iterator[str]:
    """``name`` rendered with random values; a draw the template cannot take (a value it
    treats as a date, say, drawn as missing) is skipped, and most draws must render."""
    template = environment().get_template(name)
    names = names_of(name)
    done = 0
    for seed in range(RENDERS):
        draw, seen = random.Random(f"{name}/{seed}"), {}
        context: dict[str, Any] = {}
        for key in sorted(names):  # sorted: the same draws on every run
            missing = draw.random() < 0.1
            context[key] = None if missing else Value(key, draw, seen)
        try:
            text = template.render(**context)
        except Exception:  # a context no caller gives (None where a value is needed)
            continue
        done += 1
        yield text
    assert done >= RENDERS // 4, f"{name}: only {done} of {RENDERS} draws rendered"


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
