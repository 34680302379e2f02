"""HTML made text in time linear in its size, whatever its tags.

A message written in HTML is read as the text a person sees: block elements
become lines, and quoted parts (blockquotes, quote containers found by tag,
class or id, and everything from the first reply header on) are left out.

Two readers do this. An ordinary message goes through a real HTML parser
(lexbor, in C) and CSS selectors. But building the tree costs time in
proportion to its depth for each tag (a ``<div>`` looks down the stack of open
elements for a ``<p>`` to close), and the selectors and the line breaks cost
Python calls per element: 1 MiB of nested ``<div>`` s ran past the sandbox's
10 s. So the tags are counted first (a ``<`` count, then a pass over at most
``MAX_TAGS`` tag names for the depth the tree would reach): past ``MAX_TAGS``
tags or ``MAX_DEPTH`` levels, the message is read by a plain strip instead
(``strip_html``), a few regular-expression passes that never look back and
never nest. The strip applies the same rules as the selectors (``_DROP``,
``_QUOTE_STARTS``, ``_BLOCKS``), so the quoted text stays out either way;
``tests/mail/test_reading.py`` reads the client corpus both ways and
``tests/benchmarks/bench_html.py`` times the worst shapes found.

Python's ``re`` is fast only when a pattern starts with a literal or a small
set of characters: ``re.IGNORECASE`` makes every position a full attempt. So
the strip's patterns spell case out (``[dD][iI][vV]``) instead.
"""

from __future__ import annotations

import html as htmllib
import re
from collections.abc import Iterable

from selectolax.lexbor import LexborHTMLParser

MAX_TAGS = 20_000
"""More ``<`` than this (a real reply has hundreds, a long Outlook thread a few thousand)
and the message is stripped, not parsed."""
MAX_DEPTH = 400
"""Deeper nesting than this (real mail: a few dozen levels) and the message is stripped."""
MAX_ATTRIBUTES = 200
"""A tag with more attributes than this (real mail: a handful) and the message is stripped:
the parser compares each new attribute of a tag with all those before it."""

_CUT = "\ue000snl-cut\ue000"
"""A marker put into HTML before the first quoted part (private-use characters)."""


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# -- the rules, as CSS for the parser ---------------------------------------------------
# (the strip below applies the same rules by name: change both together)

_DROP = (
    # quoted parts that are whole elements: they go, what stands after them stays (a reply
    # written below the quote)
    "head, script, style, title, template, blockquote, .moz-cite-prefix, .gmail_attr, "
    ".gmail_quote, .gmail_quote_container, .yahoo_quoted, .moz-forward-container, "
    "[id*='quote' i], [class*='quote' i], #mail-editor-reference-message-container"
)
_QUOTE_STARTS = (
    # Outlook's reply headers: the quote is not inside them but follows them, so the first
    # of these in document order starts the quote, and everything after it goes
    "#divRplyFwdMsg, #appendonsend, #x_divRplyFwdMsg, #x_appendonsend, "
    "[class*='OutlookMessageHeader' i], hr#stopSpelling, "
    "div[style*='border-top:solid #E1E1E1' i], div[style*='border-top: solid #E1E1E1' i], "
    "div[style*='border-top:solid #B5C4DF' i], div[style*='border-top: solid #B5C4DF' i]"
)
_BLOCK_NAMES = _names(
    "br p div li tr td th h1 h2 h3 h4 h5 h6 table pre hr ul ol address article section header "
    "footer dd dt"
)
_BLOCKS = ", ".join(sorted(_BLOCK_NAMES))

# -- the same rules, by name, for the strip ---------------------------------------------

