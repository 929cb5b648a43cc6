"""How the benchmarks print repeated measurements."""

from __future__ import annotations

import statistics


def spread(values: list[float], spec: str = ".2f") -> str:
    """``median (min-max)`` of repeated measurements, each formatted with ``spec``."""
    return f"{statistics.median(values):{spec}} ({min(values):{spec}}-{max(values):{spec}})"
