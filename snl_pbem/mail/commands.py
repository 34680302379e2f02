"""The order language (DESIGN.md, "Orders by email"): the commands in the lines a player
wrote now (:mod:`snl_pbem.mail.quotes` finds those lines).

One message is one order set for one game::

    GAME spring26
    KEY k3y-b0b
    ROUND 8            (optional; when given it must be the open round)
    DICE 4 2           (one value per turn of the round; DIE is the same word)
    TRAPDOOR 37        (optional)

plus ``STATUS``, ``HELP``, ``CLEAR``, the life-cycle and the referee's commands. Case
does not matter; ``:`` or ``=`` may follow the word; ``4 2``, ``4,2`` and ``4 and 2``
all read, and a comment after the dice ("DICE 4 2 (my lucky numbers)", "- lucky",
"# ...") is listed as ignored. Lines that are plainly chat ("Thanks!") are listed as
ignored; a line that looks like a misspelt command is an error.

Each first word has its reader in READERS. The app's command registry
(snl_pbem/app/commands/) reads the same lines again with its own table, which holds
these readers and any it registers.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from snl_pbem.i18n import codes_text, language
from snl_pbem.mail.quotes import read_lines
from snl_pbem.rules.words import joined, tr

PLAYER_ACTIONS = frozenset(
    (
        "LIST",
        "JOIN",
        "CONFIRM",
        "RESIGN",
        "ABSENT",
        "NEW KEY",
        "ADDRESS",
        "HISTORY",
        "OBSERVE",
        "UNOBSERVE",
        "LANGUAGE",
    )
)
"""The life-cycle commands (the registry's signup and player groups, as a test checks)."""
REFEREE_ACTIONS = frozenset(
    (
        "EXTEND",
        "PAUSE",
        "RESUME",
        "CLOSE ROUND",
        "ROLLBACK",
        "REPLACE",
        "APPROVE",
        "REFUSE",
        "START",
    )
)
"""The referee's commands (the registry's Who.REFEREE, as a test checks)."""

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
class Action:
    """A life-cycle or referee command line, read for its shape only (what it may do is
    the app's to say): ``JOIN spring26 Ann`` is Action("JOIN", ("spring26", "Ann"), ...)."""

    word: str
    """The command's word as the registry names it: one of PLAYER_ACTIONS or
    REFEREE_ACTIONS (two-word ones as "NEW KEY", "CLOSE ROUND"), or a command the app
    registered with its own reader."""
    args: tuple[str, ...]
    line: str


@dataclass(frozen=True)
class Commands:
    """What one message asked for."""

    game: str | None = None
    order_key: str | None = None
    round: int | None = None
    dice: tuple[int, ...] | None = None
    nomination: int | None = None
    no_nomination: bool = False
    """TRAPDOOR NONE: explicitly no nomination (R16 then nominates the target)."""
    status: bool = False
    help: bool = False
    clear: bool = False
    roll: bool = False
    """ROLL: the classic game's "I am here" (RULES-CLASSIC C12)."""
    problems: tuple[LineProblem, ...] = ()
    ignored: tuple[str, ...] = ()
    dropped_lines: int = 0
    """Non-blank lines after the first 50 (not read)."""
    game_from_subject: bool = False
    subject_games: tuple[str, ...] = ()
    """Every [id] in the subject, for a message without a GAME line."""
    cut: str | None = None
    """The line where reading stopped because quoted text follows it."""
    replaced: tuple[tuple[str, str], ...] = ()
    """(earlier line, the later line that replaced it) for each repeated order line: a
    message with more than one order block counts its last one."""
    order_keys: tuple[str, ...] = ()
    """Every KEY value given (all are redacted from what is kept and echoed)."""
    conflict: str | None = None
    """Why the message cannot be read as one order set (two games, two keys)."""
    actions: tuple[Action, ...] = ()
    """Life-cycle and referee commands, in the order written."""
    status_at: tuple[int, ...] = ()
    """For each STATUS line, how many of ``actions`` come before it: the referee's STATUS
    shows the games at its place among the commands."""

    @property
    def has_orders(self) -> bool:
        return (
            self.dice is not None or self.nomination is not None or self.no_nomination or self.roll
        )


def games_in_subject(subject: str) -> tuple[str, ...]:
    """Every ``[id]`` in a subject, in order (a gateway's ``[EXTERNAL]`` may come first)."""
    return tuple(m.group(1).lower() for m in _SUBJECT_GAME.finditer(subject[:500]))[:5]


@dataclass
class Builder:
    """What the lines read so far said, as the readers note it (a reader of a new command
    appends to ``actions``, ``problems`` or ``ignored``; see Reader)."""

    values: dict[str, object] = field(default_factory=dict)
    problems: list[LineProblem] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    last_line: dict[str, str] = field(default_factory=dict)
    replaced: list[tuple[str, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    status_at: list[int] = field(default_factory=list)

    def once(self, word: str, line: str) -> None:
        """Note a line of ``word``; a repeated one replaces the earlier (the last block
        counts), except GAME and KEY, which must not differ within one message."""
        earlier = self.last_line.get(word)
        if earlier is not None:
            self.replaced.append((earlier, line))
        self.last_line[word] = line

    def conflict(self, word: str, value: str, what: str) -> None:
        """A second GAME or KEY line with another value: the message is refused whole."""
        earlier = self.values.get(word)
        if earlier is not None and earlier != value and what not in self.conflicts:
            self.conflicts.append(what)


def parse_commands(
    text: str, subject: str = "", words: Mapping[str, Reader] | None = None
) -> Commands:
    """Read a message's commands; never raises. ``words``: the reading table (first word
    to reader); None is READERS."""
    lines, dropped, cut = read_lines(text)
    return read_commands(lines, dropped, cut, subject, words)


def read_commands(
    lines: Sequence[str],
    dropped: int,
    cut: str | None,
    subject: str = "",
    words: Mapping[str, Reader] | None = None,
) -> Commands:
    """The commands in ``lines``, the lines the player wrote now as
    :func:`snl_pbem.mail.quotes.read_lines` found them (with its ``dropped`` and ``cut``),
    read with the table ``words`` (None: READERS); never raises."""
    table = READERS if words is None else words
    b = Builder()
    for line in lines:
        match = _WORD.match(line)
        word = match.group(1).upper() if match else ""
        rest = match.group(2).strip() if match else ""
        reader = table.get(word)
        if reader is None:
            _unknown(b, line, word, table)
            continue
        reader(b, line, rest)
    values = b.values
    game = values.get("game")
    from_subject = False
    subject_games = games_in_subject(subject) if game is None else ()
    if game is None and subject_games:
        game, from_subject = subject_games[0], True
    return Commands(
        game=game if isinstance(game, str) else None,
        order_key=values.get("key"),  # type: ignore[arg-type]
        round=values.get("round"),  # type: ignore[arg-type]
        dice=values.get("dice"),  # type: ignore[arg-type]
        nomination=values.get("trapdoor"),  # type: ignore[arg-type]
        no_nomination=bool(values.get("no_trapdoor")),
        status=bool(values.get("status")),
        help=bool(values.get("help")),
        clear=bool(values.get("clear")),
        roll=bool(values.get("roll")),
        problems=tuple(b.problems),
        ignored=tuple(b.ignored),
        dropped_lines=dropped,
        game_from_subject=from_subject,
        subject_games=subject_games,
        cut=cut,
        replaced=tuple(b.replaced),
        order_keys=tuple(values.get("keys", ())),  # type: ignore[arg-type]
        conflict=_conflict(b.conflicts),
        actions=tuple(b.actions[:MAX_ACTIONS]),
        # capped like the actions, and once each: STATUS lines below the last command
        # obeyed show the same thing (one block, not one per line)
        status_at=tuple(dict.fromkeys(min(at, MAX_ACTIONS) for at in b.status_at)),
    )


def _conflict(conflicts: list[str]) -> str | None:
    """Why a message is not one order set (``Builder.conflicts``: one or both of its
    GAME and KEY lines differ), or None."""
    if not conflicts:
        return None
    if len(conflicts) == 1:
        return tr("it has {what}, so it cannot be read as one order set", what=conflicts[0])
    return tr(
        "it has {what} and {other}, so it cannot be read as one order set",
        what=conflicts[0],
        other=joined(tr(" and "), conflicts[1:]),
    )


def _unknown(b: Builder, line: str, word: str, table: Mapping[str, Reader]) -> None:
    close = _close_match(word, tuple(table)) if word else ()
    looks_like_command = bool(close) or bool(re.match(r"^[A-Za-z]+\s*[:=]?\s*\d", line))
    if looks_like_command and len(line.split()) <= 6:
        named = repr(word or line.split()[0])
        reason = (
            tr("unknown command {word} (did you mean {close}?)", word=named, close=close[0])
            if close
            else tr("unknown command {word}", word=named)
        )
        b.problems.append(LineProblem(line, reason))
    else:
        b.ignored.append(line)


@functools.lru_cache(maxsize=4096)
def _close_match(word: str, words: tuple[str, ...]) -> tuple[str, ...]:
    """The command ``word`` may be a misspelling of (difflib is slow, and a message's
    greeting and signature are the same words every time: worked out once each)."""
    return tuple(difflib.get_close_matches(word, words, n=1, cutoff=0.75))


def _not_ascii_digits(token: str) -> bool:
    """A number written with digits other than 0-9 (superscripts, other scripts)."""
    return any(ch.isdigit() or ch.isnumeric() for ch in token) and not (
        token.isascii() and token.isdigit()
    )


def _number_problem(token: str, what: str) -> str:
    """Why ``token`` is no number, when it is written with other digits than 0-9 (``what``:
    which number, "round", "die" or "space"); "" otherwise."""
    if not _not_ascii_digits(token):
        return ""
    if what == "round":
        return tr(
            "{token} is not written with the digits 0 to 9: write the round number with them",
            token=repr(token),
        )
    if what == "die":
        return tr(
            "{token} is not written with the digits 0 to 9: write each die with them",
            token=repr(token),
        )
    return tr(
        "{token} is not written with the digits 0 to 9: write the space number with them",
        token=repr(token),
    )


def _still_counts(reason: str, earlier: str | None) -> str:
    """``reason``, and that the earlier line of the same word still counts, if any."""
    if not earlier:
        return reason
    return tr('{reason}; your earlier line "{line}" still counts', reason=reason, line=earlier)


def _chat(b: Builder, line: str) -> None:
    """A line that starts with a command word but reads as a sentence ("Round 2 was
    brutal", "Key point: ...", "Clear skies"): listed as ignored, never obeyed."""
    b.ignored.append(line)


def _words(rest: str) -> list[str]:
    return rest.replace(",", " ").split()


def _game(b: Builder, line: str, rest: str) -> None:
    words = _words(rest)
    if len(words) > 1:
        return _chat(b, line)
    token = words[0].strip("[]").lower() if words else ""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", token):
        b.problems.append(LineProblem(line, tr("GAME needs the game's id, e.g. GAME spring26")))
        return None
    b.conflict(
        "game",
        token,
        tr("two different GAME lines ({one}, {other})", one=b.values.get("game"), other=token),
    )
    b.values["game"] = token
    return None


_OPENING = "([<\uff08\u3010\u300a"  # and the full-width parenthesis and brackets
"""A bracket that opens a placeholder: the help's "(your order key)" is one word in Chinese
and Thai, which write no spaces."""


def _looks_like_key(token: str) -> bool:
    return len(token) >= 6 and any(c.isdigit() or c == "-" for c in token)


def _key(b: Builder, line: str, rest: str) -> None:
    words = rest.split()
    if not words:
        b.problems.append(LineProblem("KEY", tr("KEY needs your order key after it")))
        return None
    placeholder = words[0][:1] in _OPENING and not words[0].isascii()
    if (len(words) > 1 or placeholder) and not _looks_like_key(words[0]):
        # a sentence, or the help's placeholder written in one word in Chinese or Thai,
        # "KEY (你的口令)" (an ASCII key may start with a bracket: the config allows it);
        # never echoed whole (it may hold a key)
        return _chat(b, "KEY ...")
    key = words[0]
    b.conflict("key_norm", key.lower(), tr("two different KEY lines"))  # keys ignore case
    b.values["key_norm"] = key.lower()
    b.values.setdefault("keys", [])
    keys = b.values["keys"]
    assert isinstance(keys, list)
    keys.append(key)
    b.values["key"] = key
    return None


def _round(b: Builder, line: str, rest: str) -> None:
    words = _words(rest)
    token = words[0].rstrip(".") if words else ""
    if len(words) > 1:
        return _chat(b, line)
    if not (token.isascii() and token.isdigit()) or len(token) > 6:
        reason = _number_problem(token, "round") or tr("ROUND needs a round number, e.g. ROUND 8")
        b.problems.append(LineProblem(line, _still_counts(reason, b.last_line.get("ROUND"))))
        return None
    b.once("ROUND", line)
    b.values["round"] = int(token)
    return None


_COMMENT = re.compile(r"[(\[#]|\s[-\u2013\u2014]+\s|\s//")
"""Where a comment after the dice may begin: a bracket, ``#``, ``//`` or a dash between
spaces ("DICE 4 2 (my lucky numbers)", "DICE 4 2 - lucky", "DICE 4, 2 # comment")."""


def _dice_comment(rest: str) -> tuple[str, list[str]]:
    """``(values, comments)``: the die values, and the comments written among or after
    them (none: ``rest`` as it was, to be read or reported as it stands).

    A comment in brackets ends at its closing bracket, and the values go on after it:
    "DICE 4 (turn 1) 2 (turn 2)" is DICE 4 2, with both remarks said to be ignored, as a
    person reads it (never DICE 4 with "2 (turn 2)" dropped unseen). A ``#``, ``//`` or a
    dash between spaces runs to the end of the line. Every comment must hold a letter,
    so "DICE 4 - 2" stays an unreadable order rather than a die and a remark, and so
    does a bracket left open ("DICE 4 2 (lucky"). One pass over the line."""
    values: list[str] = []
    comments: list[str] = []
    pos = 0
    while pos < len(rest):
        found = _COMMENT.search(rest, pos)
        if found is None:
            values.append(rest[pos:])
            break
        values.append(rest[pos : found.start()])
        if not comments and not rest[: found.start()].strip():
            return rest, []  # nothing before it: "DICE (4) 2" is read as it stands
        opener = rest[found.start()]
        if opener in "([":
            close = rest.find(")" if opener == "(" else "]", found.start() + 1)
            if close < 0:
                return rest, []
            pos = close + 1
        else:
            pos = len(rest)
        comment = rest[found.start() : pos].strip()
        if not any(ch.isalpha() for ch in comment):
            return rest, []
        comments.append(comment)
    return " ".join(values), comments


def _dice(b: Builder, line: str, rest: str) -> None:
    tokens = [t.strip(".!()") for t in _SPLIT.split(rest) if t.strip(".!()")]
    if tokens and not any(ch.isdigit() or ch.isnumeric() for ch in tokens[0]) and len(tokens) > 2:
        return _chat(b, line)  # "Die hard fan of this game"
    b.once("DICE", line)  # a later DICE line counts, read or not (unreadable: invalid, R18)
    rest, comments = _dice_comment(rest)
    if comments:
        tokens = [t.strip(".!()") for t in _SPLIT.split(rest) if t.strip(".!()")]
    if not tokens:
        b.problems.append(LineProblem(line, tr("DICE needs one value per turn, e.g. DICE 4 2")))
        b.values["dice"] = ()
        return None
    values = []
    for token in tokens:
        if not (token.isascii() and token.isdigit()) or len(token) > 3:
            reason = _number_problem(token, "die") or tr(
                "{value} is not a die value (1 to 6)", value=repr(token)
            )
            b.problems.append(LineProblem(line, reason))
            b.values["dice"] = ()  # an unreadable die makes the dice invalid (R18)
            return None
        values.append(int(token))
    b.values["dice"] = tuple(values)
    b.ignored.extend(comments)  # not orders: the reply lists them as ignored
    return None


def _trapdoor(b: Builder, line: str, rest: str) -> None:
    words = _words(rest)
    token = words[0].rstrip(".") if words else ""
    if (
        len(words) > 2
        and not any(ch.isdigit() for ch in token)
        and token.lower() not in (_NONE_WORDS)
    ):
        return _chat(b, line)
    # what follows the value is a remark ("TRAPDOOR 37 (the snake)"): said, as for DICE
    remark = rest.strip().split(maxsplit=1)[1:]
    if token.lower() in _NONE_WORDS:
        b.once("TRAPDOOR", line)
        b.values["no_trapdoor"] = True
        b.values.pop("trapdoor", None)
        b.ignored.extend(remark)
        return None
    if not (token.isascii() and token.isdigit()) or len(token) > 6:
        reason = _number_problem(token, "space") or tr(
            "TRAPDOOR needs a space number, e.g. TRAPDOOR 37"
        )
        b.problems.append(LineProblem(line, _still_counts(reason, b.last_line.get("TRAPDOOR"))))
        return None
    b.once("TRAPDOOR", line)
    b.values["trapdoor"] = int(token)
    b.values.pop("no_trapdoor", None)
    b.ignored.extend(remark)
    return None


Reader = Callable[[Builder, str, str], None]
"""How a command's line is read: ``reader(builder, line, rest)``, where ``rest`` is what
follows the first word (and its ``:`` or ``=``). It notes what the line says in the builder
(a life-cycle or referee command as an Action); it never raises."""


def _flag(name: str) -> Reader:
    def handler(b: Builder, line: str, rest: str) -> None:
        if rest.strip(" .!,;:-") and rest.strip(" .!,;:-").lower() not in ("please", "orders"):
            b.ignored.append(line)  # "Clear skies here today": a sentence, not CLEAR
            return
        b.values[name] = True
        if name == "status" and b.status_at[-1:] != [len(b.actions)]:
            b.status_at.append(len(b.actions))

    return handler


_NUMBERS = re.compile(r"[0-9][0-9\s,+/&-]*")


def _roll(b: Builder, line: str, rest: str) -> None:
    """ROLL ("I am here", the classic game's order); numbers after it are not read (the
    server throws), and a sentence ("Roll on, summer!") is not a ROLL."""
    extra = rest.strip(" .!,;:-")
    if not extra or extra.lower() in ("please", "orders", "dice", "the dice"):
        b.values["roll"] = True
    elif _NUMBERS.fullmatch(extra):
        b.values["roll"] = True
        b.problems.append(
            LineProblem(line, tr("the numbers after ROLL are not read: the server throws the dice"))
        )
    else:
        b.ignored.append(line)


MAX_ACTIONS = 5
"""Life-cycle commands read from one message, at most (the rest are not obeyed)."""
_ID = re.compile(r"^\[?([a-z0-9][a-z0-9_-]{0,31})\]?$", re.IGNORECASE)
_CODE = re.compile(r"^[a-z0-9]{4}-?[a-z0-9]{4}$", re.IGNORECASE)
_DURATION = re.compile(r"^\d{1,4}\s*[smhdw]$|^\d{1,4}\s*(?:days?|hours?|weeks?)$", re.IGNORECASE)
_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}(?:[ t]\d{1,2}:\d{2})?$", re.IGNORECASE)
_POLITE = ("", "please", "pls", "thanks", "thank you")


def _polite(extra: str) -> bool:
    return extra.strip(" .!,;:-").lower() in _POLITE


def _is_id(token: str) -> str | None:
    match = _ID.match(token)
    return match.group(1).lower() if match else None


def _action(word: str, args: tuple[str, ...], b: Builder, line: str) -> None:
    b.actions.append(Action(word, args, line))


def _bare_or_game(word: str) -> Reader:
    """PAUSE, RESUME, ROLLBACK, START, RESIGN, LIST, HISTORY: alone, or with a game id (or
    a word of politeness); anything longer is a sentence ("Pause for thought")."""

    def handler(b: Builder, line: str, rest: str) -> None:
        words = rest.strip(" .!:").split()
        if not words or _polite(rest):
            return _action(word, (), b, line)
        game = _is_id(words[0]) if len(words) <= 2 and _polite(" ".join(words[1:])) else None
        if game is None or word in ("LIST", "HISTORY"):
            return _chat(b, line)
        return _action(word, (game,), b, line)

    return handler


def _join(b: Builder, line: str, rest: str) -> None:
    """JOIN game name (the name is one to three words; a sentence is not a JOIN)."""
    words = rest.split()
    game = _is_id(words[0]) if words else None
    if game is None or len(words) > 4:
        if not words:
            b.problems.append(
                LineProblem(line, tr("JOIN needs the game and your name: JOIN spring26 Ann"))
            )
            return None
        return _chat(b, line)
    return _action("JOIN", (game, " ".join(words[1:])), b, line)


def _confirm(b: Builder, line: str, rest: str) -> None:
    words = rest.strip(" .!").split()
    if len(words) == 1 and _CODE.match(words[0]):
        return _action("CONFIRM", (words[0].replace("-", "").lower(),), b, line)
    if len(words) <= 1:
        b.problems.append(
            LineProblem(
                "CONFIRM", tr("CONFIRM needs the code we mailed you, e.g. CONFIRM abcd-efgh")
            )
        )
        return None
    return _chat(b, "CONFIRM ...")  # never echoed whole: it may hold a code


def _absent(b: Builder, line: str, rest: str) -> None:
    words = rest.strip(" .!").split()
    if len(words) == 1 and words[0].lower() in ("off", "over", "back", "none"):
        return _action("ABSENT", ("off",), b, line)
    if (
        len(words) >= 2
        and words[0].lower() in ("until", "till", "to")
        and _DATE.match(" ".join(words[1:]))
    ):
        return _action("ABSENT", ("until", " ".join(words[1:])), b, line)
    if len(words) <= 3:
        b.problems.append(
            LineProblem(
                line, tr("write ABSENT UNTIL 2026-12-24 (a date, year first) or ABSENT OFF")
            )
        )
        return None
    return _chat(b, line)


def _new(b: Builder, line: str, rest: str) -> None:
    words = rest.strip(" .!").split()
    if words and words[0].lower() == "key" and _polite(" ".join(words[1:])):
        return _action("NEW KEY", (), b, line)
    return _chat(b, line)


def _address(b: Builder, line: str, rest: str) -> None:
    words = rest.strip(" .").split()
    if len(words) == 1 and "@" in words[0]:
        return _action("ADDRESS", (words[0].strip("<>").lower(),), b, line)
    if len(words) <= 1:
        b.problems.append(
            LineProblem(line, tr("ADDRESS needs your new address: ADDRESS ann@example.org"))
        )
        return None
    return _chat(b, line)


def _one_game(word: str) -> Reader:
    """OBSERVE game, UNOBSERVE game."""

    def handler(b: Builder, line: str, rest: str) -> None:
        words = rest.strip(" .!").split()
        game = _is_id(words[0]) if len(words) == 1 else None
        if game is not None:
            return _action(word, (game,), b, line)
        if not words:
            return _action(word, (), b, line)  # the GAME line or the subject names it
        return _chat(b, line)

    return handler


def _extend(b: Builder, line: str, rest: str) -> None:
    """EXTEND [game] BY 2d ("Extend my thanks to all" is a sentence)."""
    words = rest.strip(" .!").split()
    game = ""
    if words and words[0].lower() != "by":
        found = _is_id(words[0])
        if found is None or len(words) > 4:
            return _chat(b, line)
        game, words = found, words[1:]
    if words and words[0].lower() != "by":
        return _chat(b, line)
    if len(words) >= 2 and _DURATION.match(" ".join(words[1:])):
        return _action("EXTEND", (game, " ".join(words[1:])), b, line)
    b.problems.append(
        LineProblem(line, tr("write EXTEND spring26 BY 2d (a duration: 12h, 2d, 1w)"))
    )
    return None


def _close(b: Builder, line: str, rest: str) -> None:
    words = rest.strip(" .!").split()
    if words and words[0].lower() == "round" and len(words) <= 2:
        game = _is_id(words[1]) if len(words) == 2 else ""
        if game is not None:
            return _action("CLOSE ROUND", (game,) if game else (), b, line)
    return _chat(b, line)


def _replace(b: Builder, line: str, rest: str) -> None:
    """REPLACE game player new@address (the player's name may have spaces)."""
    words = rest.split()
    game = _is_id(words[0]) if words else None
    if game is not None and len(words) >= 3 and "@" in words[-1] and len(words) <= 6:
        return _action("REPLACE", (game, " ".join(words[1:-1]), words[-1].strip("<>")), b, line)
    if len(words) <= 6:
        b.problems.append(LineProblem(line, tr("write REPLACE spring26 Ann new@example.org")))
        return None
    return _chat(b, line)


def _decide(word: str) -> Reader:
    """APPROVE game name, REFUSE game name."""

    def handler(b: Builder, line: str, rest: str) -> None:
        words = rest.split()
        game = _is_id(words[0]) if words else None
        if game is not None and 2 <= len(words) <= 4:
            return _action(word, (game, " ".join(words[1:])), b, line)
        if len(words) <= 4:
            b.problems.append(LineProblem(line, tr("write {word} spring26 Ann", word=word)))
            return None
        return _chat(b, line)

    return handler


def _language(b: Builder, line: str, rest: str) -> None:
    """LANGUAGE <code or name> (zh, zh-Hans, th, en, Chinese, ไทย...: snl_pbem.i18n), or
    LANGUAGE alone (which asks which is in use); one word that is no language is a problem
    named on its line; a sentence ("Language is no problem") is chat."""
    words = rest.strip(" .!").split()
    if not words:
        return _action("LANGUAGE", (), b, line)
    code = language(" ".join(words))
    if code is not None:
        return _action("LANGUAGE", (code,), b, line)
    if len(words) == 1:
        b.problems.append(
            LineProblem(line, tr("not a language here: write one of {codes}", codes=codes_text()))
        )
        return None
    return _chat(b, line)


_READERS: dict[str, Reader] = {
    "LIST": _bare_or_game("LIST"),
    "JOIN": _join,
    "CONFIRM": _confirm,
    "RESIGN": _bare_or_game("RESIGN"),
    "ABSENT": _absent,
    "NEW": _new,
    "ADDRESS": _address,
    "HISTORY": _bare_or_game("HISTORY"),
    "OBSERVE": _one_game("OBSERVE"),
    "UNOBSERVE": _one_game("UNOBSERVE"),
    "LANGUAGE": _language,
    "LANG": _language,
    "EXTEND": _extend,
    "PAUSE": _bare_or_game("PAUSE"),
    "RESUME": _bare_or_game("RESUME"),
    "CLOSE": _close,
    "ROLLBACK": _bare_or_game("ROLLBACK"),
    "REPLACE": _replace,
    "APPROVE": _decide("APPROVE"),
    "REFUSE": _decide("REFUSE"),
    "START": _bare_or_game("START"),
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
    "ROLL": _roll,
}
READERS: Mapping[str, Reader] = MappingProxyType(_READERS)
"""The reading table: each first word of the order language and its reader (the sandbox
reads every message with it; the app's command registry holds the same readers)."""
