"""The order language (DESIGN.md, "Orders by email"), read from the text people really send.

One message is one order set for one game::

    GAME spring26
    KEY k3y-b0b
    ROUND 8            (optional; when given it must be the open round)
    DICE 4 2           (one value per turn of the round; DIE is the same word)
    TRAPDOOR 37        (optional)

plus ``STATUS``, ``HELP`` and ``CLEAR``. Case does not matter; ``:`` or ``=``
may follow the word; ``4 2``, ``4,2`` and ``4 and 2`` all read. Quoted lines
(``>``), everything after a ``-- `` signature line or a reply header ("On …
wrote:", "-----Original Message-----") are ignored, and only the first 50
non-blank lines are read. Lines that are plainly chat ("Thanks!") are listed
as ignored; a line that looks like a misspelt command is an error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_COMMAND_LINES = 50
MAX_LINE_LENGTH = 200
COMMAND_WORDS = (
    "GAME",
    "KEY",
    "PASSWORD",
    "ROUND",
    "DICE",
    "DIE",
    "TRAPDOOR",
    "STATUS",
    "HELP",
    "CLEAR",
)

_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_SPACES = re.compile(r"[\s\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_REPLY_HEADER = re.compile(
    r"^(on|le|am|el|il|op|em)\b.*\b(wrote|a écrit|schrieb|escribió|ha scritto|schreef|escreveu)"
    r"\s*:?\s*$",
    re.IGNORECASE,
)
_SEPARATORS = re.compile(
    r"^(-{2,}\s*original message\s*-{2,}|_{10,}|begin forwarded message:|"
    r"-{2,}\s*forwarded message\s*-{2,})$",
    re.IGNORECASE,
)
_WORD = re.compile(r"^([A-Za-z]+)\s*[:=]?\s*(.*)$")
_SPLIT = re.compile(r"(?:\s*[,;/&+]\s*|\s+and\s+|\s+)", re.IGNORECASE)
_SUBJECT_GAME = re.compile(r"\[([a-z0-9][a-z0-9_-]{0,31})\]", re.IGNORECASE)
_NONE_WORDS = {"none", "no", "nothing", "-", "0"}


@dataclass(frozen=True)
class LineProblem:
    """A line that could not be obeyed, and why (for the reply, line by line)."""

    line: str
    reason: str


@dataclass(frozen=True)
class Commands:
    """What one message asked for."""

    game: str | None = None
    key: str | None = None
    round: int | None = None
    dice: tuple[int, ...] | None = None
    trapdoor: int | None = None
    no_trapdoor: bool = False
    """TRAPDOOR NONE: explicitly no nomination (R16 then nominates the target)."""
    status: bool = False
    help: bool = False
    clear: bool = False
    problems: tuple[LineProblem, ...] = ()
    ignored: tuple[str, ...] = ()
    dropped_lines: int = 0
    """Non-blank lines after the first 50 (not read)."""
    game_from_subject: bool = False

    @property
    def has_orders(self) -> bool:
        return self.dice is not None or self.trapdoor is not None or self.no_trapdoor


def clean_line(line: str) -> str:
    """A line as a person meant it: invisible characters gone, odd spaces made plain."""
    return _SPACES.sub(" ", line.translate(_INVISIBLE)).strip()


def command_lines(text: str) -> tuple[list[str], int]:
    """The lines to read as commands, and how many non-blank lines were left unread."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    dropped = 0
    for index, raw in enumerate(lines):
        if raw.rstrip("\n") in ("-- ", "--"):  # RFC 3676 signature separator
            break
        line = clean_line(raw)
        if not line or line.startswith(">") or line.startswith("|"):
            continue
        if _SEPARATORS.match(line) or _REPLY_HEADER.match(line):
            break
        nxt = clean_line(lines[index + 1]) if index + 1 < len(lines) else ""
        if line.lower().startswith("on ") and _REPLY_HEADER.match(f"{line} {nxt}"):
            break  # "On Mon, 1 Dec 2026 at 10:00, Bob <" / "bob@x> wrote:"
        if line.lower().startswith("from:") and any(
            clean_line(x).lower().startswith(("sent:", "date:"))
            for x in lines[index + 1 : index + 4]
        ):
            break  # an Outlook reply header block
        if len(kept) >= MAX_COMMAND_LINES:
            dropped += 1
            continue
        kept.append(line[:MAX_LINE_LENGTH])
    return kept, dropped


def game_in_subject(subject: str) -> str | None:
    match = _SUBJECT_GAME.search(subject)
    return match.group(1).lower() if match else None


@dataclass
class _Builder:
    values: dict[str, object] = field(default_factory=dict)
    problems: list[LineProblem] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def once(self, word: str, line: str) -> None:
        if word in self.seen:
            self.problems.append(
                LineProblem(line, f"{word} given more than once: the last one counts")
            )
        self.seen.add(word)


