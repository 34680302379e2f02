"""deploy/config.example.toml shows every option with its default (issue 21).

The example said ``reveal_after_game = true`` while the code's default was false, and a
game that left it out ended with no reveal. So this test walks the schema (the settings
models of snl_pbem.config, and each ruleset's options) and holds the example to it:

- every option is in the example, set or commented out (``# key = value``), in its own
  table, and every key there is an option;
- a value set in the example is the default, unless its comment says "default" and the
  default (``# default: none``), or it is listed below as an example value, with why;
- a commented-out value is the default, unless the default is none: then it shows how to
  set an option that is off.

The first table of each name is the reference; a later one (the commented game players
join by mail) is an example of its own, checked by test_config.py.
"""

from __future__ import annotations

import re
import tomllib
import typing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from snl_pbem.config import Settings
from snl_pbem.rules.ruleset import DEFAULT_RULESET, get_ruleset, ruleset_names
from snl_pbem.timeutil import format_duration

EXAMPLE = Path(__file__).parents[1] / "deploy" / "config.example.toml"

EXAMPLE_VALUES = {
    "database.url": "the service's state directory, where ProtectSystem=strict lets it write",
    "mail.imap.password_file": "a mailbox needs a password: the credential the unit loads",
    "games.id": "required: no default",
    "games.board": "required: no default",
    "games.first_deadline": "required: no default",
    "games.round_length": "required unless deadlines are listed",
    "games.players": "a closed game needs its players: two, one with a key of its own",
    "games.players.key": "shows a key set in the config (the other player's is generated)",
    "games.players.language": "shows a player's own language (the others take the game's)",
}
"""Options whose value in the example is necessarily an example, and why."""

NOT_KEYS = {"games.options": "the ruleset's options, each a key of the game's table (below)"}
"""Fields of the schema that are no key of the file."""


@dataclass(frozen=True)
class Line:
    table: str
    key: str
    value: Any
    comment: str
    active: bool


def example_lines(text: str) -> list[Line]:
    """Every ``key = value`` of the first table of each name, set or commented out, with
    its comment (and the comment lines that continue it)."""
    data = tomllib.loads(text)
    lines: list[Line] = []
    table, seen, skip = "", {""}, False
    raw = text.splitlines()
    for number, line in enumerate(raw):
        header = re.match(r"^(?:# )?\[\[?([a-z.]+)\]\]?", line)
        if header:
            table = header.group(1)
            skip = table in seen  # a later table of the same name: an example of its own
            seen.add(table)
            continue
        found = re.match(r"^(# )?([a-z_]+) = ", line)
        if skip or not found:
            continue
        active = found.group(1) is None
        key = found.group(2)
        comment = line.split(" #", 1)[1] if " #" in line else ""
        for after in raw[number + 1 :]:
            if not re.match(r"^#\s{3,}#", after):
                break
            comment += " " + after.split("#", 2)[2]
        if active:
            where: Any = data
            for part in filter(None, table.split(".")):
                where = where[part][0] if isinstance(where[part], list) else where[part]
            value = where[key]
        else:
            value = tomllib.loads(line[2:].split(" #", 1)[0])[key]
        lines.append(Line(table, key, value, comment.strip(), active))
    # the players' tables, inline in the first game
    for player in data["games"][0]["players"]:
        lines.extend(Line("games.players", k, v, "", True) for k, v in player.items())
    return lines


def models(root: type[BaseModel] = Settings) -> dict[str, type[BaseModel]]:
    """Each table of the file (``mail.imap``, ``games``...) and the settings model of it."""
    found: dict[str, type[BaseModel]] = {"": root}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            inner = _model_in(field.annotation)
            if inner is not None:
                found[prefix + name] = inner
                walk(inner, f"{prefix}{name}.")

    walk(root, "")
    return found


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        inner = _model_in(arg)
        if inner is not None:
            return inner
    return None


def parsed(field: FieldInfo, value: Any) -> Any:
    """``value`` as the field reads it (durations, paths, annotated checks)."""
    annotation: Any = field.annotation
    if field.metadata:
        annotation = Annotated[(annotation, *field.metadata)]
    return TypeAdapter(annotation).validate_python(value)


def shown(default: Any) -> str:
    """A default as a comment would say it."""
    if default is None or default in ("", [], {}):
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, timedelta):
        return format_duration(default)
    return str(default)


