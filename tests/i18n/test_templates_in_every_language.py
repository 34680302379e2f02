"""Every player's template, in every language, with every branch taken (issue 25).

Each template a player (or an observer) may get is rendered with the random values of
tests/templatehelpers.py, the same draws in English, Chinese and Thai, so each branch is
taken in each language. In every language:

- a draw that renders in English renders (a translation whose placeholders do not fit its
  message fails here, not in a player's mail);
- no line is wider than 78 columns (RFC 5322's line; a Chinese character takes two, a Thai
  vowel or tone mark above or below its letter none), English included;
- the first line is still ``Subject: `` with the game's tag where the English has it;

and in Chinese and Thai no English is left but the protocol: command words, the values
put in, addresses and the examples of order lines.
"""

from __future__ import annotations

import pytest
from languagehelpers import english_left
from templatehelpers import INCLUDED_ONLY, TEMPLATES, drawn, rendered

from snl_pbem.i18n import LANGUAGES, width

PLAYERS_TEMPLATES = sorted(
    name
    for name in set(TEMPLATES) - INCLUDED_ONLY
    if name.split("/")[0] in ("postal", "classic", "player") and "round_summary" not in name
)
"""What players and observers get (the referee's mail, and the summaries of each round
that only the referee gets, stay English)."""
RENDERS = 120
"""Draws per template and language: each template's branches many times over."""
WIDEST = 78


@pytest.mark.parametrize("name", PLAYERS_TEMPLATES)
@pytest.mark.parametrize("code", list(LANGUAGES))
def test_a_template_in_a_language(name: str, code: str) -> None:
    done = 0
    for seed, context in drawn(name, RENDERS):
        english = rendered(name, context)
        text = rendered(name, context, code)
        if english is None:
            continue
        if text is None and None in context.values():
            continue  # a missing value no caller leaves out (a count): gettext's plural needs it
        assert text is not None, f"{name} seed {seed}: renders in English, not in {code}"
        done += 1
        lines = text.split("\n")
        assert lines[0].startswith("Subject: "), f"{name} in {code}: {lines[0]!r}"
        if "[w9]" in english.partition("\n")[0]:
            assert "[w9]" in lines[0], f"{name} in {code}: the game's tag is gone: {lines[0]}"
        wide = [line for line in lines[1:] if width(line) > WIDEST]
        assert not wide, f"{name} seed {seed} in {code}: lines over {WIDEST} columns: {wide}"
        if code != "en":
            left = english_left(text) - {"None"}  # a value drawn as missing, as in English
            assert not left, f"{name} seed {seed} in {code}: English left {sorted(left)}:\n{text}"
    assert done >= RENDERS // 4, f"{name}: only {done} draws rendered"
