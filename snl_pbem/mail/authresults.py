"""Authentication-Results (RFC 8601), read by its grammar, and whether they vouch for a From.

The referee's own MTA (OpenDKIM and OpenDMARC behind Postfix, rspamd, ...) writes::

    Authentication-Results: mx.example.org;
            dkim=pass (2048-bit key; unprotected) header.d=example.org header.s=mail;
            dmarc=pass (p=reject dis=none) header.from=example.org

An ``authserv-id``, then results separated by ``;``: ``method=result`` and
``ptype.property=value`` pairs. Comments (in parentheses, nested) and quoted strings
may hold anything, ``;`` and ``dkim=pass`` included, and several values come from the
sender (the signing domain, the From domain, the envelope sender), so the header is
read token by token, never searched for words: what a comment or a quoted string says
counts for nothing, and a value is compared as a whole domain, never as a prefix.

A From domain is vouched for when:

- a ``dmarc=pass`` result names it (``header.from``), or
- a ``dkim=pass`` result's signing domain (``header.d``, else the domain of
  ``header.i``) is *aligned* with it: DMARC's relaxed alignment (RFC 7489 §3.1.1) on
  label boundaries. ``example.org`` signs for ``example.org`` and
  ``mail.example.org``; never ``example.org.evil.example`` or ``example.org-mail.example``
  for ``example.org``;

and never when a ``dmarc`` result names another From domain (our MTA read another From
than we did) or says ``fail`` (it contradicts any pass beside it). ``dmarc=none`` (the
domain publishes no policy) leaves the answer to DKIM.

Relaxed alignment compares organisational domains, which takes the Public Suffix List;
we carry none, so a signing domain is accepted when it equals the From domain or is a
parent of it on a label boundary, and is not a bare top-level domain (stricter than
DMARC in one way: ``mail.example.org`` does not sign for ``example.org``). A parent that is
a public suffix of more than one label (``co.uk`` for ``ann@example.co.uk``) would pass:
to sign as ``co.uk`` one must publish a key in the registry's own zone, which a player
cannot do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_SPECIALS = frozenset(';="() \t\r\n')
_FIELD_START = re.compile(r"\r?\n(?=[^ \t\r\n])")


@dataclass(frozen=True)
class Result:
    """One ``method=result`` with its properties (names lower-cased, values as written)."""

    method: str
    result: str
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AuthResults:
    """One Authentication-Results field: whose it is and what it says."""

    authserv_id: str
    results: tuple[Result, ...]


@dataclass(frozen=True)
class _Token:
    kind: str
    """``word``, ``quoted``, ``;`` or ``=``."""
    text: str
    spaced: bool
    """Whitespace or a comment came before it (so ``"a b"@example.org`` is one value)."""


class _Malformed(ValueError):
    pass


def _tokens(value: str) -> list[_Token]:
    """The header's words, quoted strings, ``;`` and ``=``; comments are dropped. An
    unclosed comment or quoted string makes the whole field unreadable."""
    tokens: list[_Token] = []
    i, spaced, n = 0, True, len(value)
    while i < n:
        char = value[i]
        if char in " \t\r\n":
            i, spaced = i + 1, True
        elif char == "(":  # RFC 5322 comment: nested, with quoted pairs
            depth, i = 1, i + 1
            while depth:
                if i >= n:
                    raise _Malformed("unclosed comment")
                if value[i] == "\\":
                    i += 1
                elif value[i] == "(":
                    depth += 1
                elif value[i] == ")":
                    depth -= 1
                i += 1
            spaced = True
        elif char == '"':
            text, i = [], i + 1
            while True:
                if i >= n:
                    raise _Malformed("unclosed quoted string")
                if value[i] == "\\" and i + 1 < n:
                    text.append(value[i + 1])
                    i += 2
                    continue
                if value[i] == '"':
                    i += 1
                    break
                text.append(value[i])
                i += 1
            tokens.append(_Token("quoted", "".join(text), spaced))
            spaced = False
        elif char in ";=":
            tokens.append(_Token(char, char, spaced))
            i, spaced = i + 1, False
        elif char == ")":
            raise _Malformed("unopened comment")
        else:
            start = i
            while i < n and value[i] not in _SPECIALS:
                i += 1
            tokens.append(_Token("word", value[start:i], spaced))
            spaced = False
    return tokens


def _segments(tokens: list[_Token]) -> list[list[_Token]]:
    segments: list[list[_Token]] = [[]]
    for token in tokens:
        if token.kind == ";":
            segments.append([])
        else:
            segments[-1].append(token)
    return segments


def _result(segment: list[_Token]) -> Result:
    """``method[/version] = result`` then ``name = value`` pairs (RFC 8601 §2.2); a value
    may be a quoted local part glued to ``@domain``. Names other than ``ptype.property``
    and ``reason`` (Microsoft's ``action=``) are kept too: only known names are read."""
    if len(segment) < 3 or [t.kind for t in segment[:3]] != ["word", "=", "word"]:
        raise _Malformed("no method=result")
    method = segment[0].text.split("/", 1)[0].lower()
    properties: dict[str, str] = {}
    rest = segment[3:]
    while rest:
        if len(rest) < 3 or rest[0].kind != "word" or rest[1].kind != "=":
            raise _Malformed("a property without a value")
        if rest[2].kind not in ("word", "quoted"):
            raise _Malformed("a property without a value")
        name, value, rest = rest[0].text.lower(), rest[2].text, rest[3:]
        while rest and not rest[0].spaced and rest[0].kind in ("word", "quoted"):
            value, rest = value + rest[0].text, rest[1:]
        if name in properties:  # two values for one property: which one would we believe?
            raise _Malformed(f"{name} twice")
        properties[name] = value
    return Result(method, segment[2].text.lower(), properties)


def parse(value: str) -> AuthResults | None:
    """One field's value, or None if it cannot be read by the grammar. A result that
    cannot be read is left out (it vouches for nothing); the others stand."""
    try:
        segments = _segments(_tokens(value))
    except _Malformed:
        return None
    head = segments[0]
    if not head or head[0].kind not in ("word", "quoted"):
        return None
    if len(head) > 2 or (len(head) == 2 and not head[1].text.isdigit()):
        return None  # authserv-id [version]
    results = []
    for segment in segments[1:]:
        if [t.text.lower() for t in segment] == ["none"]:
            continue  # RFC 8601 "none": nothing was checked
        try:
            results.append(_result(segment))
        except _Malformed:
            continue
    return AuthResults(head[0].text.lower(), tuple(results))


def fields(stored: str) -> list[str]:
    """The fields of ``InboundMessage.auth_results`` (one per line; folded lines go on
    with white space, so they stay with their field)."""
    return [f for f in _FIELD_START.split(stored) if f.strip()]


def normal_domain(value: str | None) -> str | None:
    """A domain to compare: lower case, no trailing dot, ASCII (xn--) form; None when it
    is not a domain (empty labels, spaces)."""
    if not value:
        return None
    domain = value.strip().rstrip(".").lower()
    try:
        domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        if not domain.isascii():
            return None
    labels = domain.split(".")
    if any(not label or len(label) > 63 for label in labels) or len(domain) > 253:
        return None
    if any(c in domain for c in ' \t"@;=()[]\\/,<>'):
        return None
    return domain


def aligned(from_domain: str, signing_domain: str) -> bool:
    """DMARC relaxed alignment on label boundaries, without the Public Suffix List: the
    signing domain is the From domain or a parent of it, and not a bare TLD."""
    return "." in signing_domain and (
        from_domain == signing_domain or from_domain.endswith("." + signing_domain)
    )


def _signing_domain(result: Result) -> str | None:
    if "header.d" in result.properties:
        return normal_domain(result.properties["header.d"])
    identity = result.properties.get("header.i")
    return normal_domain(identity.rpartition("@")[2]) if identity else None


def vouched(values: Iterable[str], authserv_id: str, from_domain: str) -> bool:
    """True when the fields (``values``) written by ``authserv_id`` say ``from_domain``
    authenticated the message (see the module's docstring). Fields of any other
    authserv-id, results hidden in comments or quoted strings, and unreadable fields
    count for nothing."""
    ours = normal_domain(from_domain)
    if ours is None:
        return False
    results = [
        result
        for value in values
        if (parsed := parse(value)) is not None and parsed.authserv_id == authserv_id.lower()
        for result in parsed.results
    ]
    for r in results:
        if r.method != "dmarc":
            continue
        named = r.properties.get("header.from")
        if named is not None and normal_domain(named) != ours:
            return False  # our MTA read another From than we did
        if r.result == "fail":
            return False
    if any(
        r.method == "dmarc" and r.result == "pass" and "header.from" in r.properties
        for r in results
    ):
        return True
    return any(
        r.method == "dkim"
        and r.result == "pass"
        and (signer := _signing_domain(r)) is not None
        and aligned(ours, signer)
        for r in results
    )
