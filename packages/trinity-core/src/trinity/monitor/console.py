"""The console monitor: always active, and the machine-readable record of every run.

Each logged dict is printed as one veRL-style progress line and appended, with its
step and the Unix time it was logged (``timestamp``, seconds), as one JSON line to
``<job_dir>/monitor/<role>.jsonl``; tables go to
``<job_dir>/monitor/<role>_tables.jsonl``. Lines are flushed as written, so a crash
keeps everything logged before it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from trinity.monitor.base import Monitor

logger = logging.getLogger("trinity.console")


def _jsonable(value: Any) -> Any:
    """numpy and torch scalars become floats; anything else becomes its string."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _format(value: Any) -> str:
    """Four significant digits for floats (of any library); ints and the rest as they print."""
    if isinstance(value, int):
        return str(value)
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


class ConsoleMonitor(Monitor):
    """Logs a progress line per step and keeps JSONL files of metrics and tables."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics_path = self.monitor_dir / f"{self.role}.jsonl"
        self.tables_path = self.monitor_dir / f"{self.role}_tables.jsonl"
        self._metrics_file = self.metrics_path.open("a", encoding="utf-8")
        self._tables_file: IO[str] | None = None

    @staticmethod
    def _append(file: IO[str], record: Mapping[str, Any]) -> None:
        file.write(json.dumps(record, default=_jsonable) + "\n")
        file.flush()

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._append(self._metrics_file, {"step": step, "timestamp": time.time(), **metrics})
        shown = " - ".join(f"{key}:{_format(value)}" for key, value in metrics.items())
        logger.info("[%s] step:%d - %s", self.role, step, shown)

    def log_table(self, table_name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        if self._tables_file is None:
            self._tables_file = self.tables_path.open("a", encoding="utf-8")
        self._append(self._tables_file, {"step": step, "table": table_name, "rows": list(rows)})
        logger.info("[%s] step:%d - table %s: %d rows -> %s", self.role, step, table_name, len(rows), self.tables_path)

    def close(self) -> None:
        for file in (self._metrics_file, self._tables_file):
            if file is not None:
                file.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file the console monitor wrote, in order."""
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]
