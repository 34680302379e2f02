"""A key in HTML, in every form a reader may see it in, replaced where it stands.

A key's form in HTML is its characters, each in any case, as a look-alike a person reads
as the same (its fullwidth form; for ``-``, any dash), or as a character reference to one
of those (``&#45;``, ``&#x2d;``, ``&hyphen;``), with anything a reader does not see
between them: tags, comments, control and invisible characters, references to those.
``forms_pattern`` spells that out as one pattern a key. It is exact but slow to make
(about 10 ms, more than reading the rest of a message), and a server with more players
than a worker keeps patterns (256) made one for nearly every HTML message (issue 23).

``replace_key`` finds the same matches without making it. Its pieces are made once: a
pattern for each form of a character (a few dozen characters make every key), and one
for what may stand between two of them. A key is then followed through the HTML from
each place its first character stands, trying the pieces in the order the key's pattern
tries them: the same alternatives first, the longest run of what stands between first,
the leftmost match first. So it replaces what the pattern replaces, span for span
(``tests/mail/test_html_keys.py`` checks that on made-up and hostile HTML). Where
following a key costs more than its ``budget``, or the key is a single character or holds
U+0000, the pattern is made and used as before.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from html.entities import html5

from snl_pbem.mail.quotes import _INVISIBLE

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
TAG_MAX = 1000
"""The longest tag or comment taken to stand between two characters of a key (bounded,
so that a search stays linear whatever the HTML)."""
_TAG = rf"<[^<>]{{0,{TAG_MAX}}}>"
MARKUP = re.compile(rf"<!--[^<]{{0,{TAG_MAX}}}?-->|{_TAG}")
"""A comment or a tag (neither holding a "<": each search ends at the next one)."""
DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\ufe58\ufe63"
STEPS = 5000
"""How far ``replace_key`` follows a key through one HTML part before making its pattern
instead: a step is a place tried, each a few microseconds, so at most about what making
the pattern costs. An order's HTML takes tens to a few hundred."""

# references to the characters a reader drops, in decimal and hexadecimal: controls, the
# soft hyphen, zero-width and direction marks, the BOM (each alternative in the order the
# pattern tries it)
_DROPPED_DECIMAL = (
    *("[1-8]", "1[1-9]", r"2\d", "3[01]", "127", "173", "1564", "6158", "820[3-7]"),
    *("823[4-8]", "828[89]", r"829\d", "830[0-3]", "65279", r"6552\d", "6553[01]"),
)
_DROPPED_HEX = (
    *("[1-8bcef]", r"1[\da-f]", "7f", "ad", "61c", "180e", "200[b-f]", "202[a-e]"),
    *(r"206[\da-f]", "feff", "fff[9ab]"),
)


def _references(head: str, alternatives: tuple[str, ...]) -> str:
    """References to some code points: ``head`` (``&#`` or ``&#x``), up to eight zeros, one
    of ``alternatives`` (digits), an optional ``;`` (read by ``_References`` as well)."""
    return f"{head}0{{0,8}}(?:{'|'.join(alternatives)});?"


def _named(names: tuple[str, ...]) -> str:
    """Named references, ``names`` escaped (read by ``_Names`` as well)."""
    return f"&(?:{'|'.join(names)})"


DROPPED_REFERENCE = f"{_references('&#', _DROPPED_DECIMAL)}|{_references('&#x', _DROPPED_HEX)}"


@functools.cache
def entity_names() -> dict[str, tuple[str, ...]]:
    """Each character's named references (``-``: ``&hyphen;``, ``&dash;``, ...)."""
    names: dict[str, list[str]] = {}
    for name, value in html5.items():
        if len(value) == 1:
            names.setdefault(value, []).append(name)
    return {char: tuple(found) for char, found in names.items()}


@functools.cache
def text_noise() -> str:
    """What a reader drops from text: control characters (``clean_text``), invisible
    ones (the command reader), a format=flowed soft break."""
    return rf"{CONTROL.pattern}|{_INVISIBLE.pattern}| \r?\n"


@functools.cache
def _dropped_names() -> tuple[str, ...]:
    """The named references to the characters a reader drops (``&shy;``), sorted."""
    dropped = [c for c in map(chr, range(0x2100)) if CONTROL.match(c) or _INVISIBLE.match(c)]
    return tuple(sorted({n for c in [*dropped, "\ufeff"] for n in entity_names().get(c, ())}))


@functools.cache
def html_noise() -> str:
    """What HTML may hold between two characters of a key without a reader seeing it:
    a tag, a comment, a dropped character, or a reference to one (the common ones: any
    other is found when the HTML is checked, and the HTML is then kept as read)."""
    return "|".join(
        [
            MARKUP.pattern,
            text_noise(),
            DROPPED_REFERENCE,
            _named(tuple(re.escape(n) for n in _dropped_names())),
        ]
    )


