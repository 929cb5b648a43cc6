"""``trinity log JOB_DIR``: the tail of a run's logs and its latest metrics, or both as they grow.

It reads the job folder only (``log/<role>.log``, ``monitor/<role>.jsonl``), so it follows a run
started anywhere, from another shell or machine that shares the folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.report import HEADLINE, find_jobs


def metrics_line(role: str, record: dict[str, Any]) -> str:
    """``[trainer] step 12: actor/pg_loss 0.1234, ...``: the headline metrics of one record."""
    shown = ", ".join(
        f"{key} {value:.4g}" for key, value in record.items() if HEADLINE.match(key) and isinstance(value, int | float)
    )
    return f"[{role}] step {record.get('step', '?')}: {shown or 'no headline metrics'}"


@dataclass
class Tail:
    """A file read from where the last read stopped; a partial last line waits for its end."""

    path: Path
    format: Callable[[str], str | None]
    offset: int = 0
    pending: str = ""

    def new_lines(self) -> Iterator[str]:
        if not self.path.is_file():
            return
        with open(self.path, encoding="utf-8", errors="replace") as file:
            file.seek(self.offset)
            text = self.pending + file.read()
            self.offset = file.tell()
        *lines, self.pending = text.split("\n")
        for line in lines:
            shown = self.format(line)
            if shown is not None:
                yield shown


def _log_format(prefix: str) -> Callable[[str], str | None]:
    return lambda line: f"{prefix}{line}" if line.strip() else None


def _metrics_format(role: str) -> Callable[[str], str | None]:
    def show(line: str) -> str | None:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return None
        return metrics_line(role, record) if isinstance(record, dict) else None

    return show


def tails(folder: Path) -> list[Tail]:
    """One tail per log and metrics file of the job (of each stage's job, for a stages folder)."""
    jobs = find_jobs(folder)
    found = []
    for job in jobs:
        stage = f"{job.name}/" if len(jobs) > 1 else ""
        for log in sorted((job.folder / "log").glob("*.log")):
            found.append(Tail(log, _log_format(f"{stage}{log.stem} | ")))
        for metrics in sorted((job.folder / "monitor").glob("*.jsonl")):
            if not metrics.stem.endswith("_tables"):
                found.append(Tail(metrics, _metrics_format(f"{stage}{metrics.stem}")))
    return found


def show_log(folder: Path, lines: int, follow: bool, echo: Callable[[str], None], poll: float = 0.5) -> None:
    """Print the last ``lines`` lines of each file; with ``follow``, then every new line until interrupted."""
    files = {tail.path: tail for tail in tails(folder)}
    for tail in files.values():
        seen = list(tail.new_lines())
        for line in seen[-lines:] if lines else []:
            echo(line)
    while follow:
        time.sleep(poll)
        for tail in tails(folder):  # a stage that starts later adds its files
            for line in files.setdefault(tail.path, tail).new_lines():
                echo(line)
