"""Text sent as ``format=flowed`` (RFC 3676) read as its writer wrote it.

A flowed text/plain part wraps long lines with *soft* breaks: a line ending in a
space goes on in the next one. Thunderbird and Apple Mail wrap at about 72
characters, so ``DICE 4 2`` near the end of a long line arrives as
``DICE 4 \\r\\n2``. Read line by line it would be ``DICE 4`` and a stray ``2``.

``unflow`` joins each soft break, as RFC 3676 section 4 says:

- quote marks (``>``, as many as the depth) are taken off each line first and
  put back, with a space, before the joined line; a soft break
  joins only lines of the same depth (a line is never joined into a quoted one,
  nor a quoted one into the player's text);
- one leading space (space-stuffing, added by the sender before a line that
  begins with a space, ``>`` or ``From``) is removed;
- the signature separator ``-- `` is never a soft break;
- with ``DelSp=yes`` the space before a soft break is deleted when joining (it
  was added by the sender, as in Japanese text with no spaces between words).

One rule of our own: a soft break is not joined when the next line starts with
an order word (``KEY``, ``DICE``, ...). RFC 3676 asks senders to trim the space
before a hard break, but a player who types ``KEY abc `` and Enter would
otherwise send ``KEY abc DICE 4``, one broken order for two good ones; a
wrapped order never starts a line with one (``DICE 4 \\r\\n2``).
"""

from __future__ import annotations

import re

from snl_pbem.mail.quotes import COMMAND_WORDS

_ORDER_WORD = re.compile(rf"(?:{'|'.join(COMMAND_WORDS)})(?![A-Za-z])", re.IGNORECASE)
_SIGNATURE = "-- "


def unflow(text: str, delsp: bool = False) -> str:
    """``text`` (a ``format=flowed`` part, decoded) with its soft line breaks joined."""
    lines = text.replace("\r\n", "\n").split("\n")
    unstuffed: list[tuple[int, str]] = []
    for line in lines:
        depth = len(line) - len(line.lstrip(">"))
        body = line[depth:]
        if body.startswith(" "):
            body = body[1:]  # space-stuffing (or the space after quote marks)
        unstuffed.append((depth, body))
    out: list[str] = []
    joined: list[str] = []
    for index, (depth, body) in enumerate(unstuffed):
        following = unstuffed[index + 1] if index + 1 < len(unstuffed) else None
        soft = (
            body.endswith(" ")
            and body != _SIGNATURE
            and following is not None
            and following[0] == depth
            and following[1] != _SIGNATURE
            and not _ORDER_WORD.match(following[1])
        )
        joined.append(body[:-1] if soft and delsp else body)
        if not soft:
            out.append((">" * depth + " " if depth else "") + "".join(joined))
            joined = []
    return "\n".join(out)
