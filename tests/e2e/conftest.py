"""End-to-end runs: the real ``trinity run`` CLI in a subprocess, a tiny model, local Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import QUICKSTART


@pytest.fixture(scope="session")
def arithmetic_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arithmetic")
    subprocess.run([sys.executable, str(QUICKSTART / "make_data.py"), str(out)], check=True, capture_output=True)
    return out
