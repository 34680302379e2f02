"""Every count a person reads has a noun that agrees with it (issue 21: check-config
printed "1 snakes").

Three nets, each able to catch a new mistake:

- the text: every template that shows a count is rendered with each count 0, 1 and 2,
  and so is the command line's output (check-config, boards, adjudicate); the text is
  scanned for a count that disagrees with its noun ("1 snakes", "2 snake", "1 more lines
  were");
- the templates' source: a count is written through the ``counted`` and ``agree``
  filters (snl_pbem.rules.words), never as ``{{ n }} snakes`` or ``player{{ "s" }}``, and
  every template that uses them is rendered above;
- the code: no f-string or log message puts a hard-written noun after a number
  (``f"{n} players"``, ``"%d game(s)"``): it uses ``counted`` or ``agree``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest

from snl_pbem.cli import main as cli_main
from snl_pbem.cli.main import main
from snl_pbem.mail.render import render
from snl_pbem.rules import Board
from snl_pbem.rules.words import agree, counted

NOUNS = {
    "snake": "snakes",
    "ladder": "ladders",
    "player": "players",
    "round": "rounds",
    "turn": "turns",
    "die": "dice",
    "day": "days",
    "hour": "hours",
    "minute": "minutes",
    "second": "seconds",
    "week": "weeks",
    "message": "messages",
    "space": "spaces",
    "square": "squares",
    "key": "keys",
    "line": "lines",
    "game": "games",
    "value": "values",
    "attempt": "attempts",
    "seat": "seats",
    "roll": "rolls",
    "throw": "throws",
    "bump": "bumps",
    "file": "files",
    "folder": "folders",
    "command": "commands",
    "credential": "credentials",
    "session": "sessions",
    "absence": "absences",
    "code": "codes",
    "row": "rows",
    "column": "columns",
    "cell": "cells",
    "character": "characters",
    "trapdoor": "trapdoors",
    "nomination": "nominations",
    "vote": "votes",
    "backup": "backups",
    "mail": "mails",
    "set": "sets",
    "sign-up": "sign-ups",
}
"""The nouns our text counts, singular -> plural."""
PLURALS = "|".join(map(re.escape, NOUNS.values()))
SINGULARS = "|".join(map(re.escape, NOUNS))
ADJECTIVE = r"(?:(?:more|other|later|new|incoming|welcome|order|idle)\s+)?"
DISAGREE = [
    re.compile(rf"(?<![\d.:/-])\b1\s+{ADJECTIVE}(?:{PLURALS})\b"),
    re.compile(rf"(?<![\d.:/-])\b(?:0|[2-9]|[1-9]\d+)\s+{ADJECTIVE}(?:{SINGULARS})\b(?!-)"),
    re.compile(rf"(?<![\d.:/-])\b1\s+{ADJECTIVE}(?:{SINGULARS})\s+(?:were|are|have|take)\b"),
    re.compile(
        rf"(?<![\d.:/-])\b(?:0|[2-9]|[1-9]\d+)\s+{ADJECTIVE}(?:{PLURALS})\s+(?:was|is|has|takes)\b"
    ),
    re.compile(r"(?<![\d.:/-])\b1\s+more\s+(?:were|are|have)\b"),
    re.compile(r"\w\((?:s|es)\)"),
]
"""A count and a noun (or its verb) that disagree, and the "(s)" that avoids agreeing."""
RANGE = re.compile(r"\b[A-Z]?[a-z]+s (\d+) to (\d+)\b")
"""A plural range ("Rounds 1 to 6"), which needs two numbers, the second the larger."""


def disagreements(text: str) -> list[str]:
    found = [m.group(0) for pattern in DISAGREE for m in pattern.finditer(text)]
    found += [m.group(0) for m in RANGE.finditer(text) if int(m.group(2)) <= int(m.group(1))]
    return found


def test_the_helpers_and_the_scan_agree() -> None:
    assert [counted(n, "snake") for n in (0, 1, 2)] == ["0 snakes", "1 snake", "2 snakes"]
    assert counted(1, "die", "dice") == "1 die" and counted(3, "die", "dice") == "3 dice"
    assert agree(1, "was", "were") == "was" and agree(2, "was", "were") == "were"
    assert agree(1.5, "day") == "days" and agree(1.0, "day") == "day"
    wrong = "1 snakes, 2 ladder, 1 more lines were, 3 rounds was, 0 day, 1 file(s), 1 more were"
    wrong += ", Rounds 1 to 1 are one turn"
    assert disagreements(wrong) == [
        "1 snakes",
        "1 more lines",
        "2 ladder",
        "0 day",
        "3 rounds was",
        "1 more were",
        "e(s)",
        "Rounds 1 to 1",
    ]
    right = "1 snake, 2 ladders, 1 more line was, 3 rounds were, round 1 of 2, 2d6"
    assert disagreements(right) == []


# -- the templates, rendered with every count 0, 1 and 2 ------------------------------------


def _game(**more: Any) -> NS:
    options = NS(
        finish="first",
        bump=True,
        dice="1d6",
        start_rule="max_to_enter",
        enter_on="roll_again",
        max_roll="forfeit_after_three",
        forfeit_to="start",
        reenter_needs_max=True,
        ending="exact",
        chain=True,
    )
    return NS(name="g1", title="Test", options=options, close_when_all_in=True, **more)


def _career(n: int) -> NS:
    return NS(games=n + 1, wins=n, fastest_win=n, ladders=n, snakes=n)


def _counts(n: int) -> NS:
    return NS(name="ann", rolls=n, ladders=n, snakes=n, bumps_given=n, bumps_taken=n, finished=n)


def _ack(n: int) -> dict[str, Any]:
    return {
        "subject": "s",
        "player": NS(name="ann"),
        "round": NS(number=3, turns=1),
        "line_problems": [],
        "ignored": [],
        "cut": None,
        "dropped": n,
        "deadline": "D",
        "other_sender": None,
    }


CASES: dict[str, Callable[[int], dict[str, Any]]] = {
    "classic/game_over.txt.j2": lambda n: {
        "game": _game(),
        "player": NS(name="ann"),
        "headline": "ann wins",
        "round": 4,
        "throws": [],
        "finished": {},
        "width": 4,
        "standings": [],
        "counts": [_counts(n)],
        "career": _career(n),
        "reveal": False,
    },
    "classic/status.txt.j2": lambda n: {
        "subject": "s",
        "game": _game(),
        "player": NS(name="ann"),
        "state_text": "running",
        "position": 4,
        "mine": _counts(n),
        "career": _career(n),
        "round": None,
        "other_sender": None,
    },
    "classic/welcome.txt.j2": lambda n: {
        "game": _game(),
        "player": NS(name="ann"),
        "players": n,
        "last": 100,
        "order_key": "k",
        "deadline": "D",
    },
    "classic/orders_ack.txt.j2": lambda n: {
        **_ack(n),
        "game": _game(),
        "finished": None,
        "cleared": False,
        "rolled": True,
    },
    "postal/orders_ack.txt.j2": lambda n: {
        **_ack(n),
        "game": _game(),
        "cleared": False,
        "dice_ok": True,
        "turns": [(3, 4)],
        "nomination_text": "none",
        "replaced": [],
        "note": False,
        "open_label": "Still open",
        "open_values": "1 2",
    },
    "player/code.txt.j2": lambda n: {
        "game": _game(),
        "purpose": "join",
        "name": "ann",
        "code": "c",
        "days": n,
    },
    "player/list.txt.j2": lambda n: {
        "games": [
            NS(
                id=f"g{state}",
                title="",
                ruleset="postal",
                last=n,
                state=state,
                players=n,
                max_players=None,
                starts="soon",
                min_players=n,
                round=1,
                deadline="D",
                signup="open",
                standby=n,
            )
            for state in ("forming", "running")
        ]
    },
    "postal/welcome.txt.j2": lambda n: {
        "game": _game(),
        "player": NS(name="ann"),
        "players": n,
        "last": 100,
        "order_key": "k",
        "double_from": n,
        "deadline": "D",
    },
    "referee/key_guessing.txt.j2": lambda n: {
        "game": _game(),
        "total": n,
        "senders": [("x@example.org", n)],
        "per_sender": n,
        "per_game": n,
    },
    "referee/delivery_failure.txt.j2": lambda n: {
        "failures": [
            NS(recipient="a@example.org", what="w", message_id="<m>", attempts=n, error="e")
            for _ in range(n)
        ]
        or [NS(recipient="a@example.org", what="w", message_id="<m>", attempts=0, error="e")]
    },
}
"""Each template that shows a count, and its context with every count ``n``."""


def template_sources() -> dict[str, str]:
    folder = Path(str(resources.files("snl_pbem.templates")))
    return {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*.j2")}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n", [0, 1, 2])
def test_every_count_in_a_template_agrees_with_its_noun(name: str, n: int) -> None:
    subject, body = render(name, **CASES[name](n))
    text = subject + "\n" + body
    if n:  # (a count of 0 may be left out: "Only the first 50 lines are read" needs one)
        assert re.search(rf"\b{n}\b", text), f"{name}: no count {n} shown:\n{text}"
    assert disagreements(text) == [], f"{name} with {n}:\n{text}"


def test_every_template_that_counts_is_rendered_here() -> None:
    """A template that writes a count through the filters is in CASES, so the test above
    renders it with 0, 1 and 2 (a new one cannot escape)."""
    counting = {
        name
        for name, text in template_sources().items()
        if re.search(r"\|\s*(counted|agree)\(|\{%-?\s*pluralize|\bngettext\(", text)
    }
    assert counting - set(CASES) == set()
    assert set(CASES) - counting == set()  # a case for a template that no longer counts


TEMPLATE_NOT_COUNTS = {
    ("classic/game_over.txt.j2", '"%-*s"|format(width, name)', "round"): "a name: ann round 3",
    ("player/code.txt.j2", "game.name", "mail"): "a game's name: their g1 mail",
}


PLURAL_BLOCK = re.compile(r"\{%-?\s*trans\b[^%]*%\}.*?\{%-?\s*pluralize.*?\{%-?\s*endtrans", re.S)
"""A ``{% trans count=n %}`` block with its ``{% pluralize %}`` form (issue 25)."""


def test_no_template_writes_a_noun_after_a_number_by_hand() -> None:
    """``{{ n }} snakes`` or ``snake{{ "s" ... }}``: the count goes through ``counted``."""
    words = "|".join(map(re.escape, [*NOUNS, *NOUNS.values()]))
    found = []
    for name, source in template_sources().items():
        text = PLURAL_BLOCK.sub("", source)  # gettext's plural forms choose the noun there
        for m in re.finditer(r"\{\{-?\s*([^{}]+?)\s*-?\}\}[ \t]+(" + words + r")\b", text):
            expression, noun = m.group(1), m.group(2)
            if re.search(r"\|\s*(counted|agree)\(", expression):
                continue
            if (name, expression, noun) not in TEMPLATE_NOT_COUNTS:
                found.append(f"{name}: {{{{ {expression} }}}} {noun}")
        for m in re.finditer(r"[a-z]\{\{[^{}]*['\"]s['\"][^{}]*\}\}", text):
            found.append(f"{name}: {m.group(0)} (use agree)")
    assert found == []


# -- the command line ----------------------------------------------------------------------

CONFIG = """
[database]
url = "sqlite:///{db}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "g1"
board = {{ rows = 4, columns = 5, ladders = {{ {ladders} }}, snakes = {{ {snakes} }} }}
first_deadline = "2030-01-04T18:00"
round_length = "1d"
players = [{players}]
"""


def _board(n: int) -> tuple[str, str]:
    ladders = ", ".join(f'"{2 + i}" = {12 + i}' for i in range(n))
    snakes = ", ".join(f'"{17 + i}" = {5 + i}' for i in range(n))
    return ladders, snakes


@pytest.mark.parametrize("n", [0, 1, 2])
def test_check_config_counts_agree(
    n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ladders, snakes = _board(n)
    players = ", ".join(
        f'{{ name = "p{i}", email = "p{i}@example.org", key = "key-{i}-0123456789" }}'
        for i in range(max(n, 1))
    )
    path = tmp_path / "config.toml"
    path.write_text(
        CONFIG.format(db=tmp_path / "snl.db", ladders=ladders, snakes=snakes, players=players)
    )
    unit = tmp_path / "snl-pbem.service"
    unit.write_text("[Service]\nUser=snl-pbem\n")
    assert main(["check-config", "--config", str(path), "--unit", str(unit)]) == 0
    out = capsys.readouterr().out
    assert f"board: 4x5, {counted(n, 'snake')}, {counted(n, 'ladder')}, last space 20" in out
    assert disagreements(out) == [], out


def test_boards_counts_agree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def board(name: str) -> Board:
        return Board.from_mapping(_table(int(name[1:])))

    monkeypatch.setattr(cli_main, "bundled_names", lambda: ("b0", "b1", "b2"))
    monkeypatch.setattr(cli_main, "_bundled_board", board)
    monkeypatch.setattr(cli_main, "description", lambda name: "a board")
    assert main(["boards"]) == 0
    out = capsys.readouterr().out
    assert " 0 ladders,  0 snakes  a board" in out
    assert " 1 ladder,   1 snake   a board" in out
    assert " 2 ladders,  2 snakes  a board" in out
    assert disagreements(out) == [], out


def _table(n: int) -> dict[str, Any]:
    return {
        "rows": 4,
        "columns": 5,
        "ladders": {str(2 + i): 12 + i for i in range(n)},
        "snakes": {str(17 + i): 5 + i for i in range(n)},
    }


@pytest.mark.parametrize("extra", [1, 2])
def test_adjudicate_counts_the_rounds_not_played(
    extra: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    rounds = [{"ann": {"dice": [d]}} for d in (6, 5, 4, 3, 2)]  # ann reaches 20 in round 5
    rounds += [{"ann": {"dice": [1]}}] * extra
    game = {"board": {"rows": 2, "columns": 10}, "players": ["ann", "bob"], "rounds": rounds}
    path = tmp_path / "g.json"
    path.write_text(json.dumps({**game, "double_from_round": 99}))
    assert main(["adjudicate", str(path)]) == 0
    err = capsys.readouterr().err
    words = "later round in the file was" if extra == 1 else "later rounds in the file were"
    assert f"the game ended in round 5; {extra} {words} not played" in err
    assert disagreements(err) == []


# -- the code ------------------------------------------------------------------------------

CODE = Path(__file__).parents[1] / "snl_pbem"

NOT_COUNTS = {
    ("rules/board.py", "self.last", "snakes"): "a repr for debugging, not for a person",
    ("rules/board.py", "len(self.snakes)", "ladders"): "a repr for debugging",
    ("rules/boardspec.py", "len(raw)", "rows"): "more than MAX_SIDE: always several",
    ("rules/boardspec.py", "MAX_SIDE", "cells"): "a constant, 1 to MAX_SIDE cells",
    ("rules/classic/options.py", "MAX_DICE", "dice"): "a constant: 1 to 4 dice",
    ("rules/classic/options.py", "SIDES.stop - 1", "sides"): "a constant",
    ("app/intake/store.py", "size", "bytes"): "a message over the size limit: always many",
    ("app/intake/reply.py", "len(raw)", "bytes"): "a header, for the record",
    ("app/retention.py", "len(head)", "bytes"): "a header, for the record",
    ("app/retention.py", "len(raw)", "bytes"): "a header, for the record",
    ("app/commands/player.py", "seats.RESIGN_LIFETIME.days", "days"): "a constant: 2",
    ("app/commands/answers.py", "signup.MAX_UNCONFIRMED_PER_GAME", "sign-up"): "a constant",
    ("app/players.py", "NEW_KEY_AFTER_MOVE.days", "days"): "a constant: several days",
    ("app/players.py", "NEW_KEYS_PER_DAY", "new"): "a constant",
    ("cli/referee.py", "WEAK_BELOW", "characters"): "a constant: 10",
    ("cli/demo.py", "len(names)", "players"): "the demo's players: 2 to 8",
    ("cli/demo.py", "seats", "seats"): "the demo's seats: several",
    ("cli/demo.py", "names[2 % len(names)]", "vote"): "a name and a verb: ann and cy vote",
    ("cli/referee.py", "state", "mail"): "a state: failed mail",
    ("config.py", "other", "game"): "a ruleset's name: the classic game",
    ("rules/classic/game.py", "seed", "round"): "the seed of the throws, read by no one",
    ("views/board.py", "SNAKE_MARK", "snake"): "a mark: v snake head",
    ("views/board.py", "LADDER_MARK", "ladder"): "a mark: ^ ladder foot",
    ("app/codes.py", "%d", "%d wrong codes"): "CODE_TRIES_PER_HOUR: several",
    ("mail/lmtp.py", "%d", "%d sessions"): "half the file handles: many",
    ("mail/parse.py", "size", "bytes"): "a part's size, for the record",
}
"""A number before a noun that cannot disagree, or is no count for a person, and why."""


def _nouns_after_numbers(path: Path) -> list[tuple[int, str, str]]:
    """(line, expression, noun) for each ``f"{expr} noun"`` in ``path``."""
    words = {*NOUNS, *NOUNS.values()}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            for part, after in zip(node.values, node.values[1:], strict=False):
                if not (
                    isinstance(part, ast.FormattedValue)
                    and isinstance(after, ast.Constant)
                    and isinstance(after.value, str)
                ):
                    continue
                word = re.match(r" ([a-z][a-z-]*)", after.value)
                call = part.value
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id in ("counted", "agree")
                ):
                    continue  # the count's own noun, then another word
                if word and word.group(1) in words:
                    found.append((node.lineno, ast.unparse(part.value), word.group(1)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in re.finditer(r"%d (?:[a-z-]+ )?([a-z-]+)", node.value):
                if m.group(1) in words:
                    found.append((node.lineno, "%d", m.group(0)))
            for m in re.finditer(r"[a-z]\((?:s|es)\)", node.value):
                found.append((node.lineno, "(s)", m.group(0)))
    return found


def test_no_code_writes_a_noun_after_a_number_by_hand() -> None:
    found = []
    for path in sorted(CODE.rglob("*.py")):
        where = path.relative_to(CODE).as_posix()
        if where == "mail/dsn.py":
            continue  # quotes other servers' bounce texts ("The following address(es)")
        for line, expression, noun in _nouns_after_numbers(path):
            if (where, expression, noun) not in NOT_COUNTS:
                found.append(f"{where}:{line}: {{{expression}}} {noun}")
    assert found == [], "use counted() or agree() (snl_pbem.rules.words):\n" + "\n".join(found)


def test_the_code_scan_can_fail(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'a = f"{n} players"\nb = f"{counted(n, \'player\')}"\n'
        'log.info("serving %d game(s)", n)\nc = f"{n:>2} snakes"\n'
    )
    assert sorted(_nouns_after_numbers(sample)) == [
        (1, "n", "players"),
        (3, "%d", "%d game"),
        (3, "(s)", "e(s)"),
        (4, "n", "snakes"),
    ]
