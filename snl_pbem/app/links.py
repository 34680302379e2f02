"""Where a game's page and the players' guides live: the one place their paths are made
(the site writes them there, mail links to them)."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

from snl_pbem.config import Config
from snl_pbem.i18n import DEFAULT, LANGUAGES


def page_path(game_name: str) -> str:
    """A game's folder, relative to the site's root."""
    return f"games/{game_name}/"


def page_url(config: Config, game_name: str) -> str | None:
    """The game page's address for mail: None unless ``[web] base_url`` is set."""
    web = config.settings.web
    if web is None or web.base_url is None:
        return None
    return web.base_url + page_path(game_name)


def guide_file(code: str) -> Traversable:
    """The players' guide in language ``code`` as installed (``docs/``, installed as
    ``snl_pbem.guides``; English: ``players.md``)."""
    name = "players.md" if code == DEFAULT else f"players.{code}.md"
    return resources.files("snl_pbem.guides") / name


def has_guide(code: str) -> bool:
    """Whether language ``code`` has a guide (a new language may not have one yet)."""
    return guide_file(code).is_file()


def guide_path(code: str) -> str:
    """The players' guide in language ``code``, relative to the site's root."""
    return "guide/players.html" if code == DEFAULT else f"guide/players.{code}.html"


def guide_url(config: Config, code: str) -> str | None:
    """The players' guide in ``code`` for mail (HELP): None unless ``[web] base_url``."""
    web = config.settings.web
    if web is None or web.base_url is None:
        return None
    return web.base_url + guide_path(code)


def guide_urls(config: Config) -> dict[str, str]:
    """The guide's address in every language (HELP shows the one of its mail's), or none
    when the site has no address."""
    found = {code: guide_url(config, code) for code in LANGUAGES if has_guide(code)}
    return {code: url for code, url in found.items() if url is not None}
