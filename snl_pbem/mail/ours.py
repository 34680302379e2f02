"""We know what we sent: lines of our own mail that reappear in a player's message are a
quote, never orders, whether the client marked them with ``>`` or not.

Quote markers, reply headers and auto-reply headers are enumerated shapes, and some
clients, out-of-office replies and people pasting by hand use none of them. The server
keeps every message it sent, so it can recognise its own text by content instead: the
intake passes, with each message it reads, a fingerprint of every message recently sent
to its sender (:func:`fingerprint_of_sent`), and :func:`without_ours` blanks the lines
of the player's text that are ours before the order language reads it.

The rule (a line is compared *normalised*: invisible characters gone, quote markers
``>`` and ``|`` and leading spaces stripped, spaces collapsed, case folded, and every
secret replaced by ``****``):

- A *block* is a run of consecutive non-blank lines of the player's text that stands as
  consecutive non-blank lines in ONE message we sent (blank lines are skipped on both
  sides: clients add and drop them). Blocks are maximal.
- A block is ours when it holds at least one *prose* line: a line with a letter or digit
  that is not a command a player could write (a sentence, a placeholder such as
  ``KEY (your order key)``, our signature). Then every line of it is ours, its command
  lines included: an example block of a pasted welcome or reminder, or a pasted round
  report, goes whole.
- A block made only of command lines (or of lines without a letter or digit, such as
  ``--``) is not ours: a player may write the very orders our mail showed
  (``DICE 4 2``, ``TRAPDOOR 12``), or those an acknowledgement echoed, and they count.
- A run of adjacent command lines (no blank line between them) that holds any line of
  the player's own (one in no block of ours) is the player's whole: that is our example
  with the player's key written over the placeholder, which the player means as orders.

Lines judged ours are blanked (replaced by an empty line), not marked with ``>``: a reply
header followed by text that is not marked as quoted ends the reading
(:func:`snl_pbem.mail.quotes.read_lines`), and it must go on doing so when part of the
old text is a message we sent long ago, one the intake did not pass, or a line a client
rewrapped, none of which is recognised here. Lines the client already marked are left
as they are (they are never read).

Fingerprints hold no text: each line is a 48-bit digest of the normalised line, and
normalising replaces keys and codes (the value of a one-word ``KEY`` line, of our
sentences "Your order key is ..." and "Your confirmation code is ...", and anything shaped
like a generated key or code) by ``****``. So a message holding a key may keep its
fingerprint after its body is scrubbed (:func:`scrubbed`), and a pasted welcome is still
recognised once its key is forgotten.

Bounded work: at most ``MAX_SENT_MESSAGES`` messages of ``MAX_SENT_LINES`` lines are
indexed, a digest is looked for in at most ``MAX_POSITIONS`` places, the player's text
is read for its first ``MAX_SCANNED_LINES`` lines (the order language reads no further),
and the whole match does at most ``MAX_STEPS`` dictionary steps: linear in the text.
Pure; runs in the sandbox's worker with the rest of the reading.
"""

from __future__ import annotations

import email
import hashlib
import re
import threading
from collections.abc import Sequence
from email.message import Message

from snl_pbem.mail.commands import parse_commands
from snl_pbem.mail.quotes import COMMAND_WORDS, MAX_SCANNED_LINES, clean_line

MAX_SENT_MESSAGES = 60
"""Messages of ours compared with one message (the intake passes fewer)."""
MAX_SENT_LINES = 400
"""Non-blank lines of one sent message that are fingerprinted."""
MAX_POSITIONS = 64
"""Places one line's digest is looked for (a signature line is in every message)."""
MAX_STEPS = 50_000
"""Dictionary steps of one match at most; lines past the budget are not compared."""
DIGEST_HEX = 12
"""48-bit digests: a chance collision between lines is negligible, a fingerprint small."""
LINES_LABEL = b"X-SNL-PBEM-Lines:"
"""Starts the fingerprint kept in a scrubbed message's body (see :func:`scrubbed`)."""