@functools.lru_cache(maxsize=256)  # a worker reads many messages with the same keys
def forms_pattern(key: str) -> re.Pattern[str]:
    """Every form of ``key`` in HTML, as one pattern (slow to make: see the module)."""
    between = f"(?:{html_noise()})*"
    return re.compile(between.join(char_forms(c) for c in key), re.I)


def char_forms(char: str) -> str:
    """One character of a key as HTML may show it: in any case or as a look-alike a
    person reads as the same (its fullwidth form; for ``-``, any dash: ``&hyphen;`` is
    U+2010), or as any reference to one."""
    literal, decimal, hexadecimal, names = _form_parts(char)
    forms = [literal, _references("&#", decimal), _references("&#x", hexadecimal)]
    forms.extend([_named(names)] if names else [])
    return f"(?:{'|'.join(forms)})"


def _form_parts(char: str) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``char_forms``' alternatives: a character class, the code points' decimal and
    hexadecimal digits, the names (escaped), each in the order the pattern tries them."""
    variants = {v for v in (char, char.lower(), char.upper()) if len(v) == 1}
    variants.update(DASHES if char == "-" else "")
    variants.update(chr(ord(v) + 0xFEE0) for v in list(variants) if "!" <= v <= "~")
    points = sorted(ord(v) for v in variants)
    return (
        f"[{''.join(re.escape(v) for v in sorted(variants))}]",
        tuple(str(p) for p in points),
        tuple(f"{p:x}" for p in points),
        tuple(re.escape(n) for v in sorted(variants) for n in entity_names().get(v, ())),
    )


# -- following a key without its pattern -------------------------------------------------


class _TooDear(Exception):
    """Following the key cost more than its budget: its pattern is used instead."""


class _References:
    """``&#0{0,8}(?:a|b|...);?`` (or ``&#x...``): where each reading of it at a place
    ends, in the order the pattern tries them."""

    def __init__(self, head: str, alternatives: tuple[str, ...]) -> None:
        self.head = re.compile(head + "0{0,8}", re.I)
        self.whole = re.compile(_references(head, alternatives), re.I)
        self.alternatives = tuple(re.compile(a, re.I) for a in alternatives)

    def ends(self, markup: str, at: int) -> Iterator[int]:
        if not self.whole.match(markup, at):
            return
        # no alternative starts with 0 (``replace_key`` takes no key with U+0000): the
        # zeros are all taken, or there is no reading
        digits = self.head.match(markup, at).end()  # type: ignore[union-attr]
        for alternative in self.alternatives:
            found = alternative.match(markup, digits)
            if found:
                end = found.end()
                if markup.startswith(";", end):
                    yield end + 1
                yield end


class _Names:
    """``&(?:a|b|...)``: where each reading of it at a place ends, in the pattern's
    order."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.whole = re.compile(_named(names), re.I) if names else None
        self.names = tuple(re.compile(n, re.I) for n in names)

    def ends(self, markup: str, at: int) -> Iterator[int]:
        if self.whole is None or not self.whole.match(markup, at):
            return
        for name in self.names:
            found = name.match(markup, at + 1)
            if found:
                yield found.end()


class _CharForms:
    """``char_forms(char)`` in pieces: where each reading of it at a place ends."""

    def __init__(self, char: str) -> None:
        literal, decimal, hexadecimal, names = _form_parts(char)
        self.literal = re.compile(literal, re.I)
        self.decimal = _References("&#", decimal)
        self.hexadecimal = _References("&#x", hexadecimal)
        self.names = _Names(names)

    def ends(self, markup: str, at: int) -> Iterator[int]:
        if self.literal.match(markup, at):
            yield at + 1
        if markup.startswith("&", at):
            yield from self.decimal.ends(markup, at)
            yield from self.hexadecimal.ends(markup, at)
            yield from self.names.ends(markup, at)


@functools.lru_cache(maxsize=1024)  # keys are made of a few dozen characters
def _char(char: str) -> _CharForms:
    return _CharForms(char)


