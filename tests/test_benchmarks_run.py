"""The benchmark scripts still run (tiny sizes) and print their figures with a baseline.

No timing is asserted here: benchmarks are read by people, not by the test suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "benchmarks"


def test_bench_rules_prints_engine_and_baseline() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_rules.py"), "--sizes", "300,600", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["300", "600"]
    assert all(row[5].endswith("x") for row in rows)
    assert "linearity" in done.stdout


def test_bench_slow_close_prints_before_after_and_baseline() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_slow_close.py"), "--messages", "6", "--limit", "0.2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(("baseline:", "before:", "after:"))
    ]
    assert [row.split(":")[0] for row in rows] == ["baseline", "before", "after"]
    assert all("/" in row.split()[-1] for row in rows), done.stdout  # honest orders counted
    assert "after / before" in done.stdout


def test_bench_html_prints_every_shape_beside_real_mail() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_html.py"), "--size-kib", "64", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.endswith("x")]
    baselines = [line for line in done.stdout.splitlines() if line.startswith("baseline:")]
    assert len(rows) >= 20 and len(baselines) == 4, done.stdout
    assert "worst shape" in done.stdout


@pytest.mark.slow  # real serve processes: about 30 s
def test_bench_hosting_prints_storm_idle_and_baselines() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_hosting.py"),
            *("--games", "2,4", "--players", "3", "--servers", "sqlite", "--idle-seconds", "1"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("sqlite ")]
    storms = [row for row in rows if len(row) >= 12]  # not the CPU table's
    assert [row[2] for row in storms] == ["2", "4"], done.stdout
    assert [row[3] for row in storms] == ["8", "16"], done.stdout  # 3 reports + 1 summary
    assert all(row[7].endswith("x") for row in storms), done.stdout  # beside the bare send
    rows = [line.split() for line in done.stdout.splitlines()]
    idle = [row for row in rows if len(row) == 11 and row[0].isdigit()]
    assert [row[0] for row in idle] == ["2", "4"], done.stdout
    assert all(row[3].endswith("x") for row in idle), done.stdout  # start-up beside baseline
    assert "cost per game at 4 games" in done.stdout


@pytest.mark.slow  # every benchmark, with PostgreSQL and Dovecot: about 3 min under load
def test_run_all_writes_the_report(tmp_path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [sys.executable, str(BENCH / "run_all.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    titles = ("Rules engine", "Round close", "Mail intake", "Outbox", "Close delay", "HTML")
    for title in (*titles, "Hosting"):
        assert f"## {title}" in text
    assert "baseline" in text and "The benchmark failed" not in text, text