_QUOTE_MARKS = re.compile(r"^[>|\s]+")
_SECRET_SHAPED = re.compile(r"\b[a-z2-9]{4}(?:-[a-z2-9]{4}){1,3}\b")
"""Generated keys (four groups) and codes (two groups), as our mail shows them."""
_SECRET_SENTENCE = re.compile(r"^(your (?:order key|confirmation code) is )\S+(.*)$")
_KEY_VALUE = re.compile(r"^(key|password)\b\s*[:=]?\s*\S+$")
_ALNUM = re.compile(r"\w")
_FIRST_WORD = re.compile(r"^([A-Za-z]+)")
_HEX = re.compile(rb"^[0-9a-f]{%d}$" % DIGEST_HEX)


def normalise(line: str) -> str:
    """A line as it is compared: what a client may change or a secret holds, gone."""
    line = clean_line(line)  # stripped: quote marks are first if anywhere
    if line.startswith((">", "|")):
        line = _QUOTE_MARKS.sub("", line)
    line = line.casefold()
    # each pattern only where it can match (a regular expression's call costs more)
    if "-" in line:
        line = _SECRET_SHAPED.sub("****", line)
    if line.startswith("your "):
        line = _SECRET_SENTENCE.sub(r"\1****\2", line)
    if line.startswith(("key", "password")):
        line = _KEY_VALUE.sub(r"\1 ****", line)
    return line


def digest(normalised: str) -> str:
    return hashlib.blake2b(normalised.encode("utf-8", "replace"), digest_size=6).hexdigest()


def fingerprint(text: str) -> str:
    """The fingerprint of one message's text: the digests of its non-blank normalised
    lines, in order, space-separated."""
    digests = []
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line_digest = _line_digest(raw[:1000])
        if line_digest:
            digests.append(line_digest)
            if len(digests) >= MAX_SENT_LINES:
                break
    return " ".join(digests)


_LINE_DIGESTS: dict[bytes, str] = {}
"""Each line's digest by a hash of the line (never the line: a line of our mail may hold a
key or a code, which must not stay in memory after its mail is scrubbed)."""
_KEPT_LINES = 4096


def _line_digest(line: str) -> str:
    """The digest of a line of our mail as compared, "" for a blank one: made once for the
    lines most of our mail shares (a template's own lines, the signature), as every
    acknowledgement is fingerprinted when written (issue 23)."""
    known = hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    found = _LINE_DIGESTS.get(known)
    if found is None:
        normalised = normalise(line)
        found = digest(normalised) if normalised else ""
        if len(_LINE_DIGESTS) >= _KEPT_LINES:
            _LINE_DIGESTS.clear()  # (the shared lines are made again at once)
        _LINE_DIGESTS[known] = found
    return found


def fingerprint_of_sent(raw: bytes, *, scrubbed: bool = False) -> str:
    """The fingerprint of a message we sent (our own simple MIME: the first text/plain
    part, quoted-printable; see :mod:`snl_pbem.mail.compose`), "" when it has no text.
    ``scrubbed``: its body was replaced by :func:`scrubbed`, which kept the fingerprint
    (only then is one read from the body: any other body may hold text a player chose)."""
    if scrubbed:
        _head, _sep, body = raw.partition(b"\r\n\r\n")
        mark = body.find(LINES_LABEL)
        if mark < 0:  # scrubbed before fingerprints were kept: nothing to compare
            return ""
        words = body[mark + len(LINES_LABEL) :].split()
        return " ".join(w.decode() for w in words[:MAX_SENT_LINES] if _HEX.match(w))
    return fingerprint(_text_of(raw))


def _text_of(raw: bytes) -> str:
    """The text of a message we composed. Our mail is trusted, but never raises here."""
    try:
        msg = email.message_from_bytes(raw)
        part = next((p for p in msg.walk() if _is_text(p)), None)
        if part is None:
            return ""
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            return ""
        return payload.decode(part.get_content_charset() or "utf-8", errors="replace")
    except Exception:
        return ""


