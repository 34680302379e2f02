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


@pytest.mark.slow  # every benchmark, with PostgreSQL and Dovecot: 40 s idle, 95 s under load
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
    for title in ("Rules engine", "Round close", "Mail intake", "Outbox", "Close delay", "HTML"):
        assert f"## {title}" in text
    assert "baseline" in text and "The benchmark failed" not in text, text
