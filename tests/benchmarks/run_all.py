"""Run every benchmark and write BENCHMARKS.md: each figure beside its same-run baseline.

Run: .venv/bin/python tests/benchmarks/run_all.py [--quick]
(--quick uses small sizes, to check that the report can be made.)
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]

BENCHES = [
    (
        "Rules engine: one two-turn round",
        "bench_rules.py",
        [],
        ["--sizes", "1000,5000", "--repeats", "1"],
        "engine within 10x of a bare Python loop, linear in players",
    ),
    (
        "Round close (SQLite and PostgreSQL)",
        "bench_close.py",
        [],
        ["--sizes", "1000,5000"],
        "within 3x of a bare executemany of the same rows, linear in players",
    ),
    (
        "Mail intake through Dovecot",
        "bench_ingest.py",
        [],
        ["--messages", "300", "--players", "50"],
        "end to end at least half the rate of the bare parse",
    ),
    (
        "Intake under a backlog: the readers' queue and the waits on it",
        "bench_backlog.py",
        [],
        ["--sizes", "300,3000", "--close-sizes", "100,500", "--rate", "30000"],
        "the cost a message at ten times the backlog within 1.5x (the baselines: the square)",
    ),
    (
        "Outbox to an SMTP sink",
        "bench_send.py",
        [],
        ["--messages", "500"],
        ">= 0.9x a bare smtplib loop on one connection, > 1.5x in parallel",
    ),
    (
        "DKIM: a signature on the mail we write",
        "bench_dkim.py",
        [],
        ["--messages", "100"],
        "each mail signed in well under a millisecond (every report of a storm is signed)",
    ),
    (
        "HTML reader on the worst shapes",
        "bench_html.py",
        [],
        ["--size-kib", "128", "--repeats", "1"],
        "every shape well under a second per MiB, within a small factor of real mail",
    ),
    (
        "Close delay with 100 slow messages before a deadline",
        "bench_slow_close.py",
        [],
        ["--messages", "20", "--limit", "0.2"],
        "slow messages make a close late by 30 s at most (the budget), however many; "
        "the honest orders stored with them count",
    ),
    (
        "Hosting: a deadline storm, the idle scheduler, start-up (SQLite and PostgreSQL)",
        "bench_hosting.py",
        [],
        ["--quick"],
        "a storm of N games x 20 players within 3x a bare send of its mail, its cost per game "
        "at 5,000 games within 1.5x that at 100; log lines in proportion to the games; the "
        "idle scheduler's CPU per minute flat; start-up quick with thousands of games",
    ),
    (
        "Mail kept: the daily purge of old mail, sent and received",
        "bench_retention.py",
        [],
        ["--rows", "1000"],
        "the daily purge holds SQLite's write lock for tens of milliseconds at a time, "
        "whatever the outbox's size; a day with nothing due costs little",
    ),
    (
        "Players' languages: a round's mail in Chinese and Thai against English",
        "bench_languages.py",
        [],
        ["--players", "100", "--rounds", "3", "--repeats", "2"],
        "a Chinese or Thai round within 1.5x the English one",
    ),
    (
        "Game pages: the site pass after a round close at 1,000 games",
        "bench_site.py",
        [],
        ["--games", "100", "--rounds", "3", "--db", "sqlite"],
        "a close rewrites its game's pages and the index only, a small part of a full rewrite",
    ),
]
NOTES = {
    "bench_hosting.py": (
        "What limits the speed-up of several servers on a 2-core machine: one `serve` is "
        "one Python process, so its closes use about one core however many threads run "
        "them; a second server can use the second core, but the servers, PostgreSQL's "
        "backends and the SMTP sink all share those two cores, so a third and a fourth only "
        "add their own overhead (their start-up, their plan, their outbox polls and "
        "connections). The CPU table shows it: once the machine's busy seconds reach its "
        "2 x window, more servers cannot help. Several servers pay off where each has cores "
        "of its own: one machine per server, one PostgreSQL. The full run (100, 1,000 and "
        "5,000 games, set-up included) takes one to two hours; `--games`, `--db`, "
        "`--servers` and `--no-storm` / `--no-idle` pick a part of it, and `--seed-dir` "
        "keeps the started games (about 60 ms a game to start) for the next run."
    ),
}


def postgres_version() -> str:
    try:
        done = subprocess.run(
            ["pg_config", "--version"], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() or "not found"
    except OSError:
        return "not found"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args()
    lines = [
        "# snl-pbem benchmarks",
        "",
        f"Made by `{Path(sys.executable).name} tests/benchmarks/run_all.py"
        f"{' --quick' if args.quick else ''}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}; SQLite "
        f"{sqlite3.sqlite_version}; {postgres_version()}.",
        "",
        "Every figure is printed beside a baseline measured in the same run; the ratio says "
        "how the project compares. Each section shows the command that reproduces it.",
        "",
    ]
    for title, script, full_args, quick_args, goal in BENCHES:
        command = [sys.executable, str(HERE / script), *(quick_args if args.quick else full_args)]
        print(f"running {script} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
        elapsed = time.monotonic() - started
        # "> " rows: bench_hosting's rows as measured, which its tables repeat at the end
        output = "\n".join(
            line
            for line in done.stdout.splitlines()
            if not line.startswith(("INFO", "WARNING", "> "))
        )
        shown = " ".join(["python", f"tests/benchmarks/{script}", *command[2:]])
        lines += [
            f"## {title}",
            "",
            f"Goal: {goal}.",
            "",
            f"Reproduce: `{shown}` ({elapsed:.0f} s)",
            "",
            "```",
            output.strip() or "(no output)",
            "```",
            "",
        ]
        if script in NOTES:
            lines += [NOTES[script], ""]
        if done.returncode != 0:
            lines += ["The benchmark failed:", "", "```", done.stderr[-2000:].strip(), "```", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