def parse_commands(text: str, subject: str = "") -> Commands:
    """Read a message's commands; never raises."""
    lines, dropped = command_lines(text)
    b = _Builder()
    for line in lines:
        match = _WORD.match(line)
        word = match.group(1).upper() if match else ""
        rest = match.group(2).strip() if match else ""
        if word not in COMMAND_WORDS:
            _unknown(b, line, word)
            continue
        handler = _HANDLERS[word]
        handler(b, line, rest)
    values = b.values
    game = values.get("game")
    from_subject = False
    if game is None:
        game = game_in_subject(subject)
        from_subject = game is not None
    return Commands(
        game=game if isinstance(game, str) else None,
        key=values.get("key"),  # type: ignore[arg-type]
        round=values.get("round"),  # type: ignore[arg-type]
        dice=values.get("dice"),  # type: ignore[arg-type]
        trapdoor=values.get("trapdoor"),  # type: ignore[arg-type]
        no_trapdoor=bool(values.get("no_trapdoor")),
        status=bool(values.get("status")),
        help=bool(values.get("help")),
        clear=bool(values.get("clear")),
        problems=tuple(b.problems),
        ignored=tuple(b.ignored),
        dropped_lines=dropped,
        game_from_subject=from_subject,
    )


def _unknown(b: _Builder, line: str, word: str) -> None:
    close = difflib.get_close_matches(word, COMMAND_WORDS, n=1, cutoff=0.75) if word else []
    looks_like_command = bool(close) or bool(re.match(r"^[A-Za-z]+\s*[:=]?\s*\d", line))
    if looks_like_command and len(line.split()) <= 6:
        hint = f" (did you mean {close[0]}?)" if close else ""
        b.problems.append(LineProblem(line, f"unknown command {word or line.split()[0]!r}{hint}"))
    else:
        b.ignored.append(line)


def _game(b: _Builder, line: str, rest: str) -> None:
    b.once("GAME", line)
    token = rest.split()[0].strip("[]").lower() if rest else ""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", token):
        b.problems.append(LineProblem(line, "GAME needs the game's id, e.g. GAME spring26"))
        return
    b.values["game"] = token


def _key(b: _Builder, line: str, rest: str) -> None:
    b.once("KEY", "KEY ****")
    if not rest:
        b.problems.append(LineProblem("KEY", "KEY needs your order key after it"))
        return
    b.values["key"] = rest.split()[0]


def _round(b: _Builder, line: str, rest: str) -> None:
    b.once("ROUND", line)
    token = rest.split()[0].rstrip(".") if rest else ""
    if not token.isdigit():
        b.problems.append(LineProblem(line, "ROUND needs a round number, e.g. ROUND 8"))
        return
    b.values["round"] = int(token)


def _dice(b: _Builder, line: str, rest: str) -> None:
    b.once("DICE", line)
    tokens = [t.strip(".!()") for t in _SPLIT.split(rest) if t.strip(".!()")]
    if not tokens:
        b.problems.append(LineProblem(line, "DICE needs one value per turn, e.g. DICE 4 2"))
        b.values["dice"] = ()
        return
    values = []
    for token in tokens:
        if not token.isdigit() or len(token) > 3:
            b.problems.append(LineProblem(line, f"{token!r} is not a die value (1 to 6)"))
            b.values["dice"] = ()  # an unreadable die makes the dice invalid (R18)
            return
        values.append(int(token))
    b.values["dice"] = tuple(values)


def _trapdoor(b: _Builder, line: str, rest: str) -> None:
    b.once("TRAPDOOR", line)
    token = rest.split()[0].rstrip(".") if rest else ""
    if token.lower() in _NONE_WORDS:
        b.values["no_trapdoor"] = True
        b.values.pop("trapdoor", None)
        return
    if not token.isdigit() or len(token) > 6:
        b.problems.append(LineProblem(line, "TRAPDOOR needs a space number, e.g. TRAPDOOR 37"))
        return
    b.values["trapdoor"] = int(token)
    b.values.pop("no_trapdoor", None)


Handler = Callable[[_Builder, str, str], None]


def _flag(name: str) -> Handler:
    def handler(b: _Builder, line: str, rest: str) -> None:
        b.values[name] = True

    return handler


_HANDLERS: dict[str, Handler] = {
    "GAME": _game,
    "KEY": _key,
    "PASSWORD": _key,
    "ROUND": _round,
    "DICE": _dice,
    "DIE": _dice,
    "TRAPDOOR": _trapdoor,
    "STATUS": _flag("status"),
    "HELP": _flag("help"),
    "CLEAR": _flag("clear"),
}