_DROP_NAMES = frozenset({"template", "blockquote"})
"""(Scripts, styles and titles are removed first; the head then holds nothing to read.)"""
_DROP_CLASSES = ("quote", "moz-cite-prefix", "gmail_attr", "moz-forward-container")
_DROP_IDS = ("quote", "mail-editor-reference-message-container")
_START_IDS = frozenset({"divrplyfwdmsg", "appendonsend", "x_divrplyfwdmsg", "x_appendonsend"})
_START_STYLES = ("border-top:solid#e1e1e1", "border-top:solid#b5c4df")
_DROPPABLE = _names(
    "a article aside b blockquote center dd div dl dt em figure font footer header i li main "
    "nav ol p pre section span strong table tbody td template th tr u ul"
)
"""The elements the strip drops by class or id: any real quote container is one of these.
Each has its own pattern, so finding where one ends looks at its own tags only."""
_RAW_TEXT = ("script", "style", "title", "xmp", "iframe", "noembed", "noframes")
"""Elements whose content is not markup and never shown: it runs to their end tag,
whatever it holds."""


def _initials(words: Iterable[str]) -> str:
    """The first letters of ``words`` in both cases, for a character class: checked first,
    it spares most tries the whole alternation."""
    return "".join(sorted({c for w in words for c in (w[0].lower(), w[0].upper())}))


def _words(words: list[str]) -> str:
    """A pattern for any of ``words`` in any case, spelt out (see the module's docstring)."""
    return "|".join(
        "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)
        for word in words
    )


_END = r"(?=[\s/>]|\Z)"
_NOISE = re.compile(
    # comments (an unclosed one runs to the end, as in HTML), doctypes, CDATA and
    # processing instructions, and elements whose content is not text
    rf"<(?=[!?{_initials(_RAW_TEXT)}])(?:!--(?:-?>|.*?-->|.*)|[!?][^>]*+>?|(?:"
    + "|".join(
        rf"{_words([n])}{_END}[^>]*+>?(?:.*?(?=</{_words([n])}[\s/>])|.*)" for n in _RAW_TEXT
    )
    + "))",
    re.DOTALL,
)
_ANY_TAG = re.compile(r"</?[A-Za-z][^>]*+>?")
_BLOCK_TAG = re.compile(
    rf"</?(?=[{_initials(_BLOCK_NAMES)}])(?:{_words(sorted(_BLOCK_NAMES))}){_END}[^>]*+>?"
)
# these run on the text lower-cased (see strip_html)
_DROP_WORDS = re.compile("quote|moz-cite-prefix|gmail_attr|moz-forward-container|template")
_START_WORDS = re.compile("divrplyfwdmsg|appendonsend|outlookmessageheader|stopspelling|border-top")
_SAME_NAME = {name: re.compile(rf"<(/?){name}{_END}") for name in _DROPPABLE}
_TAG = re.compile(r"<(/?)([a-z][^\s/>]*+)([^>]*+)>?")
_ATTRIBUTE = re.compile(
    r"(?:^|[\s\"'/])(class|id|style)\s*+=\s*+(?:\"([^\"]*+)\"|'([^']*+)'|([^\s>]*+))"
)
MAX_CHECKS = 2_000
"""Tags that may drop or start a quote looked at, at most (each costs a few Python calls;
a real reply has a handful). Past it, the rest of the message is taken as quoted."""


def html_text(html: str, limit: int) -> str:
    """The text of ``html`` (at most ``limit`` characters), quoted parts left out. Never
    raises: a parser failure leaves nothing to read."""
    html = html.replace("\ue000", "")
    try:
        if html.count("<") > MAX_TAGS or _MANY_ATTRIBUTES.search(html) or _depth(html) > MAX_DEPTH:
            return strip_html(html, limit)
        return _parsed_text(html)[:limit]
    except Exception:
        return ""


def _parsed_text(html: str) -> str:
    tree = LexborHTMLParser(html)
    for node in tree.css(_DROP):
        node.decompose()
    for node in tree.css(_QUOTE_STARTS):
        node.insert_before(_CUT)
    for node in tree.css(_BLOCKS):
        if node.tag != "br":
            node.insert_before("\n")
        node.insert_after("\n")  # a <br> ends its line; it does not make a blank one
    root = tree.body or tree.root
    text = root.text(deep=True) if root is not None else ""
    return text.split(_CUT, 1)[0].replace("\ue000", "")


# -- how deep the tree would be -----------------------------------------------------------