def _is_text(part: Message) -> bool:
    return part.get_content_type() == "text/plain" and not str(
        part.get("Content-Disposition", "")
    ).lower().startswith("attachment")


def scrubbed(raw: bytes, note: bytes) -> bytes:
    """A sent message whose body held a secret, as it is kept: its headers, ``note`` for
    the reader, and the fingerprint of what it said (which holds no secret), so that a
    copy of it pasted in a reply is still recognised."""
    words = fingerprint_of_sent(raw).split()
    rows = [" ".join(words[i : i + 5]) for i in range(0, len(words), 5)]
    kept = (LINES_LABEL + b"\r\n" + "\r\n".join(rows).encode() + b"\r\n") if rows else b""
    return raw.split(b"\r\n\r\n", 1)[0] + b"\r\n" + note + kept


# -- matching -----------------------------------------------------------------------------


_PLACE = 1000
"""A place is ``message * _PLACE + position`` (positions are below MAX_SENT_LINES): the
next line of the same message is ``place + 1``, never one of another message."""


def _index(sent: Sequence[str], wanted: set[str]) -> dict[str, list[int]]:
    """digest -> the places it stands, newest messages first, bounded; only the digests
    ``wanted`` (those of the player's lines: no other is looked up)."""
    index: dict[str, list[int]] = {}
    for number, found in enumerate(sent[:MAX_SENT_MESSAGES]):
        words = found.split()[:MAX_SENT_LINES]
        hits = [position for position, word in enumerate(words) if word in wanted]
        for position in hits:
            places = index.setdefault(words[position], [])
            if len(places) < MAX_POSITIONS:
                places.append(number * _PLACE + position)
    return index


def is_command(line: str) -> bool:
    """A line a player could write as a command: it starts with a command word and the
    order language reads it as one (obeyed, or refused with a reason), not as a sentence
    or a placeholder ("KEY (your order key)", "Round 2 was brutal")."""
    line = clean_line(line)
    word = _FIRST_WORD.match(line)
    if word is None or word.group(1).upper() not in COMMAND_WORDS:
        return False
    return not parse_commands(line).ignored


_COMMANDS_KNOWN: dict[bytes, bool] = {}
"""``_remembered_command``'s answers, by the line's digest (never the line)."""
_COMMANDS_KNOWN_MAX = 1024
_COMMANDS_KNOWN_LOCK = threading.Lock()


def _remembered_command(line: str) -> bool:
    """``is_command``, remembered: the lines our mail and the players' share come again
    and again (``DICE 4``, ``TRAPDOOR 17``, ``GAME g1``), and reading each anew was a
    tenth of reading an order (the order language's whole parse of one line). Only for a
    line that is one of ours as compared (``_Lines.kind``): what it holds beyond ours is
    case and spacing, never a key or a code, and it is kept by its digest, never as
    written. At most ``_COMMANDS_KNOWN_MAX``, the oldest forgotten first."""
    key = hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    known = _COMMANDS_KNOWN.get(key)
    if known is None:
        known = is_command(line)
        with _COMMANDS_KNOWN_LOCK:
            while len(_COMMANDS_KNOWN) >= _COMMANDS_KNOWN_MAX:
                del _COMMANDS_KNOWN[next(iter(_COMMANDS_KNOWN))]
            _COMMANDS_KNOWN[key] = known
    return known


def without_ours(text: str, sent: Sequence[str]) -> str:
    """``text`` with the lines judged ours (see the module's docstring) made blank. The
    other lines are returned exactly as they were."""
    if not sent or not text:
        return text
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    read = _Lines(lines[:MAX_SCANNED_LINES])
    ours = read.ours(sent)
    if not ours:
        return text  # (its line ends as they came: the reader takes any)
    read.give_back_edited_examples(ours)
    kept = ["" if i in ours and not read.marked(i) else line for i, line in enumerate(read.raw)]
    return "\n".join(kept + lines[MAX_SCANNED_LINES:])


