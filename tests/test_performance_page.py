"""docs/performance.md is generated from ``benchmarks/results/``: it must be what the generator writes.

Each test runs ``benchmarks/results.py`` as a user would, in a subprocess (about 0.1 s each).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def results(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(root / "benchmarks" / "results.py"), *args], capture_output=True, text=True
    )


def test_the_performance_page_is_what_the_results_give():
    result = results(REPO, "--docs", "--check")
    assert result.returncode == 0, result.stderr


def copy_of_the_page_and_results(tmp_path: Path) -> Path:
    """benchmarks/results.py, its results and docs/performance.md in a tree of their own."""
    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    shutil.copy(REPO / "benchmarks" / "results.py", tmp_path / "benchmarks")
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs" / "performance.md", tmp_path / "docs")
    return tmp_path


def test_a_drifted_page_fails_the_check_and_says_how_to_regenerate_it(tmp_path):
    root = copy_of_the_page_and_results(tmp_path)
    page = root / "docs" / "performance.md"
    page.write_text(page.read_text().replace("| queue (sqlite) | 4,981", "| queue (sqlite) | 9,999"))
    result = results(root, "--docs", "--check")
    assert result.returncode == 1
    assert "regenerate it: python benchmarks/results.py --docs" in result.stderr

    # a new measurement: the page is stale until regenerated, then shows it as the newest, in bold
    new = {"date": "2099-01-01", "commit": "abc1234", "machine": "m", "figure": "startup.cold_s"}
    with (root / "benchmarks" / "results" / "startup.jsonl").open("a") as lines:
        lines.write(json.dumps({**new, "value": [1.5, 1.75, 2.0], "note": "a faster day"}) + "\n")
    assert results(root, "--docs").returncode == 0
    assert results(root, "--docs", "--check").returncode == 0
    startup = page.read_text().split("## Start-up")[1]
    assert "| 2099-01-01, abc1234 | m | **1.75 (1.50-2.00)** |  | a faster day |" in startup
    assert startup.index("2099-01-01") < startup.index("2026-11-28")  # newest first
    assert "| queue (sqlite) | 4,981 (3,776-5,235) |" in page.read_text()


def test_a_template_naming_an_unmeasured_figure_is_refused_with_its_line(tmp_path):
    root = copy_of_the_page_and_results(tmp_path)
    template = root / "benchmarks" / "results" / "performance.md.in"
    template.write_text(template.read_text() + "\nSomething took {{startup.nothing_s}} s.\n")
    result = results(root, "--docs")
    number = len(template.read_text().splitlines())
    assert result.returncode == 2
    assert f"performance.md.in:{number}: no measurement of 'startup.nothing_s'" in result.stderr
    assert "Traceback" not in result.stderr
    misused = results(root, "--check")
    assert misused.returncode == 2 and "--check goes with --docs" in misused.stderr
