"""Benchmark: a key replaced in HTML by following it (``htmlkeys.replace_key``) against
making the key's pattern and replacing with it, the way it was done before (the baseline,
measured in the same process, on the same HTML and key).

Two sets: the HTML parts of the orders as the clients write them (``tests/data/mail/
clients``, each made to hold a generated key as written, one new key each time, as a
server with more players than a worker keeps patterns meets them); and the hostile shapes
the reviews found, 300,000 characters each (unclosed comments after every letter,
ampersands, references that are prefixes of others, HTML much like the key), where
following the key goes over its budget and the pattern is made after all. Every result
is checked equal to the pattern's. Goal: client HTML well under the pattern's cost; no
hostile shape more than a few times the pattern's.

Run: .venv/bin/python tests/benchmarks/bench_html_keys.py [--repeats 3] [--size 300000]
"""

from __future__ import annotations

import argparse
import email
import os
import platform
import re
import time
from collections.abc import Callable
from email.message import Message
from pathlib import Path

from snl_pbem.keys import ALPHABET, generate_key
from snl_pbem.mail import htmlkeys
from snl_pbem.mail.parse import decode_part

CLIENTS = Path(__file__).parents[1] / "data" / "mail" / "clients"


def client_html() -> list[str]:
    """Each client file's HTML part, with a key written in it where its text starts."""
    found = []
    for path in sorted(CLIENTS.glob("*.eml")):
        msg = email.message_from_bytes(path.read_bytes())
        for part in msg.walk():
            if isinstance(part, Message) and part.get_content_type() == "text/html":
                markup = decode_part(part)
                at = markup.find(">", markup.lower().find("<body")) + 1
                found.append(f"{markup[:at]}KEY @KEY@<br>{markup[at:]}")
                break
    return found


def hostile(key: str, size: int) -> dict[str, str]:
    spray = "".join(c + "<!--" for c in ALPHABET.upper() + ALPHABET.lower())
    head = spray * (size // 2 // len(spray))
    return {
        "a letter and '<!--', unclosed": head + "-" * (size - len(head)),
        "'a<!--' for the key 'ab'": "a<!--" * (size // 5),
        "ampersands": "&" * size,
        "'&#1' (a prefix of many)": "&#1" * (size // 3),
        "dashes in every form": "-&hyphen;&dash;&#8208;\u2010" * (size // 26),
        "the key less its last letter": (key[:-1] + "<b>") * (size // (len(key) + 2)),
        "comments of many '-->'": ("a<!--" + "-->" * 333) * (size // 1004),
    }


def timed(run: Callable[[], str], repeats: int) -> tuple[float, str]:
    best, result = float("inf"), ""
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def compare(markup: str, key: str, repeats: int) -> tuple[float, float, bool]:
    """(the pattern made and used, followed), in seconds; whether they agree."""

    def by_pattern() -> str:
        htmlkeys.forms_pattern.cache_clear()
        re.purge()  # (``re`` keeps patterns too)
        return htmlkeys.forms_pattern(key).sub("****", markup)

    def followed() -> str:
        htmlkeys.forms_pattern.cache_clear()
        re.purge()
        return htmlkeys.replace_key(markup, key, "****")

    before, want = timed(by_pattern, repeats)
    after, got = timed(followed, repeats)
    return before, after, got == want


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=300_000, help="characters a shape")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus")
    print("\nclient HTML, a new key each (ms: the pattern made and used -> followed)")
    totals = [0.0, 0.0]
    agree = True
    parts = client_html()
    for markup in parts:
        key = generate_key()
        before, after, same = compare(markup.replace("@KEY@", key), key, args.repeats)
        totals[0] += before
        totals[1] += after
        agree = agree and same
    count = len(parts)
    print(
        f"  {count} parts, {sum(map(len, parts)) // count:,} characters on average: "
        f"{1e3 * totals[0] / count:.2f} -> {1e3 * totals[1] / count:.3f} ms a part "
        f"({totals[0] / totals[1]:.0f}x); same result: {agree}"
    )
    key = generate_key()
    print(f"\nhostile shapes, {args.size:,} characters (ms)")
    for name, markup in hostile(key, args.size).items():
        which = "ab" if "'ab'" in name else key
        before, after, same = compare(markup, which, args.repeats)
        print(
            f"  {name:32} pattern {1e3 * before:7.1f}  followed {1e3 * after:7.1f} "
            f"({after / before:.1f}x)  same: {same}"
        )


if __name__ == "__main__":
    main()
