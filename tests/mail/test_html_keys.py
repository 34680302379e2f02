"""A key in HTML replaced without making its pattern (issue 23): ``replace_key`` follows
the key through the HTML piece by piece and must replace exactly what the key's pattern
(``forms_pattern``) replaces, span for span, whatever the HTML. The pattern is the
reference: every test here compares with it, on hand-made forms where the two could part
(a reference read on a prefix of its digits, a comment that ends at several places or
reads as a tag, the limits of a tag, leading zeros, look-alikes Python's patterns take for
one another) and on many made-up messages. Redaction as a whole is in
``test_stored_redaction.py``."""

from __future__ import annotations

import collections
import random

import pytest

from snl_pbem.keys import ALPHABET, generate_key
from snl_pbem.mail import htmlkeys
from snl_pbem.mail.htmlkeys import DASHES, TAG_MAX, forms_pattern, replace_key

BY = "****"
UNBOUNDED = 10**9


def as_the_pattern_does(markup: str, key: str) -> None:
    """The spans followed are the pattern's, and so is the text replaced."""
    wanted = [found.span() for found in forms_pattern(key).finditer(markup)]
    if "\x00" not in key:  # (such a key is left to its pattern)
        assert htmlkeys._spans(markup, key, UNBOUNDED) == wanted, (key, markup)
    assert replace_key(markup, key, BY, UNBOUNDED) == forms_pattern(key).sub(BY, markup)


KEY = "abcd-efgh-jkmn-pq23"

FORMS = [
    # as written, in upper case, fullwidth, with a dash
    KEY,
    KEY.upper(),
    "\uff41\uff42\uff43\uff44-efgh-jkmn-pq23",
    KEY.replace("-", "\u2010"),
    # references, decimal and hexadecimal, with and without ";", with zeros
    "&#97;bcd&#45efgh-&#x6A;kmn&#X2D;pq23",
    "&#00000000097;bcd-efgh-jkmn-pq23",  # eight zeros: a reference to "a"
    "&#000000000097;bcd-efgh-jkmn-pq23",  # nine: not one
    "&#x0000000061bcd-efgh-jkmn-pq23",
    "&hyphen;".join(["abcd", "efgh", "jkmn", "pq23"]),
    "abcd&DASH;efgh-jkmn-pq23",
    # a reference read on a prefix of its digits: "&#456" is "-" then "6" to the pattern
    "abcd-efgh-jkmn&#456pq23",
    "abcd-efgh-jkmn-pq2&#x33a",
    "&#65313;bcd-efgh-jkmn-pq23",  # "&#65" is "A" and "313;" follows: no key
    "abcd-efgh-jkmn-pq&#50;&#51",
    # what a reader does not see, between the characters
    "ab<b>cd</b>-ef<!-- x -->gh-jk\u00admn-pq\u200b23",
    "abcd-<!-- >efgh-jkmn-pq23",  # a comment the pattern reads as a tag
    "abcd-<!--a-->efgh-->x-jkmn-pq23",
    "abcd-<!--a-->x-->efgh-jkmn-pq23",  # the comment ends at the second "-->"
    "abcd-<!---->efgh-jkmn-pq23",
    "abcd-<!-->efgh-jkmn-pq23",
    "abcd&#173;-&#8293;efgh&#x200b;-jkmn&#13;-&shy;pq&SHY23",
    "abcd&#1efgh-jkmn-pq23",  # "&#1" is a control character: dropped, "efgh" follows
    "abcd&#12;7efgh",
    "abcd \n-efgh \r\n-jkmn-pq23",
    "abcd\x01-efgh\x7f-jkmn-pq23",
    # the limits of a tag and of a comment
    f"abcd-<{'x' * TAG_MAX}>efgh-jkmn-pq23",
    f"abcd-<{'x' * (TAG_MAX + 1)}>efgh-jkmn-pq23",
    f"abcd-<!--{'x' * TAG_MAX}-->efgh-jkmn-pq23",
    f"abcd-<!--{'x' * (TAG_MAX + 1)}-->efgh-jkmn-pq23",
    "abcd-<!-- < -->efgh-jkmn-pq23",
    # a key in an attribute, in a comment, twice, overlapping, cut short
    f'<a title="{KEY}">x</a><!-- {KEY} -->{KEY}{KEY}',
    f"{KEY[:-1]}{KEY}",
    f"{KEY[:-1]}<b>",
    "",
    # comments that never close, after each letter (each search for their end is bounded)
    "a<!--b<!--c<!--d-<!--" + "-" * 50,
    "".join(f"{c}<!--" for c in KEY) + "-" * 2000,
]


@pytest.mark.parametrize("markup", FORMS)
def test_each_form_is_replaced_as_the_pattern_replaces_it(markup: str) -> None:
    as_the_pattern_does(markup, KEY)
    as_the_pattern_does(f"<p>{markup}</p>&nbsp;{markup}", KEY)


def test_the_forms_are_found_at_all() -> None:
    """The hand-made forms are not all misses: the comparison above is not empty."""
    found = [markup for markup in FORMS if forms_pattern(KEY).search(markup)]
    assert len(found) >= 20


