"""Every benchmark script starts: its imports (the tests' helpers among them) resolve and its
command line parses, so that a helper moved within tests/ cannot break a benchmark unseen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("bench_*.py")), ids=lambda path: path.name)
def test_a_benchmark_imports_and_shows_its_usage(script: Path):
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: "), result.stdout[:500]
