"""Rendering the Jinja2 templates in ``templates/`` (installed as ``snl_pbem.templates``).

Templates are plain text, named by audience and purpose (``player/notice.txt.j2``,
``referee/bounce.txt.j2``), or by ruleset where the rules shape the text
(``postal/orders_ack.txt.j2``). Their first line is ``Subject: ...``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from gettext import NullTranslations
from importlib import resources
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template, pass_environment
from jinja2.filters import do_join, do_wordwrap, make_attrgetter
from jinja2.nodes import EvalContext
from jinja2.utils import pass_eval_context

from snl_pbem.i18n import DEFAULT, LANGUAGES, catalog, current, speaking, wrap
from snl_pbem.mail.quotes import COMMAND_WORDS
from snl_pbem.rules.words import Text, Translator, agree, counted, tr

_EXTRA_FOLDERS: list[str] = []
_GLOBALS: dict[str, Any] = {}


def add_global(name: str, value: Any) -> None:
    """Give every template ``name`` (the app's command registry gives HELP its list of
    commands as ``command_help``: mail never imports the app, so the app hands it over)."""
    _GLOBALS[name] = value
    environment.cache_clear()
    _template.cache_clear()


def add_template_folder(folder: str) -> None:
    """Also look for templates in ``folder`` (a ruleset kept outside the package, such as
    a test's own): ``<folder>/<ruleset>/orders_ack.txt.j2`` and the rest."""
    if folder not in _EXTRA_FOLDERS:
        _EXTRA_FOLDERS.append(folder)
        environment.cache_clear()
        _template.cache_clear()


@lru_cache(maxsize=len(LANGUAGES) + 1)
def environment(language: str = DEFAULT) -> Environment:
    """The templates, with the words of ``language``'s catalog (one environment each:
    gettext is installed into an environment)."""
    folder = str(resources.files("snl_pbem.templates"))
    env = Environment(
        loader=FileSystemLoader([folder, *_EXTRA_FOLDERS]),
        undefined=StrictUndefined,  # a missing value is a bug, never a blank in a mail
        autoescape=False,  # plain text
        auto_reload=False,  # compiled once: no stat() of the template file per mail
        extensions=["jinja2.ext.i18n"],
        finalize=_shown,
        # read as Babel's extraction reads them (babel.cfg), so that a {% trans %}
        # block's message id is the one looked up
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    words = catalog(language) or NullTranslations()
    env.install_gettext_translations(words, newstyle=True)  # type: ignore[attr-defined]
    env.globals["_"] = env.globals["gettext"] = _gettext(words)
    # every count's noun: {{ n|counted("snake") }} is "1 snake" or "2 snakes"
    env.filters.update(
        counted=counted,
        agree=agree,
        wordwrap=_wordwrap,
        paragraph=_paragraph,
        bullet=_bullet,
        ruleset_name=_ruleset_name,
        echoed=_echoed,
    )
    # Jinja's own take a str subclass as the str it is (English): these show it first
    env.filters.update(join=_join, string=_shown)
    env.globals.update(_GLOBALS)
    env.globals["language"] = language  # the mail's (HELP links to its guide)
    return env


@lru_cache(maxsize=256)
def _template(env: Environment, name: str) -> Template:
    """Template ``name`` of ``env``, its globals made one dict. Jinja keeps a template's
    globals as a ChainMap over the environment's, which each render copies key by key into
    its context: 9 us a mail, against 2 for a dict. An environment's globals are set once,
    as it is made (``add_global`` makes another); kept by environment, so a template of
    one made since is never one of an earlier one."""
    template = env.get_template(name)
    template.globals = dict(template.globals)
    return template


def _gettext(words: Translator) -> Callable[..., str]:
    """``_("...", n=3)`` and ``{% trans %}``: what Jinja's newstyle ``gettext`` does (the
    words, then ``%`` with the values, always), called directly. Jinja's, for a template
    that is not HTML, does just that through two context calls and a look-up by name: a
    seventh of rendering an acknowledgement."""
    lookup = words.gettext

    def gettext(message: str, /, **values: Any) -> str:
        return lookup(message) % values

    return gettext


def _shown(value: Any) -> Any:
    """What ``{{ value }}`` writes: a ``Text`` or a ``When`` in the mail's language (Jinja
    would write a ``str`` subclass's English value as it is)."""
    if isinstance(value, str) and type(value) is not str:
        return str(value)
    return value


@pass_eval_context
def _join(context: EvalContext, value: Any, d: str = "", attribute: Any = None) -> str:
    """Jinja's ``join``, with each ``Text`` or ``When`` in the mail's language."""
    if attribute is not None:
        value = map(make_attrgetter(context.environment, attribute), value)
    return str(do_join(context, [_shown(item) for item in value], _shown(d)))


_RULESETS: dict[str, Text] = {"postal": tr("postal"), "classic": tr("classic")}
"""The built-in rulesets' names as a mail says them ("postal rules": zh 邮件版规则)."""


def _ruleset_name(name: Any) -> Any:
    """``{{ ruleset|ruleset_name }}``: a ruleset's name in the mail's language (a ruleset
    kept outside the package: its own name)."""
    return _RULESETS.get(str(name), name)


def _echoed(line: Any, reason: Any, width: int = 72) -> str:
    """``{{ p.line|echoed(p.reason) }}``: a line of the player's message and why it was not
    obeyed (``"DICE 7": 7 is not a die value (1 to 6)``), wrapped where the mail's language
    allows, each line after the first indented four spaces. No line of it starts with a
    command word ("write ... e.g. ROUND 8"): a player who pastes part of our answer back
    would send that command. The word before moves down with it."""
    lines = wrap(f'"{line}": {reason}', width, current())
    out = lines[:1]
    for rest in lines[1:]:
        while _commanding(rest) and " " in out[-1].strip():
            head, _, last = out[-1].rstrip().rpartition(" ")
            out[-1], rest = head, f"{last} {rest}"
        out.append(rest if not _commanding(rest) else f"... {rest}")
    return "\n    ".join(out)


def _commanding(text: str) -> bool:
    """Whether a line would be read as a command (its first word is one of the order
    language's, in any case and with any punctuation after it)."""
    words = text.split()
    return bool(words) and words[0].rstrip(":=,.;").upper() in COMMAND_WORDS


def _paragraph(s: Any) -> str:
    """The lines of ``s`` as one paragraph, to be wrapped (``|paragraph|wordwrap(72)``):
    joined by a space, but in Chinese, which puts none between sentences, by nothing."""
    lines = [line.strip() for line in str(s).strip().splitlines()]
    return ("" if current() == "zh-Hans" else " ").join(line for line in lines if line)


def _bullet(s: Any, width: int = 72) -> str:
    """``s`` as an item of a list: "- " and its lines, wrapped where the mail's language
    allows, each after the first indented under the first's text."""
    return "- " + "\n  ".join(wrap(_paragraph(s), width - 2, current()))


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
    code = current()
    if type(s) is not str:  # Markup equals its str: never hand one the other's result
        s = str(s)
    if code != DEFAULT:
        return _wrapped_in(code, s, width, wrapstring or "\n")
    return _wrapped(env, s, width, break_long_words, wrapstring, break_on_hyphens)


@lru_cache(maxsize=512)
def _wrapped_in(code: str, s: str, width: int, wrapstring: str) -> str:
    """``s`` wrapped where ``code``'s words allow (snl_pbem.i18n.wrap), paragraph by
    paragraph, as Jinja's wordwrap keeps its line breaks."""
    return wrapstring.join(
        line for paragraph in s.splitlines() for line in wrap(paragraph, width, code)
    )


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


def greeting(name: str | None) -> Text:
    """The first line of a mail: "Hello <name>," or "Hello,"."""
    return tr("Hello {name},", name=name) if name else tr("Hello,")


def render(template_name: str, /, language: str | None = None, **context: Any) -> tuple[str, str]:
    """``(subject, body)`` of a template whose first line is ``Subject: ...``, in
    ``language`` (None: English; snl_pbem.i18n).

    ``hello`` is the greeting line; the outbox sets it to greet a seat's holder by their
    own name, and without it a mail greets its ``player`` by the seat's name."""
    name = template_name
    if "hello" not in context:
        player = context.get("player")
        seat = getattr(player, "name", None)
        context["hello"] = greeting(seat if isinstance(seat, str) else None)
    with speaking(language) as code:
        text = _template(environment(code), name).render(**context)
    first, _, body = text.partition("\n")
    if not first.startswith("Subject: "):
        raise ValueError(f"template {name} must start with a 'Subject: ' line")
    return first.removeprefix("Subject: ").strip(), body.lstrip("\n")
