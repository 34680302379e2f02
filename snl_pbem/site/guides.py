"""The players' guides as pages of the site: ``docs/players.md`` and its translations
(installed as ``snl_pbem.guides``), one page per language, that HELP links to
(snl_pbem.app.links.guide_url) when the site has an address."""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt

from snl_pbem.app.links import guide_file, guide_path, has_guide
from snl_pbem.i18n import LANGUAGES


def guide_source(code: str) -> str:
    """The guide's Markdown in language ``code`` (English: ``players.md``)."""
    return guide_file(code).read_text(encoding="utf-8")


_GUIDE_LINK = re.compile(r'href="players(\.[A-Za-z-]+)?\.md(#[^"]*)?"')


def _linked(html: str) -> str:
    """The guides' links to each other point at their pages (``players.th.md`` is the
    page ``players.th.html`` beside it)."""
    return _GUIDE_LINK.sub(lambda m: f'href="players{m[1] or ""}.html{m[2] or ""}"', html)


def guide_html(code: str) -> tuple[str, str]:
    """``(title, body)``: the guide's first heading as plain text and its body as HTML
    (the Markdown holds no raw HTML: it is escaped, as any text would be). Read each pass,
    made again only when it changed: a GM's edit of the installed text shows at the next."""
    return _html(guide_source(code))


@lru_cache(maxsize=8)
def _html(source: str) -> tuple[str, str]:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(source)
    title = next(
        (tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"),
        "",
    )
    return title, _linked(md.renderer.render(tokens, md.options, {}))


def guide_pages() -> dict[str, tuple[str, str, str]]:
    """Every guide page: its path in the site, its language code, and its title and body
    (``guide_html``); a language without a guide has no page (HELP links to none)."""
    return {guide_path(code): (code, *guide_html(code)) for code in LANGUAGES if has_guide(code)}
