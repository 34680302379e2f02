"""Every template rendered with random values (tests/mail/test_template_layout.py, and
tests/i18n: the same draws in every language).

Each value a template reads is a :class:`Value`, drawn at random but the same every time
the template looks at it: true or false, empty or holding two items, a number (2 or 0) or
a word. So the renderings of one seed take the same branches in every language.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import meta

from snl_pbem.i18n import speaking
from snl_pbem.mail.render import environment

FOLDER = Path(str(resources.files("snl_pbem.templates")))
TEMPLATES = sorted(p.relative_to(FOLDER).as_posix() for p in FOLDER.rglob("*.j2"))
INCLUDED_ONLY = {n for n in TEMPLATES if not (FOLDER / n).read_text().startswith("Subject: ")}
"""Parts pulled into other templates with ``{% include %}``: checked inside them."""
RENDERS = 300
"""Random renderings per template: enough for every template here to reach each of its
branches next to its signature many times over (the STATUS bug of issue 21 shows in about
one rendering in ten)."""


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
        return "w9" if self else ""  # as wide as a number: a value, never an English word

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


def drawn(name: str, renders: int = RENDERS) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each seed's random values for ``name``'s names (sorted: the same draws every run)."""
    names = sorted(names_of(name))
    for seed in range(renders):
        draw, seen = random.Random(f"{name}/{seed}"), {}
        context: dict[str, Any] = {}
        for key in names:
            missing = draw.random() < 0.1
            context[key] = None if missing else Value(key, draw, seen)
        yield seed, context


def rendered(name: str, context: dict[str, Any], language: str = "en") -> str | None:
    """``name`` rendered in ``language`` with ``context``, or None when the draw is one the
    template cannot take (a value it treats as a date, say, drawn as missing)."""
    with speaking(language) as code:
        try:
            return environment(code).get_template(name).render(**context)
        except Exception:  # a context no caller gives (None where a value is needed)
            return None


def renderings(name: str, language: str = "en") -> Iterator[str]:
    """``name`` rendered with random values; a draw the template cannot take is skipped,
    and most draws must render."""
    done = 0
    for _, context in drawn(name):
        text = rendered(name, context, language)
        if text is None:
            continue
        done += 1
        yield text
    assert done >= RENDERS // 4, f"{name}: only {done} of {RENDERS} draws rendered"
