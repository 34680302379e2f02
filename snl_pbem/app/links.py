"""Where a game's page lives: the one place its path is made (the site writes it there,
reports link to it)."""

from __future__ import annotations

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
    found = {code: guide_url(config, code) for code in LANGUAGES}
    return {code: url for code, url in found.items() if url is not None}
