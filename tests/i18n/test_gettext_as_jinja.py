"""The templates' ``_()`` and ``{% trans %}`` are called directly (``snl_pbem.mail.render``,
a seventh of rendering an acknowledgement was Jinja's two context calls around each), and
write exactly what Jinja's own newstyle gettext writes: every template, in every language,
the same random draws rendered both ways."""

from __future__ import annotations

from gettext import NullTranslations
from typing import Any

import pytest
from jinja2.ext import _gettext_alias
from templatehelpers import INCLUDED_ONLY, TEMPLATES, drawn

from snl_pbem.i18n import LANGUAGES, catalog, speaking
from snl_pbem.mail.render import environment

DRAWS = 10
"""Draws per template and language (the layout tests draw 120: this one compares two ways
of rendering the same draws, and a broken `_` differs in every draw)."""


def _both(name: str, code: str, context: dict[str, Any]) -> tuple[str | None, str | None]:
    ours = environment(code)
    theirs = ours.overlay(cache_size=0)  # its templates compiled against its own globals
    theirs.globals = dict(ours.globals)
    theirs.install_gettext_translations(  # type: ignore[attr-defined]
        catalog(code) or NullTranslations(), newstyle=True
    )
    theirs.globals["_"] = _gettext_alias  # the extension sets it only as it starts
    assert theirs.globals["_"] is not ours.globals["_"]
    assert theirs.globals["gettext"] is not ours.globals["gettext"]
    out: list[str | None] = []
    for env in (ours, theirs):
        try:
            out.append(env.get_template(name).render(**context))
        except Exception:  # a draw the template cannot take: so for both
            out.append(None)
    return out[0], out[1]


@pytest.mark.parametrize("name", sorted(set(TEMPLATES) - INCLUDED_ONLY))
@pytest.mark.parametrize("code", list(LANGUAGES))
def test_a_template_writes_what_jinjas_gettext_writes(name: str, code: str) -> None:
    rendered = 0
    with speaking(code) as language:
        for _, context in drawn(name, DRAWS):
            ours, theirs = _both(name, language, context)
            assert ours == theirs
            rendered += ours is not None
    assert rendered >= DRAWS // 4


def test_values_and_percent_signs_as_jinja_has_them() -> None:
    """A value put in, a ``%%`` (always formatted: newstyle), a block with a count."""
    env = environment("en")
    text = env.from_string(
        '{{ _("%(n)s of 100%%", n=3) }}|{{ _("plain") }}|'
        "{% trans n=2 %}{{ n }} orders{% endtrans %}"
    ).render()
    assert text == "3 of 100%|plain|2 orders"