@pytest.mark.parametrize(
    "key",
    [
        "sk",  # the long s and the Kelvin sign are "s" and "k" to the pattern
        "ik",
        "a;b",  # characters of a reference's own syntax
        "&#",
        "x1",
        "<b",
        "a b",
        "-9",
        "İx",
        "\x00a",  # a reference to U+0000 is zeros only: left to the pattern
        "a\x00",
    ],
)
def test_keys_of_any_characters_follow_the_pattern(key: str) -> None:
    pieces = ["\u017f", "\u212a", "\u0131", "\u0130", "&", "#", ";", "<", ">", " ", "\n"]
    pieces += ["x", "1", "9", "&#0", "&#x0;", "&#00a"]
    pieces += ["&#59;", "&#x26;", "&amp;", "&lt;b", "<b>", "&shy;", "-", "\u2212", "&#45"]
    rng = random.Random(key)
    for _ in range(300):
        forms = [rng.choice([c, c.upper(), *pieces]) for c in key * 2]
        as_the_pattern_does("".join(forms), key)


def test_made_up_messages_are_replaced_as_the_pattern_replaces_them() -> None:
    """4,000 made-up stretches of HTML: keys in pieces, each character in one of its forms,
    things a reader does not see and things a reader does see between them; half of them
    kept to forms that hold the key whole. Hundreds hold a key, the server's keys among
    them (counted, so that the test compares something)."""
    rng = random.Random(23)
    keys = [generate_key(rng.choice) for _ in range(6)] + ["ab", "2-9", "-a-"]
    found: collections.Counter[bool] = collections.Counter()
    for _ in range(4000):
        key = rng.choice(keys)
        markup = _made_up(key, rng, whole=rng.random() < 0.5)
        as_the_pattern_does(markup, key)
        if forms_pattern(key).search(markup):
            found[len(key) > 3] += 1
    assert found[True] >= 800 and found[False] >= 500, found


def test_the_pattern_is_not_made_for_an_order() -> None:
    """The point of it: an order's HTML is read without making its key's pattern."""
    key = generate_key()
    markup = f'<div dir="ltr">KEY {key}<br>ROLL 4&nbsp;<br></div><div>&#39;x&#39;</div>'
    before = forms_pattern.cache_info().misses
    assert replace_key(markup, key, BY) == markup.replace(key, BY)
    assert forms_pattern.cache_info().misses == before


def test_past_its_budget_the_pattern_is_made_and_used() -> None:
    """HTML much like a key, and a budget too small to follow it: the pattern replaces,
    as it would have (time stays bounded by the pattern's, as before)."""
    key = "aaaa-aaab"
    markup = "a" * 3000 + "aaaa-aaab" + "&" * 3000
    before = forms_pattern.cache_info().misses
    assert replace_key(markup, key, BY, budget=100) == forms_pattern(key).sub(BY, markup)
    assert forms_pattern.cache_info().misses == before + 1
    with pytest.raises(htmlkeys._TooDear):
        htmlkeys._spans(markup, key, 100)
    as_the_pattern_does(markup, key)


def _made_up(key: str, rng: random.Random, *, whole: bool) -> str:
    """Stretches, each a key written in forms, or something else; ``whole``: the key's
    characters right and in forms of them, with only unseen things between."""
    unseen = [
        *("<b>", "</b>", "<!-- x -->", "<!-- >", "\x01", "\u00ad", "\u200b", "\ufeff"),
        *(" \n", " \r\n", "&#173;", "&#8293;", "&#x200b;", "&#X200B;", "&#13;", "&shy;"),
        *("&SHY", "&ZeroWidthSpace;", "&#0000000173;"),
    ]
    seen = [
        *("<b>", "</b>", "<!-- x -->", "<!-- >", "<!--a-->b-->", "<!---->", "\x01", "\u00ad"),
        *("\u200b", "\u2065", "\ufeff", " \n", " \r\n", "&#173;", "&#8293;", "&#x200b;"),
        *("&#X200B", "&#13;", "&#1", "&#12", "&#127;", "&shy;", "&SHY", "&ZeroWidthSpace;"),
        *("&#0000000173;", "&#00000000173;", "<a title='", "'>", "<", ">", "&", "&amp;"),
        *("&#", "&#x", "-->", "<!--", "\u0301", " ", "\n", ";", "&nbsp;", "&#39;", "&#x0feff;"),
    ]
    parts: list[str] = []
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.7:
            written = list(key)
            if not whole and rng.random() < 0.3:  # one character wrong
                written[rng.randrange(len(written))] = rng.choice(ALPHABET + "-")
            for index, char in enumerate(written):
                parts.append(_form(char, rng, whole=whole))
                while index < len(written) - 1 and rng.random() < 0.35:
                    parts.append(rng.choice(unseen if whole else seen))
        else:
            parts.append(rng.choice([*seen, *ALPHABET]))
        if rng.random() < 0.5:
            parts.append(rng.choice([*seen, "x", "9", "d", "a"]))
    return "".join(parts)


def _form(char: str, rng: random.Random, *, whole: bool) -> str:
    roll = rng.random() * (0.85 if whole else 1)  # (the odd forms are not the key's)
    point = ord(rng.choice([char, char.upper()]))
    zeros = "0" * rng.choice([0, 0, 1, 8] if whole else [0, 0, 1, 8, 9])
    end = rng.choice([";"] if whole else [";", ";", "", ";;"])
    if roll < 0.35:
        return char
    if roll < 0.45:
        return char.upper()
    if roll < 0.5:
        return rng.choice(DASHES) if char == "-" else chr(point + 0xFEE0)
    if roll < 0.7:
        return f"&#{zeros}{point}{end}"
    if roll < 0.85:
        return f"&#{rng.choice('xX')}{zeros}{rng.choice([f'{point:x}', f'{point:X}'])}{end}"
    odd = ["&hyphen;", "&dash;", "&HYPHEN;", "&minus;", "\u017f", "\u212a", "\u0131"]
    odd += ["\u0130", "&#456"]
    return rng.choice([*odd, "&#4", "&#65313;", "&#6", "&#x2dad"])
