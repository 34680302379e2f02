"""The bundled named boards: ``snl_pbem/boards/<name>.toml``, each a ``[board]`` table.

A game's config may give its board as one of these names (``board = "standard"``), as a
file or as an inline table; so may ``snl-pbem board NAME``. :func:`locate` is the one
resolution rule: a path that exists as a file is that file; else a bundled name is the
bundled board; else :class:`UnknownBoard`, whose text lists the bundled names.

Each file starts with a comment block saying what the board is and where it comes
from; its first line is the board's one-line description (``snl-pbem boards``).
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any


class UnknownBoard(LookupError):
    """A board named by a path that is no file and no bundled board's name."""

    def __str__(self) -> str:  # not KeyError's quoted repr
        return str(self.args[0]) if self.args else "unknown board"


@cache
def bundled_names() -> tuple[str, ...]:
    """Every bundled board's name, sorted."""
    folder = resources.files(__name__)
    return tuple(
        sorted(
            entry.name.removesuffix(".toml")
            for entry in folder.iterdir()
            if entry.name.endswith(".toml") and entry.is_file()
        )
    )


def bundled_text(name: str) -> str:
    """The text of the bundled board ``name`` (one of :func:`bundled_names`)."""
    if name not in bundled_names():
        raise UnknownBoard(f"{name!r} is not a bundled board ({listing()})")
    return resources.files(__name__).joinpath(f"{name}.toml").read_text(encoding="utf-8")


def bundled_table(name: str) -> dict[str, Any]:
    """The ``[board]`` table of the bundled board ``name``, as plain data."""
    table = tomllib.loads(bundled_text(name))["board"]
    assert isinstance(table, dict)  # every bundled file holds a [board] table (tested)
    return table


def description(name: str) -> str:
    """The first line of the bundled board's opening comment: what it is, in one line."""
    for line in bundled_text(name).splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text:
            return text
    return ""


def listing() -> str:
    """The bundled names, for a message: ``bundled boards: classic-sheet, family, ...``."""
    return "bundled boards: " + ", ".join(bundled_names())


def locate(spec: str, base: Path, base_is: str = "the config file") -> Path | str:
    """Where the board ``spec`` is: the file it names (relative to ``base`` unless absolute)
    when that is a file, else the bundled board of that name (returned as the name).
    ``base_is`` says what ``base`` is, for the message.

    Raises :class:`UnknownBoard` when it is neither; a path that exists but is not a file
    (a folder) is returned as a path, for the caller's reading to report.
    """
    file = Path(spec)
    file = file if file.is_absolute() else base / file
    if file.is_file():
        return file
    if spec in bundled_names():
        return spec
    if file.exists():
        return file
    raise UnknownBoard(
        f"board file {file} does not exist, and {spec!r} is not a bundled board "
        f"({listing()}): give a file's path (relative to {base_is}) or one of those names"
    )
