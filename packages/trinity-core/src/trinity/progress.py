"""What ``trinity run`` shows while a stage runs: one progress display per role.

The roles (Ray actors) append every step's metrics to ``<job_dir>/monitor/<role>.jsonl``
(the console monitor, flushed per line); the driver tails those files each second, so the
display needs nothing from the roles but their planned step count. On a terminal each role
gets a tqdm bar (step / total, rate, ETA, reward or loss); off a terminal (CI logs, a file)
nothing redraws: a plain line per role every ``monitor.console_interval``. Either way a
metrics line per role is printed at that interval, and a last one when the stage ends.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from trinity.common.files import write_json
from trinity.config.schema import Config
from trinity.monitor.learnable import Streak

PLANNED_STEPS_FILE = Path("meta") / "planned_steps.json"
"""In the job folder: each role's planned steps, as ``trinity run`` learns them (``{"explorer": 200}``)."""
HEADLINE_KEYS = ("rollout/reward/mean", "actor/pg_loss", "actor/sft_loss", "actor/dpo_loss", "actor/loss")
"""The metrics a progress line names, the first two a role logs (reward for the explorer, a loss
for the trainer)."""


@dataclass
class RoleProgress:
    """One role's steps, read from the tail of its metrics file."""

    role: str
    metrics_path: Path
    total: int | None = None
    step: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    first_step_at: float | None = None
    first_step: int = 0
    streak: Streak = field(default_factory=Streak)
    _offset: int = 0
    _partial: str = ""

    def poll(self) -> bool:
        """Read the lines appended since the last poll; whether a new step arrived."""
        try:
            with self.metrics_path.open(encoding="utf-8") as file:
                file.seek(self._offset)
                chunk = file.read()
                self._offset = file.tell()
        except FileNotFoundError:
            return False
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()  # a line still being written
        before = self.step
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if self.first_step_at is None:
                self.first_step_at, self.first_step = record.get("timestamp", time.time()), record["step"] - 1
            self.step = max(self.step, record["step"])
            self.metrics = record
            self.streak.add(record)
        return self.step > before

    def rate(self) -> float | None:
        """Steps per second since this run's first logged step (a resumed run counts from there)."""
        if self.first_step_at is None:
            return None
        elapsed = time.time() - self.first_step_at
        done = self.step - self.first_step
        return done / elapsed if elapsed > 0 and done > 1 else None

    def headline(self) -> str:
        """``reward 0.41 · loss 0.12``: the role's key metrics of its last step, and how long it
        has had nothing to learn (``trinity.monitor.learnable``) once that is worth saying."""
        shown = [(key, self.metrics[key]) for key in HEADLINE_KEYS if key in self.metrics][:2]
        parts = [f"{key.split('/')[-2 if key.endswith('/mean') else -1]} {value:.4g}" for key, value in shown]
        return "  ".join(part for part in [*parts, self.streak.note(self.total)] if part)

    def line(self) -> str:
        """A plain progress line: ``[explorer] step 40/200 (20%) 1.9 step/s ETA 1m24s reward 0.41``
        (``... reward 0  nothing learnable for 40 steps (all prompts truncated)``)."""
        parts = [f"[{self.role}] step {self.step}" + (f"/{self.total}" if self.total else "")]
        if self.total:
            parts.append(f"({100 * self.step // self.total}%)")
        rate = self.rate()
        if rate:
            parts.append(f"{rate:.2f} step/s")
            if self.total and self.step < self.total:
                parts.append(f"ETA {_duration((self.total - self.step) / rate)}")
        if self.metrics:
            parts.append(self.headline())
        return " ".join(part for part in parts if part)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


@dataclass
class Interval:
    """``monitor.console_interval``: every N steps (an int) or every N seconds (``"30s"``)."""

    steps: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, value: int | str) -> Interval:
        if isinstance(value, str):
            return cls(seconds=float(value.removesuffix("s")))
        return cls(steps=value)

    def due(self, progress: RoleProgress, last_step: int, last_time: float) -> bool:
        if progress.step <= last_step:
            return False
        if self.steps is not None:
            return progress.step // self.steps > last_step // self.steps
        return time.time() - last_time >= (self.seconds or 0)


class ProgressDisplay:
    """The driver's view of a stage's roles; ``update()`` each second, ``close()`` at the end."""

    def __init__(self, config: Config, roles: list[str], out: IO[str] | None = None) -> None:
        monitor_dir = Path(config.checkpoint_job_dir) / "monitor"
        self.planned_path = Path(config.checkpoint_job_dir) / PLANNED_STEPS_FILE
        self.progress = {role: RoleProgress(role, monitor_dir / f"{role}.jsonl") for role in roles}
        for progress in self.progress.values():  # a resumed run's earlier steps are history, not progress
            progress.poll()
            progress.first_step_at = None
        self.interval = Interval.parse(config.monitor.console_interval)
        self.out = out or sys.stdout
        self._printed = {role: (progress.step, time.time()) for role, progress in self.progress.items()}
        self._bars: dict[str, Any] = {}
        if self.out.isatty():
            from tqdm import tqdm

            self._bars = {
                role: tqdm(desc=role, total=None, initial=progress.step, position=index, file=self.out, leave=True)
                for index, (role, progress) in enumerate(self.progress.items())
            }

    def set_total(self, role: str, total: int | None) -> None:
        """The role's planned steps, once it knows them (None: it runs to the end of its data); kept
        in the job folder for who follows the run from there (the studio)."""
        self.progress[role].total = total
        write_json(self.planned_path, {name: progress.total for name, progress in self.progress.items()})
        if role in self._bars and total:
            self._bars[role].total = total
            self._bars[role].refresh()

    def update(self) -> None:
        for role, progress in self.progress.items():
            if not progress.poll():
                continue
            bar = self._bars.get(role)
            if bar is not None:
                bar.update(progress.step - bar.n)
                bar.set_postfix_str(progress.headline(), refresh=True)
            last_step, last_time = self._printed[role]
            if self.interval.due(progress, last_step, last_time):
                self._print(role)

    def _print(self, role: str) -> None:
        progress = self.progress[role]
        self._printed[role] = (progress.step, time.time())
        if self._bars:
            self._bars[role].write(progress.line(), file=self.out)
        else:
            print(progress.line(), file=self.out, flush=True)

    def close(self) -> None:
        """Read the last steps and print each role's final line (if it stepped since the last)."""
        for role, progress in self.progress.items():
            progress.poll()
            if progress.step > self._printed[role][0]:
                self._print(role)
        for bar in self._bars.values():
            bar.close()