_VOID = _names(
    "area base basefont bgsound br col embed frame hr img input keygen link meta param source "
    "track wbr html body"
)
"""Elements that hold nothing (and html and body, which hold everything)."""
_PHRASING = _names(
    "a abbr b bdi bdo big cite code del dfn em font i ins kbd mark nobr q s samp small span "
    "strike strong sub sup tt u var o:p"
)
_CLOSES_P = _names(
    "address article aside blockquote center details dialog dir div dl fieldset figcaption "
    "figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr li main menu nav ol p pre section "
    "table ul dd dt"
)
_IMPLIED_BY = {
    "li": ("li",),
    "dd": ("dd", "dt"),
    "dt": ("dd", "dt"),
    "option": ("option",),
    "td": ("td", "th"),
    "th": ("td", "th"),
    "tr": ("td", "th", "tr"),
}
_LOOK_DOWN = 8
"""How far down the stack an implied end tag is looked for (looking down a deep stack for
every tag is what makes a parser quadratic)."""
_TAG_NAME = re.compile(r"<(/?)([A-Za-z][^\s/>]*+)")
_MANY_ATTRIBUTES = re.compile(rf"<[A-Za-z][^\s<>]*+(?:\s++[^\s<>]++){{{MAX_ATTRIBUTES}}}")
"""(Each try stops at the next ``<``: the search is linear.)"""


def _depth(html: str) -> int:
    """How deep the tree of ``html`` would go, counted from its tag names alone (tags in
    comments and attribute values count too: this errs on the deep side). An end tag pops
    down to its element when one is open (a count per name says so), and the ends HTML
    implies (a ``<p>`` closed by a ``<div>``, an ``<li>`` by the next) are looked for near
    the top of the stack only. Called on at most ``MAX_TAGS`` tags."""
    names: list[str] = []
    counts: dict[str, int] = {}
    deepest = 0

    def close(name: str) -> None:
        if counts.get(name):
            while names:
                popped = names.pop()
                counts[popped] -= 1
                if popped == name:
                    return

    def close_near(name: str) -> None:
        for depth, open_name in enumerate(reversed(names)):
            if depth >= _LOOK_DOWN or (open_name != name and open_name not in _PHRASING):
                return
            if open_name == name:
                close(name)
                return

    for found in _TAG_NAME.finditer(html):
        name = found.group(2).lower()
        if name in _VOID:
            continue
        if found.group(1):
            close(name)
            continue
        if name in _CLOSES_P and counts.get("p"):
            close_near("p")
        for implied in _IMPLIED_BY.get(name, ()):
            if counts.get(implied):
                close_near(implied)
        names.append(name)
        counts[name] = counts.get(name, 0) + 1
        deepest = max(deepest, len(names))
    return deepest


# -- the strip ----------------------------------------------------------------------------


def strip_html(html: str, limit: int) -> str:
    """The text of ``html`` in time linear in its size, for any input. Each step is one
    regular expression over the text, and only tags that may drop or start a quote (at
    most ``MAX_CHECKS``) are looked at in Python: comments, scripts and styles go;
    dropped elements (``_DROP``) go to their end tag; everything from the first quote
    start on goes; block tags become line breaks and other tags nothing; then the parser
    reads the entities of what is left, which holds no tag any more (a single text
    node: no depth, no cost per element).

    Quote markup is looked for in a lower-cased copy, where patterns are plain words
    (fast: see the module's docstring); the copy has the same length, so a place in one
    is the same place in the other (U+0130, the one character whose lower case is two,
    is a plain "i" in the copy)."""
    html = _NOISE.sub("", html)
    low = html.replace("\u0130", "i").lower()
    kept: list[str] = []
    pos = 0
    finder = _TagFinder(_DROP_WORDS, low)
    for _check in range(MAX_CHECKS):
        start = finder.next(pos)
        if start is None:
            kept.append(html[pos:])
            break
        tag = _TAG.match(low, start)
        if tag is None or tag.group(1):
            continue
        name = tag.group(2)
        if name in _SAME_NAME and _drops(name, _attributes(tag.group(3))):
            kept.append(html[pos:start])
            pos = _element_end(low, name, tag.end())
    else:
        kept.append(html[pos : finder.next(pos)])  # too many: the rest is taken as quoted
    html = "".join(kept)
    low = html.replace("\u0130", "i").lower()
    finder = _TagFinder(_START_WORDS, low)
    for _check in range(MAX_CHECKS):
        start = finder.next(0)
        if start is None:
            break
        tag = _TAG.match(low, start)
        if tag and not tag.group(1) and _starts_quote(tag.group(2), _attributes(tag.group(3))):
            html = html[:start]
            break
    else:
        html = html[: finder.next(0)]
    # a "<" left is text; it is hidden from the parser (which would read "<<b>div>" made
    # "<div>" as a tag) by a private-use character, and put back after
    text = _ANY_TAG.sub("", _BLOCK_TAG.sub("\n", html.replace(_LT, ""))).replace("<", _LT)
    body = LexborHTMLParser("<body>" + text).body
    return body.text(deep=True).replace(_LT, "<")[:limit] if body is not None else ""


