"""What a Chinese or Thai mail may hold in English: the protocol, and nothing else
(tests/i18n, and the game in three languages through serve)."""

from __future__ import annotations

import re

from snl_pbem.mail.quotes import COMMAND_WORDS

PROTOCOL = {
    *COMMAND_WORDS,
    *("UNTIL", "OFF", "ROUND", "KEY", "ROLL", "BY"),
    *("en", "zh", "Hans", "th"),  # the language codes LANGUAGE takes
    "Subject",  # the template's first line, read by render()
}
"""ASCII words a Chinese or Thai mail may hold: the command words (the protocol: the same
in every language) and what the test puts in."""
EXAMPLES = re.compile(
    r"\S+@\S+|https?://\S+|\b[a-z0-9]+(?:-[a-z0-9]+)+\b|spring26|winter27|\bAnn\b|\bLee\b"
    r"|\be\.g\.|\bv\b|\^"
)
"""Addresses, links, codes and keys, game ids and the example name of the help's JOIN."""


def english_left(text: str, names: tuple[str, ...] = (), subject_line: bool = True) -> set[str]:
    """The English words in ``text`` (a rendered template: its first line is ``Subject:``)
    that are not the protocol, an example, or one of ``names`` (the players')."""
    body = text.partition("\n")[2] if subject_line else text
    words = set(re.findall(r"[A-Za-z]{2,}", EXAMPLES.sub(" ", body)))
    return {w for w in words if w not in PROTOCOL and w not in names}
