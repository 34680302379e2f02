"""Words for people: English counts ("1 snake", "0 snakes", "2 snakes"), and text that a
mail shows in its reader's language (:class:`Text`, made by :func:`tr` and :func:`ntr`; a
list of them by :func:`joined`; a sentence the database kept as English found again by
:func:`reread`).

Every count a person reads (mail, command output, a message naming a problem) takes its
noun, or a verb that agrees with it, from here; the templates have the same two as the
filters ``counted`` and ``agree``. One place, so that a move to gettext's plural forms
(ngettext) changes only this module. It sits in ``rules``, the innermost layer, so that
every other layer, the rules engine's own messages included, may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Protocol


def agree(count: float, singular: str, plural: str | None = None) -> str:
    """The word that agrees with ``count``: ``singular`` for exactly 1, else ``plural``
    (default: ``singular`` + "s"). Also for verbs: ``agree(n, "was", "were")``."""
    if count == 1:
        return singular
    return plural if plural is not None else singular + "s"


def counted(count: float, singular: str, plural: str | None = None) -> str:
    """``count`` and its noun: ``counted(1, "snake")`` is "1 snake", ``counted(0, "die",
    "dice")`` is "0 dice"."""
    return f"{count} {agree(count, singular, plural)}"


# -- words in the reader's language ------------------------------------------------------


class Translator(Protocol):
    """What a gettext catalog gives (``gettext.GNUTranslations``)."""

    def gettext(self, message: str, /) -> str: ...

    def ngettext(self, singular: str, plural: str, n: int, /) -> str: ...


_TRANSLATOR: ContextVar[Translator | None] = ContextVar("snl_pbem_translator", default=None)
"""The catalog of the mail being written (``snl_pbem.i18n.speaking`` sets it); None:
English."""


def translator() -> Translator | None:
    """The catalog words are put into now (None: English)."""
    return _TRANSLATOR.get()


def set_translator(value: Translator | None) -> Token[Translator | None]:
    """Put words into ``value``'s language until ``reset_translator`` (snl_pbem.i18n's
    ``speaking`` does both)."""
    return _TRANSLATOR.set(value)


def reset_translator(token: Token[Translator | None]) -> None:
    _TRANSLATOR.reset(token)


class Text(str):
    """Words for a person, written in English, shown in the reader's language.

    Its value as a ``str`` is the English (logs, the referee, tests); ``str()`` of it while
    a mail is written in another language (``snl_pbem.i18n.speaking``) is the catalog's
    words, with the same ``{name}`` values put in. Made by :func:`tr` and :func:`ntr`,
    which are the names Babel extracts."""

    __slots__ = ("_args", "_msgid", "_n", "_plural")
    _msgid: str
    _plural: str | None
    _n: int
    _args: tuple[tuple[str, object], ...]

    def __new__(
        cls, msgid: str, plural: str | None = None, n: int = 1, args: Mapping[str, object] = {}
    ) -> Text:
        english = msgid if plural is None or n == 1 else plural
        self = super().__new__(cls, _put(english, args))
        self._msgid, self._plural, self._n, self._args = msgid, plural, n, tuple(args.items())
        return self

    def __str__(self) -> str:
        catalog = _TRANSLATOR.get()
        if catalog is None:
            return str.__str__(self)
        if self._plural is None:
            words = catalog.gettext(self._msgid)
        else:
            words = catalog.ngettext(self._msgid, self._plural, self._n)
        return _put(words, dict(self._args))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __reduce__(self) -> tuple[object, ...]:
        return (Text, (self._msgid, self._plural, self._n, dict(self._args)))


def _put(words: str, args: Mapping[str, object]) -> str:
    """``words`` with its ``{name}`` values; a value that is itself Text (or a date) is
    shown in the same language (``str()``, not the English ``format`` would take)."""
    if not args:
        return words
    return words.format(**{k: str(v) for k, v in args.items()})


def tr(msgid: str, /, **args: object) -> Text:
    """``msgid`` (English, with ``{name}`` for each of ``args``) in the reader's
    language."""
    return Text(msgid, None, 1, args)


def ntr(singular: str, plural: str, n: int, /, **args: object) -> Text:
    """The form for ``n`` of ``singular``/``plural`` in the reader's language; ``{n}`` is
    ``n``, and ``args`` fill the rest."""
    return Text(singular, plural, n, {"n": n, **args})


def joined(separator: str, parts: Iterable[object]) -> str:
    """``parts`` joined by ``separator`` (a list of names, of a move's events), each part
    and the separator shown in the reader's language when they are ``Text``: never
    ``separator.join(...)`` of Text, which is English for good. Its ``str`` value is the
    English, as a Text's is."""
    return Joined(separator, tuple(parts))


class Joined(str):
    """What :func:`joined` makes: shown in the reader's language, part by part."""

    __slots__ = ("_parts", "_separator")
    _separator: str
    _parts: tuple[object, ...]

    def __new__(cls, separator: str, parts: tuple[object, ...]) -> Joined:
        self = super().__new__(cls, _english(separator).join(map(_english, parts)))
        self._separator, self._parts = separator, parts
        return self

    def __str__(self) -> str:
        if _TRANSLATOR.get() is None:
            return str.__str__(self)
        return str(self._separator).join(map(str, self._parts))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __reduce__(self) -> tuple[object, ...]:
        return (Joined, (self._separator, self._parts))


def _english(value: object) -> str:
    """A value's English: a str's (a Text's) own value, anything else's ``str``."""
    return str.__str__(value) if isinstance(value, str) else str(value)


# -- sentences kept as English --------------------------------------------------------------

_REREADERS: list[Callable[[str], Text | None]] = []


def rereader(read: Callable[[str], Text | None]) -> Callable[[str], Text | None]:
    """Register ``read``, which gives a sentence of its module back as ``Text`` from the
    English the database kept of it (None: not one of its sentences). The problems of an
    order set are stored as their English, and shown again later (a reminder, the report
    of the referee's move): :func:`reread` finds their words again."""
    _REREADERS.append(read)
    return read


def reread(kept: str) -> str:
    """``kept`` (English, as stored) as the ``Text`` it was written as, so that a mail
    shows it in its reader's language; ``kept`` itself when no module knows it."""
    if isinstance(kept, Text):
        return kept
    for read in _REREADERS:
        found = read(kept)
        if found is not None:
            return found
    return kept
