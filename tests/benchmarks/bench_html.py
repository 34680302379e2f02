"""Benchmark: the HTML reader's time per MiB on the worst shapes found, beside real mail.

Each shape is 1 MiB of one pattern repeated (deep nesting of div, blockquote, table,
li and span; 100k siblings; many and long attributes; unclosed and mismatched tags;
comments; <br>, entity, script and CDATA floods; nested tables; many gmail_quote
containers; one 1 MiB text node), read by ``html_to_text`` as the sandbox reads
it. The baseline, measured in the same process, is the same reader on real mail:
the HTML of a Gmail and of an Outlook reply from tests/data/mail/clients (a few
KiB each, scaled to a MiB), and 1 MiB long Gmail and Outlook threads made of them.
Before issue 20, 1 MiB of nested <div>s ran past the sandbox's 10 s limit. Goal:
every shape well under a second per MiB, within a small factor of real mail.

Run: .venv/bin/python tests/benchmarks/bench_html.py [--size-kib 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import email
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from snl_pbem.mail import htmltext
from snl_pbem.mail.parse import decode_part, html_to_text

CLIENTS = Path(__file__).parents[1] / "data" / "mail" / "clients"
MIB = 1 << 20


def fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def shapes(size: int) -> dict[str, str]:
    """The worst shapes found, each ``size`` characters long."""
    return {
        "nested div": fill("<div>", size),
        "nested blockquote": fill("<blockquote>", size),
        "nested table": fill("<table><tr><td>", size),
        "nested div+table": fill("<div><table><tr><td>", size),
        "nested li": fill("<ul><li>", size),
        "nested span": fill("<span>", size),
        "nested gmail_quote": fill('<div class="gmail_quote">', size),
        "100k div siblings": fill("<div>x</div>", size),
        "unclosed p": fill("<p>", size),
        "unclosed b": fill("<b>", size),
        "unclosed a": fill('<a href="x">', size),
        "mismatched b/i": fill("<b><i></b></i>", size),
        "b closing div": fill("<b></div>", size),
        "many attributes": "<div " + " ".join(f"a{i}=b" for i in range(size // 8)) + ">",
        "long attribute": '<div title="' + fill("x", size - 20) + '">',
        "gmail_quote siblings": fill('<div class="gmail_quote">x</div>', size),
        "comments": fill("<!--x-->", size),
        "unclosed comments": fill("<!--<!--<p", size),
        "CDATA": fill("<![CDATA[x]]>", size),
        "<br> flood": fill("<br>", size),
        "entity flood": fill("&#45;", size),
        "script flood": fill("<script>x</script>", size),
        "1 MiB text node": fill("DICE 4 ", size),
    }


def client_html(name: str) -> str:
    msg = email.message_from_bytes((CLIENTS / name).read_bytes())
    part = next(p for p in msg.walk() if p.get_content_type() == "text/html")
    return decode_part(part)


def thread(html: str, size: int) -> str:
    """A long thread: the message's body again and again, as a reply quoting replies."""
    body = html.split("<body", 1)[-1].split(">", 1)[-1].rsplit("</body>", 1)[0]
    return "<html><body>" + fill(body, size - 30) + "</body></html>"


def best_of(repeats: int, run: Callable[[], object]) -> tuple[float, float]:
    """The best wall-clock and processor seconds of ``repeats`` runs (on a loaded machine
    the processor time is the fairer figure: the wall clock also counts the waits)."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        started, used = time.perf_counter(), time.process_time()
        run()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - used)
    return wall, cpu


def reader(html: str) -> str:
    """Which of the two readers takes this HTML (see snl_pbem.mail.htmltext)."""
    html = html[:1_000_000]
    if (
        html.count("<") > htmltext.MAX_TAGS
        or htmltext._MANY_ATTRIBUTES.search(html)
        or htmltext._depth(html) > htmltext.MAX_DEPTH
    ):
        return "strip"
    return "parser"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    size = args.size_kib * 1024
    print(
        f"bench_html: Python {platform.python_version()} on {platform.machine()}, "
        f"best of {args.repeats}; shapes of {args.size_kib} KiB; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'message':<26} {'KiB':>5} {'reader':>6} {'wall s/MiB':>10} {'cpu s/MiB':>10} "
        f"{'ratio':>6}"
    )
    gmail, outlook = client_html("gmail_web_en.eml"), client_html("outlook_de_html.eml")
    baseline = {
        "baseline: Gmail reply": gmail,
        "baseline: Outlook reply": outlook,
        "baseline: Gmail thread": thread(gmail, size),
        "baseline: Outlook thread": thread(outlook, size),
    }
    rows: list[tuple[str, str, tuple[float, float]]] = []
    for name, html in baseline.items():
        repeats = args.repeats * (20 if len(html) < 65536 else 1)
        wall, cpu = best_of(repeats, lambda html=html: html_to_text(html))
        rows.append((name, html, (wall * MIB / len(html), cpu * MIB / len(html))))
    slowest_real = max(cpu for _name, _html, (_wall, cpu) in rows)
    for name, html in shapes(size).items():
        wall, cpu = best_of(args.repeats, lambda html=html: html_to_text(html))
        rows.append((name, html, (wall * MIB / len(html), cpu * MIB / len(html))))
    for name, html, (wall, cpu) in rows:
        print(
            f"{name:<26} {len(html) / 1024:>5.0f} {reader(html):>6} {wall:>10.4f} {cpu:>10.4f} "
            f"{cpu / slowest_real:>5.1f}x"
        )
    worst_name, _html, (worst_wall, worst_cpu) = max(rows, key=lambda row: row[2][1])
    print(
        f"worst shape: {worst_name}, {worst_cpu:.3f} s per MiB of processor time "
        f"({worst_wall:.3f} s wall), {worst_cpu / slowest_real:.1f}x the slowest real mail "
        f"({slowest_real:.3f} s per MiB); the ratio column is processor time against it"
    )


if __name__ == "__main__":
    main()
