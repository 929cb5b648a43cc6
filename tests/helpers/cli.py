"""The ``trinity`` command as tests run it: a subprocess of this interpreter, so the tree under test
(``PYTHONPATH`` included) is the one that runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

TRINITY = (sys.executable, "-m", "trinity.cli")
"""The command line of ``trinity``, for a test that starts it its own way (``Popen``)."""


def trinity(
    *args: str,
    env: Mapping[str, str] | None = None,
    inherit: bool = True,
    cwd: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """``trinity <args>`` to its end, its output captured; ``env`` adds to this process's
    environment, or is the whole of it with ``inherit=False``."""
    environment = {**os.environ, **(env or {})} if inherit else dict(env or {})
    return subprocess.run([*TRINITY, *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=timeout)
