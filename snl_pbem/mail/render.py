"""Rendering the Jinja2 templates in ``templates/`` (installed as ``snl_pbem.templates``).

Templates are plain text, named by audience and purpose (``player/notice.txt.j2``,
``referee/bounce.txt.j2``), or by ruleset where the rules shape the text
(``postal/orders_ack.txt.j2``). Their first line is ``Subject: ...``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, pass_environment
from jinja2.filters import do_wordwrap

from snl_pbem.rules.words import agree, counted

_EXTRA_FOLDERS: list[str] = []
_GLOBALS: dict[str, Any] = {}


def add_global(name: str, value: Any) -> None:
    """Give every template ``name`` (the app's command registry gives HELP its list of
    commands as ``command_help``: mail never imports the app, so the app hands it over)."""
    _GLOBALS[name] = value
    environment.cache_clear()


def add_template_folder(folder: str) -> None:
    """Also look for templates in ``folder`` (a ruleset kept outside the package, such as
    a test's own): ``<folder>/<ruleset>/orders_ack.txt.j2`` and the rest."""
    if folder not in _EXTRA_FOLDERS:
        _EXTRA_FOLDERS.append(folder)
        environment.cache_clear()


@lru_cache(maxsize=1)
def environment() -> Environment:
    folder = str(resources.files("snl_pbem.templates"))
    env = Environment(
        loader=FileSystemLoader([folder, *_EXTRA_FOLDERS]),
        undefined=StrictUndefined,  # a missing value is a bug, never a blank in a mail
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # plain text
        auto_reload=False,  # compiled once: no stat() of the template file per mail
    )
    # every count's noun: {{ n|counted("snake") }} is "1 snake" or "2 snakes"
    env.filters.update(counted=counted, agree=agree, wordwrap=_wordwrap)
    env.globals.update(_GLOBALS)
    return env


@pass_environment
def _wordwrap(
    env: Environment,
    s: str,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    """Jinja's ``wordwrap``, remembered: a round's reports wrap the same paragraphs for
    most of their readers, and textwrap was a fifth of rendering them."""
    if type(s) is not str:  # Markup equals its str: never hand one the other's result
        return do_wordwrap(env, s, width, break_long_words, wrapstring, break_on_hyphens)
    return _wrapped(env, s, width, break_long_words, wrapstring, break_on_hyphens)


@lru_cache(maxsize=512)
def _wrapped(
    env: Environment,
    s: str,
    width: int,
    break_long_words: bool,
    wrapstring: str | None,
    break_on_hyphens: bool,
) -> str:
    return do_wordwrap(env, s, width, break_long_words, wrapstring, break_on_hyphens)


def render(template_name: str, /, **context: Any) -> tuple[str, str]:
    """``(subject, body)`` of a template whose first line is ``Subject: ...``.

    ``hello`` is the greeting line; the outbox sets it to greet a seat's holder by their
    own name, and without it a mail greets its ``player`` by the seat's name."""
    name = template_name
    if "hello" not in context:
        player = context.get("player")
        seat = getattr(player, "name", None)
        context["hello"] = f"Hello {seat}," if isinstance(seat, str) and seat else "Hello,"
    text = environment().get_template(name).render(**context)
    first, _, body = text.partition("\n")
    if not first.startswith("Subject: "):
        raise ValueError(f"template {name} must start with a 'Subject: ' line")
    return first.removeprefix("Subject: ").strip(), body.lstrip("\n")
