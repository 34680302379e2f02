"""Where a game's page lives: the one place its path is made (the site writes it there,
reports link to it)."""

from __future__ import annotations

from snl_pbem.config import Config


def page_path(game_name: str) -> str:
    """A game's folder, relative to the site's root."""
    return f"games/{game_name}/"


def page_url(config: Config, game_name: str) -> str | None:
    """The game page's address for mail: None unless ``[web] base_url`` is set."""
    web = config.settings.web
    if web is None or web.base_url is None:
        return None
    return web.base_url + page_path(game_name)
