"""The benchmark scripts still run (tiny sizes) and print their figures with a baseline.

No timing is asserted here: benchmarks are read by people, not by the test suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "benchmarks"


def _bench(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run benchmark ``script`` with ``args``; it must succeed (its output on failure)."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_bench_rules_prints_engine_and_baseline() -> None:
    done = _bench("bench_rules.py", "--sizes", "300,600", "--repeats", "1", timeout=120)
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["300", "600"]
    assert all(row[5].endswith("x") for row in rows)
    assert "linearity" in done.stdout


def test_bench_backlog_prints_each_part_at_both_sizes_beside_its_baseline() -> None:
    done = _bench(
        "bench_backlog.py", *("--sizes", "200,400", "--close-sizes", "50,100", "--rate", "20000")
    )
    rows = re.findall(r"^\s+([\d,]+) messages: .* \(baseline\s+[\d.]+\)$", done.stdout, re.M)
    assert rows == ["200", "400", "200", "400", "50", "100"], done.stdout
    assert done.stdout.count("larger/smaller") == 3


def test_bench_dkim_prints_both_ways_beside_the_bare_rsa_step() -> None:
    done = _bench("bench_dkim.py", "--messages", "5", "--bits", "1024")
    rows = re.findall(
        r"^\s+(served \(OpenSSL\)|dkimpy's own RSA) .* \(baseline [\d.]+ ms\)$", done.stdout, re.M
    )
    assert rows == ["served (OpenSSL)", "dkimpy's own RSA"], done.stdout
    assert "the signatures the same bytes" in done.stdout


def test_bench_slow_close_prints_before_after_and_baseline() -> None:
    done = _bench("bench_slow_close.py", "--messages", "6", "--limit", "0.2")
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(("baseline:", "before:", "after:"))
    ]
    assert [row.split(":")[0] for row in rows] == ["baseline", "before", "after"]
    assert all("/" in row.split()[-1] for row in rows), done.stdout  # honest orders counted
    assert "after / before" in done.stdout


def test_bench_html_prints_every_shape_beside_real_mail() -> None:
    done = _bench("bench_html.py", "--size-kib", "64", "--repeats", "1")
    rows = [line.split() for line in done.stdout.splitlines() if line.endswith("x")]
    baselines = [line for line in done.stdout.splitlines() if line.startswith("baseline:")]
    assert len(rows) >= 20 and len(baselines) == 4, done.stdout
    assert "worst shape" in done.stdout


def test_bench_html_keys_prints_client_html_and_every_shape_beside_the_pattern() -> None:
    done = _bench("bench_html_keys.py", "--size", "20000", "--repeats", "1")
    shapes = [line for line in done.stdout.splitlines() if "pattern" in line and "x)" in line]
    assert len(shapes) == 7, done.stdout
    assert all(line.endswith("same: True") for line in shapes), done.stdout
    assert re.search(r"\d+ parts, .* ms a part \(\d+x\); same result: True", done.stdout)


def table(stdout: str, head: str) -> list[list[str]]:
    """The rows of the table whose header starts with ``head`` (up to its first note)."""
    lines = stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(head))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("  "):
            break
        rows.append(line.split())
    return rows


def test_bench_site_prints_close_pass_and_full_rewrite() -> None:
    done = _bench(
        "bench_site.py",
        *("--games", "30", "--rounds", "3", "--players", "3", "--played", "1"),
        *("--db", "sqlite"),
    )
    assert "first build, all 30 games" in done.stdout
    assert "baseline: a full rewrite of all 30 games (everything=True)" in done.stdout
    rows = table(done.stdout, "database    games  first s")
    assert [row[:2] for row in rows] == [["sqlite", "30"]], done.stdout
    assert rows[0][6].endswith("x") and rows[0][8].endswith("x"), done.stdout  # pass/close, all
    assert rows[0][9] == "3/3", done.stdout  # every pass: 1 game and the index, nothing else
    parts = table(done.stdout, "database    games  signatures")
    assert [row[:2] for row in parts] == [["sqlite", "30"]], done.stdout
    assert "property held" in done.stdout


@pytest.mark.slow  # real serve processes: about 30 s (a minute under load)
def test_bench_hosting_prints_storm_idle_and_baselines(tmp_path) -> None:
    bench = [sys.executable, str(BENCH / "bench_hosting.py"), "--players", "3"]
    bench += ["--db", "sqlite", "--idle-seconds", "1", "--seed-dir", str(tmp_path)]
    done = subprocess.run(
        [*bench, "--games", "2,4", "--no-idle"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    storms = table(done.stdout, "database   servers  games messages")
    assert [row[2] for row in storms] == ["2", "4"], done.stdout
    assert [row[3] for row in storms] == ["8", "16"], done.stdout  # 3 reports + 1 summary
    assert all(row[7].endswith("x") for row in storms), done.stdout  # beside the bare send
    assert [row[2] for row in table(done.stdout, "database   servers  games window")] == [
        "2",
        "4",
    ]
    assert "cost per game at 4 games" in done.stdout
    assert "serve idle" not in done.stdout
    # each row also as soon as it was measured, before the tables
    streamed = [line.split()[1:4] for line in done.stdout.splitlines() if line[:2] == "> "]
    rows = [row for row in streamed if row[1] == "sqlite"]
    assert rows == [["storm", "sqlite", "1"], ["cpu", "sqlite", "1"]] * 2, done.stdout
    assert done.stdout.index("> cpu") < done.stdout.index("deadline storm:")

    # only the idle part, with the seeds the run above kept; stopped after its first row,
    # it still prints the table of what it measured
    errors = tmp_path / "stderr"
    with (
        errors.open("w") as err,
        subprocess.Popen(
            [*bench, "--games", "4,2", "--no-storm"], stdout=subprocess.PIPE, stderr=err, text=True
        ) as proc,
    ):
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("> idle  sqlite"):
                proc.terminate()
                break
        out = "".join(seen) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, errors.read_text()
    assert "> setup 4 games: seed reused" in out
    assert "STOPPED part-way" in out and "deadline storm" not in out, out
    idle = table(out, "database    games  start s")
    assert [row[:2] for row in idle] == [["sqlite", "4"]], out
    assert idle[0][4].endswith("x"), out  # start-up beside its baseline


@pytest.mark.slow  # every benchmark, with PostgreSQL and Dovecot: about 3 min under load
def test_run_all_writes_the_report(tmp_path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    _bench("run_all.py", "--quick", "--out", str(out), timeout=900)
    text = out.read_text()
    titles = (
        "Rules engine",
        "Round close",
        "Mail intake",
        "Outbox",
        "Close delay",
        "HTML",
        "Mail kept",
    )
    for title in (*titles, "Hosting"):
        assert f"## {title}" in text
    assert "baseline" in text and "The benchmark failed" not in text, text


def test_bench_retention_prints_the_purge_beside_a_bare_write() -> None:
    done = _bench("bench_retention.py", "--rows", "600", "--db", "sqlite")
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("  sqlite")]
    assert [line[1:3] for line in lines] == [
        ["sent", "purge:"],
        ["sent", "baseline,"],
        ["inbound", "purge:"],
        ["inbound", "baseline,"],
    ], done.stdout
    assert "MiB" in done.stdout and re.search(r"bare: +[0-9.]+ s \([0-9.]+x\)", done.stdout)
    assert "a day with nothing due" in done.stdout


def test_bench_languages_prints_each_language_beside_english() -> None:
    done = _bench("bench_languages.py", *("--players", "6", "--rounds", "1", "--repeats", "1"))
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    found = {row[0]: row for row in rows if row[0] in ("en", "zh-Hans", "th")}
    assert set(found) == {"en", "zh-Hans", "th"}, done.stdout
    assert found["en"][4] == "1.00x" and all(row[4].endswith("x") for row in found.values())
    assert int(found["th"][2]) == 7  # a report each and the referee's summary
