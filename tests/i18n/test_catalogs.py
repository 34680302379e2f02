"""The catalogs are complete and agree with what they translate (issue 25).

Babel extracts every message a player may read (babel.cfg: the players' templates, and
``tr``/``ntr`` in the code) into snl_pbem/locale/snl_pbem.pot; each language's catalog
holds every one of them, translated, with the same placeholders, the same indentation and
the same final line break. ``scripts/catalogs`` brings them up to date; these tests fail
until the new messages are translated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po

from snl_pbem.i18n import LANGUAGES, catalog
from snl_pbem.mail.parse import code_given, order_key_given

ROOT = Path(__file__).parents[2]
LOCALE = ROOT / "snl_pbem" / "locale"
OTHERS = [code for code in LANGUAGES if code != "en"]
PLACEHOLDER = re.compile(r"%\(\w+\)[sd]|\{\w+\}")


def extracted() -> set[str | tuple[str, ...]]:
    """The message ids Babel finds now, as scripts/catalogs extracts them."""
    with open(ROOT / "babel.cfg") as cfg:
        method_map, options_map = parse_mapping_cfg(cfg)
    keywords = {"_": None, "gettext": None, "ngettext": (1, 2), "tr": None, "ntr": (1, 2)}
    found: set[str | tuple[str, ...]] = set()
    for _file, _line, message, _comments, _context in extract_from_dir(
        str(ROOT), method_map, options_map, keywords=keywords
    ):
        found.add(message if isinstance(message, str) else tuple(message))
    return found


def po(code: str) -> Catalog:
    locale = LANGUAGES[code].locale
    with open(LOCALE / locale / "LC_MESSAGES" / "snl_pbem.po", "rb") as file:
        return read_po(file, locale=locale)


def ids(messages: Catalog) -> set[str | tuple[str, ...]]:
    return {m.id if isinstance(m.id, str) else tuple(m.id) for m in messages if m.id}


def test_the_template_catalog_holds_every_message_the_code_and_templates_have() -> None:
    with open(LOCALE / "snl_pbem.pot", "rb") as file:
        template = read_po(file)
    now, kept = extracted(), ids(template)
    assert len(now) > 300
    assert not now - kept, f"new messages, not in the catalogs (run scripts/catalogs): {now - kept}"
    assert not kept - now, f"messages no longer used (run scripts/catalogs): {kept - now}"


@pytest.mark.parametrize("code", OTHERS)
def test_every_message_is_translated(code: str) -> None:
    with open(LOCALE / "snl_pbem.pot", "rb") as file:
        wanted = ids(read_po(file))
    messages = po(code)
    assert ids(messages) == wanted, "run scripts/catalogs"
    problems = []
    for m in messages:
        if not m.id:
            continue
        first = m.id if isinstance(m.id, str) else m.id[0]
        strings = (m.string,) if isinstance(m.string, str) else tuple(m.string)
        if m.fuzzy or not all(strings):
            problems.append(f"untranslated: {first[:70]!r}")
            continue
        originals = (m.id,) if isinstance(m.id, str) else tuple(m.id)
        allowed = {p for text in originals for p in PLACEHOLDER.findall(text)}
        for text in strings:
            used = set(PLACEHOLDER.findall(text))
            if used - allowed or (isinstance(m.id, str) and used != allowed):
                wanted = sorted(allowed)
                problems.append(f"placeholders {sorted(used)}, not {wanted}: {first[:40]!r}")
            if text.endswith("\n") != first.endswith("\n"):
                problems.append(f"final line break differs: {first[:60]!r}")
            indent = len(first) - len(first.lstrip(" "))
            if len(text) - len(text.lstrip(" ")) != indent:
                problems.append(f"indentation differs: {first[:60]!r}")
    assert not problems, f"{code}: {len(problems)} problems:\n" + "\n".join(problems)


@pytest.mark.parametrize("code", OTHERS)
def test_a_catalog_compiles_and_speaks_its_language(code: str) -> None:
    translations = catalog(code)
    assert translations is not None
    words = translations.gettext("Lines not obeyed:")
    assert words != "Lines not obeyed:" and not words.isascii()
    plural = translations.ngettext(
        "Only the first 50 lines are read; %(count)s more line was not.\n",
        "Only the first 50 lines are read; %(count)s more lines were not.\n",
        5,
    )
    assert "%(count)s" in plural and not plural.isascii()


@pytest.mark.parametrize("code", OTHERS)
def test_the_key_and_the_code_we_send_are_known_in_every_language(code: str) -> None:
    """A welcome or a code mail pasted back in any language: its key and its code are
    found (to be redacted, and never read as an order), as in English."""
    translations = catalog(code)
    assert translations is not None
    key = translations.gettext("Your order key is %(key)s") % {"key": "abcd-efgh-2345-6789"}
    assert order_key_given(f"Hello,\n\n{key}\nKeep it private.\n") == "abcd-efgh-2345-6789"
    sent = translations.gettext("Your confirmation code is %(code)s") % {"code": "wxyz-2345"}
    assert code_given(f"Hello,\n{sent}\n") == "wxyz-2345"