def problems_of(text: str, root: type[BaseModel] = Settings) -> list[str]:
    """How the example ``text`` fails to show the options of ``root`` with their defaults."""
    lines = {f"{line.table}.{line.key}".lstrip("."): line for line in example_lines(text)}
    tables = models(root)
    options = {
        f"{table}.{name}".lstrip("."): field
        for table, model in tables.items()
        for name, field in model.model_fields.items()
    }
    problems = []
    for path, field in options.items():
        if path in NOT_KEYS or path in tables:
            continue
        line = lines.get(path)
        if line is None:
            problems.append(f"{path}: not in the example (add it, commented out with its default)")
            continue
        if field.is_required() or path in EXAMPLE_VALUES:
            continue
        default = field.get_default(call_default_factory=True)
        if not line.active and default is None:
            continue  # how to set an option that is off by default
        if parsed(field, line.value) == default:
            continue
        said = line.comment.lower()
        if line.active and "default" in said and shown(default).lower() in said:
            continue  # an example, and its comment says the default
        problems.append(
            f"{path}: the example says {line.value!r}, the default is {shown(default)!r}: "
            "write the default, or say it in the comment (# default: ...)"
        )
    ruleset_keys = {
        f"games.{key}" for name in ruleset_names() for key in get_ruleset(name).option_keys
    }
    problems.extend(
        f"{path}: in the example, but no option of the schema"
        for path in lines
        if path not in options and path not in ruleset_keys
    )
    return problems


def test_every_option_of_the_schema_is_in_the_example_with_its_default() -> None:
    problems = problems_of(EXAMPLE.read_text())
    assert not problems, "\n".join(problems)


def test_every_ruleset_option_is_in_the_example_with_its_default() -> None:
    """A classic game's options are keys of its table: listed, commented out, in the
    example's game, each with the ruleset's default."""
    lines = [line for line in example_lines(EXAMPLE.read_text()) if line.table == "games"]
    by_key = {line.key: line for line in lines}
    for name in ruleset_names():
        ruleset = get_ruleset(name)
        defaults = ruleset.read_options({}, "")
        for key in ruleset.option_keys:
            line = by_key.get(key)
            assert line is not None, f"{name} option {key}: not in the example"
            assert not line.active, f"{key}: set in the example's game, which is postal"
            assert ruleset.read_options({key: line.value}, "")[key] == defaults[key], (
                f"{name} option {key}: the example says {line.value!r}, the default is "
                f"{defaults[key]!r}"
            )
    assert by_key["ruleset"].value == DEFAULT_RULESET


def test_reveal_after_game_is_off_unless_set() -> None:
    """R19: "The referee will not reveal the die throws or active trapdoors", and the
    board is the players' to discover (R2): a reveal after the game is the GM's choice,
    made with the players, and never the default."""
    game = models()["games"]
    assert game.model_fields["reveal_after_game"].default is False
    assert re.search(r"^reveal_after_game = false ", EXAMPLE.read_text(), re.M)


def test_the_check_names_a_wrong_default_and_a_missing_option() -> None:
    """The test can fail: an example value that differs from the default (the issue's
    reveal_after_game = true), a commented one likewise, a new option the example does
    not show, and a key that is no option."""
    text = EXAMPLE.read_text()
    wrong = text.replace("reveal_after_game = false ", "reveal_after_game = true  ")
    wrong = wrong.replace("# max_queue_time = ", '# max_queue_time = "2d" #')
    wrong = wrong.replace("max_absent = 3 ", "max_absnet = 3 ")
    problems = problems_of(wrong)
    assert any(p.startswith("games.reveal_after_game: the example says True") for p in problems)
    assert any(p.startswith("mail.lmtp.max_queue_time: the example says '2d'") for p in problems)
    assert (
        "games.max_absent: not in the example (add it, commented out with its default)" in problems
    )
    assert "games.max_absnet: in the example, but no option of the schema" in problems

    class Newer(Settings):
        brand_new: int = 1

    assert problems_of(text, Newer) == [
        "brand_new: not in the example (add it, commented out with its default)"
    ]


def test_example_lines_reads_set_and_commented_options() -> None:
    lines = {f"{line.table}.{line.key}": line for line in example_lines(EXAMPLE.read_text())}
    assert (lines["mail.lmtp.port"].active, lines["mail.lmtp.port"].value) == (False, 8024)
    assert (lines["games.double_from_round"].active, lines["games.double_from_round"].value) == (
        True,
        7,
    )
    assert lines["games.id"].value == "spring26"  # the first game; the later one is an example
    assert lines[".timezone"].comment == 'default "UTC"'