_LT = "\ue001"


class _TagFinder:
    """Finds, in order, each tag holding one of ``words`` (in its name or attributes),
    each once. A tag is what stands between a ``<`` and the next ``>``. The text is
    looked at once, forward: between two words only back to the one before."""

    def __init__(self, words: re.Pattern[str], text: str) -> None:
        self.words, self.text = words, text
        self.last = 0
        """Where the last word was found (or where the caller skipped to)."""
        self.search_from = 0
        self.tag_start = -1
        """Where the tag holding it starts (-1: it stood in text)."""

    def next(self, skip_to: int) -> int | None:
        """The start of the next tag holding a word, at or after ``skip_to`` (which is
        never inside a tag: the end of an element the caller dropped)."""
        if skip_to > self.last:
            self.last = self.search_from = skip_to
            self.tag_start = -1
        found = self.words.search(self.text, self.search_from)
        while found is not None:
            at = found.start()
            lt, gt = self.text.rfind("<", self.last, at), self.text.rfind(">", self.last, at)
            self.last, self.search_from = at, at + 1
            if lt > gt:
                if lt != self.tag_start:
                    self.tag_start = lt
                    return lt
            elif gt > lt:
                self.tag_start = -1
            found = self.words.search(self.text, self.search_from)
        return None


def _element_end(html: str, name: str, pos: int) -> int:
    """Where the element ``name`` whose start tag ends at ``pos`` ends: after its own end
    tag, counting the same elements nested in it (an end tag closes the innermost open
    one, as in HTML); a ``<p>`` or ``<li>`` also ends where the next one starts. An
    element never closed runs to the end."""
    depth = 1
    implied = name in _IMPLIED_BY or name == "p"
    for found in _SAME_NAME[name].finditer(html, pos):
        if found.group(1):
            depth -= 1
            if depth == 0:
                tag = _TAG.match(html, found.start())
                return tag.end() if tag else found.end()
        elif implied and depth == 1:
            return found.start()
        else:
            depth += 1
    return len(html)


def _attributes(text: str) -> dict[str, str]:
    """The class, id and style of a start tag (given lower-cased), entities read."""
    found: dict[str, str] = {}
    for match in _ATTRIBUTE.finditer(text):
        name = match.group(1)
        if name not in found:
            value = next((g for g in match.groups()[1:] if g is not None), "")
            found[name] = htmllib.unescape(value).lower() if "&" in value else value
    return found


def _drops(name: str, attributes: dict[str, str]) -> bool:
    if name in _DROP_NAMES:
        return True
    css_class, element_id = attributes.get("class", ""), attributes.get("id", "")
    return any(c in css_class for c in _DROP_CLASSES) or any(i in element_id for i in _DROP_IDS)


def _starts_quote(name: str, attributes: dict[str, str]) -> bool:
    element_id = attributes.get("id", "")
    if element_id in _START_IDS or "outlookmessageheader" in attributes.get("class", ""):
        return True
    if name == "hr" and element_id == "stopspelling":
        return True
    style = "".join(attributes.get("style", "").split())
    return name == "div" and any(s in style for s in _START_STYLES)