class _Noise:
    """``html_noise()`` in pieces: where each reading of one of it at a place ends, in
    the pattern's order (a comment's shortest first: it is lazy)."""

    def __init__(self) -> None:
        self.tag = re.compile(_TAG, re.I)
        self.text = re.compile(text_noise(), re.I)
        self.decimal = _References("&#", _DROPPED_DECIMAL)
        self.hexadecimal = _References("&#x", _DROPPED_HEX)
        self.names = _Names(tuple(re.escape(n) for n in _dropped_names()))

    def ends(self, markup: str, at: int) -> Iterator[int]:
        if markup.startswith("<", at):
            if markup.startswith("<!--", at):
                body = at + 4
                # the body holds no "<" and TAG_MAX characters at most: each search stops
                # there (unbounded, a part of many "<!--" and no "-->" was quadratic)
                last = body + TAG_MAX
                stop = markup.find("<", body, last)
                last = last if stop < 0 else stop
                close = markup.find("-->", body, last + 3)
                while close >= 0:
                    yield close + 3
                    close = markup.find("-->", close + 1, last + 3)
            found = self.tag.match(markup, at)
            if found:
                yield found.end()
        elif markup.startswith("&", at):
            yield from self.decimal.ends(markup, at)
            yield from self.hexadecimal.ends(markup, at)
            yield from self.names.ends(markup, at)
        else:
            found = self.text.match(markup, at)
            if found:
                yield found.end()


@functools.cache
def _noise() -> _Noise:
    return _Noise()


@functools.lru_cache(maxsize=2048)  # one for each pair of characters a key starts with
def _starts(first: str, second: str) -> re.Pattern[str]:
    """Where a key starting ``first``, ``second`` may start: ``first`` as a character
    followed by ``second`` or by the start of anything that may stand between them; or a
    reference (which may be ``first``)."""
    literal, second_literal = _form_parts(first)[0], _form_parts(second)[0]
    then = f"{second_literal}|[<&]|{text_noise()}"
    return re.compile(f"{literal}(?={then})|&", re.I)


def replace_key(markup: str, key: str, by: str, budget: int = STEPS) -> str:
    """``forms_pattern(key).sub(by, markup)``, without making the pattern when ``key``
    has two characters or more, none U+0000, and following it costs at most ``budget``
    steps."""
    if len(key) >= 2 and "\x00" not in key:  # (a reference to U+0000 is all zeros)
        try:
            spans = _spans(markup, key, budget)
        except _TooDear:
            pass
        else:
            pieces, done = [], 0
            for start, end in spans:
                pieces += [markup[done:start], by]
                done = end
            return "".join([*pieces, markup[done:]])
    return forms_pattern(key).sub(by, markup)


def _spans(markup: str, key: str, budget: int) -> list[tuple[int, int]]:
    """Where ``forms_pattern(key)`` matches in ``markup``, as ``finditer`` finds them."""
    chars = [_char(c) for c in key]
    noise = _noise()
    failed: set[tuple[int, int]] = set()  # (place, character): the key cannot go on
    spans: list[tuple[int, int]] = []
    steps = 0
    starts = _starts(key[0], key[1])
    # the rest of a key of ASCII letters, digits and "-", as an order writes it: where the
    # HTML holds it so after the first character, nothing may stand between (no "<", "&"
    # or dropped character), and the first way the pattern tries is that one
    written = key[1:].lower() if _WRITTEN.fullmatch(key) else None
    at = 0
    while (start := starts.search(markup, at)) is not None:
        begin = start.start()
        steps += 1
        if steps > budget:
            raise _TooDear
        end = None
        for first in chars[0].ends(markup, begin):
            if written is not None:
                following = markup[first : first + len(written)]
                if following.isascii() and following.lower() == written:
                    end = first + len(written)
                    break
            # depth first, each place's readings in the pattern's order: what may stand
            # between two characters (as many as there are: the pattern's loop is
            # greedy), then the next character; a place already failed fails again
            stack = [(first, 1, _moves(markup, first, 1, chars, noise))]
            while stack:
                place, index, moves = stack[-1]
                move = next(moves, None)
                if move is None:
                    failed.add((place, index))
                    stack.pop()
                    continue
                after, next_index = move
                if next_index == len(chars):
                    end = after
                    break
                if (after, next_index) in failed:
                    continue
                steps += 1
                if steps > budget:
                    raise _TooDear
                stack.append((after, next_index, _moves(markup, after, next_index, chars, noise)))
            if end is not None:
                break
        if end is None:
            at = begin + 1
        else:
            spans.append((begin, end))
            at = end
    return spans


_WRITTEN = re.compile(r"[A-Za-z0-9-]+")


def _moves(
    markup: str, at: int, index: int, chars: list[_CharForms], noise: _Noise
) -> Iterator[tuple[int, int]]:
    """From ``at``, before character ``index`` of the key: each thing that may stand
    there (the key still before ``index``), then each reading of the character."""
    for end in noise.ends(markup, at):
        yield end, index
    for end in chars[index].ends(markup, at):
        yield end, index + 1