class _Lines:
    """The player's lines, normalised, and what each is (worked out only when asked)."""

    def __init__(self, raw: list[str]) -> None:
        self.raw = raw
        self.normal = [normalise(line[:1000]) for line in raw]
        self._kinds: dict[int, str] = {}
        self._ours_as_compared: set[int] = set()
        """The lines found in our mail as compared (normalised): ``ours``."""

    def marked(self, i: int) -> bool:
        """Marked as quoted by the client (never read as orders in any case)."""
        return clean_line(self.raw[i][:1000]).startswith((">", "|"))

    def kind(self, i: int) -> str:
        """What line ``i`` is: "command", "prose" (a letter or digit, no command) or "mark"."""
        if i not in self._kinds:
            if not _ALNUM.search(self.normal[i]):
                self._kinds[i] = "mark"
            else:
                line = _QUOTE_MARKS.sub("", clean_line(self.raw[i][:1000]))
                # remembered only for a line of ours (as compared) that held no secret
                # shape: any other may hold a key or a code ("CONFIRM k7mqx2pa"), and a
                # digest of a line so predictable can be reversed by trying them all
                known = i in self._ours_as_compared and "****" not in self.normal[i]
                command = _remembered_command(line) if known else is_command(line)
                self._kinds[i] = "command" if command else "prose"
        return self._kinds[i]

    def ours(self, sent: Sequence[str]) -> set[int]:
        """The lines in a block of ours: a maximal run of non-blank lines standing in the
        same order in one sent message, holding a prose line."""
        rows = [i for i, line in enumerate(self.normal) if line]
        digests = [digest(self.normal[i]) for i in rows]
        index = _index(sent, set(digests))
        if not index:
            return set()
        places: list[list[int]] = []
        steps = 0
        for line_digest in digests:
            found = index.get(line_digest, []) if steps < MAX_STEPS else []
            steps += len(found) + 1
            places.append(found)
        # how far each match runs back (ending here) and on (starting here) in its message
        back: list[dict[int, int]] = []
        for k, found in enumerate(places):
            before = back[k - 1] if k else {}
            back.append({p: before.get(p - 1, 0) + 1 for p in found})
        on: list[dict[int, int]] = [{} for _ in places]
        for k in range(len(places) - 1, -1, -1):
            after = on[k + 1] if k + 1 < len(places) else {}
            on[k] = {p: after.get(p + 1, 0) + 1 for p in places[k]}
        self._ours_as_compared = {rows[k] for k, found in enumerate(places) if found}
        prose = [0]  # matched prose lines before each non-blank line
        for k, found in enumerate(places):
            prose.append(prose[-1] + (1 if found and self.kind(rows[k]) == "prose" else 0))
        ours: set[int] = set()
        for k, found in enumerate(places):
            for place in found:
                first, last = k - back[k][place] + 1, k + on[k][place] - 1
                if prose[last + 1] > prose[first]:
                    ours.add(rows[k])
                    break
        return ours

    def give_back_edited_examples(self, ours: set[int]) -> None:
        """A run of adjacent command lines that holds a line of the player's own is the
        player's whole (our example with their key written in, or a value changed)."""
        seen: set[int] = set()
        for i in sorted(ours):
            if i in seen or not self._command(i):
                continue
            first = last = i
            while first > 0 and self._command(first - 1):
                first -= 1
            while last + 1 < len(self.raw) and self._command(last + 1):
                last += 1
            run = range(first, last + 1)
            seen.update(run)
            if any(j not in ours for j in run):
                ours.difference_update(run)

    def _command(self, i: int) -> bool:
        return bool(self.normal[i]) and not self.marked(i) and self.kind(i) == "command"
