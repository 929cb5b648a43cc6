"""Writes explored steps to the experience buffer, with the explorer's position.

A step's experiences, its position (step, taskset state as of that step's read) and its
metrics commit in one buffer transaction (a copy goes to ``meta/<name>.json`` after), so a
restarted explorer continues exactly after the last step the buffer holds. Opening the
writer fences off an older process of the same name (it fails at its next write).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trinity.buffer import open_experience_writer
from trinity.common.experience import Experience
from trinity.common.files import read_json, write_json
from trinity.config.schema import Config
from trinity.job_dir import explorer_meta_path
from trinity.monitor.base import MonitorGroup
from trinity.monitor.metrics import timer
from trinity.testing.crash_points import crash_point


class StepWriter:
    """The explorer's writes to the buffer; ``step`` is the last step written."""

    def __init__(self, config: Config, role: str, monitor: MonitorGroup):
        self.config = config
        self.role = role
        self.monitor = monitor
        self.meta_path = explorer_meta_path(config, role)
        storage = config.buffer.trainer_input.experience_buffer
        self.buffer = open_experience_writer(storage, role, config.ray_namespace) if config.mode != "bench" else None
        self.step = 0

    def resume(self) -> dict[str, Any]:
        """Where the last run stopped: the position committed with the buffer's last rows of
        this explorer, else (a buffer that forgets, e.g. an in-memory queue) the meta file."""
        committed = (self.buffer.state() if self.buffer is not None else None) or read_json(self.meta_path) or {}
        self.step = committed.get("step", 0)
        self._relog_lost_line(committed)
        return committed

    def _relog_lost_line(self, committed: dict[str, Any]) -> None:
        """The metrics line of the last committed step when a crash came between its commit and
        its meta file (which follows the line): the rows survived, so does their line."""
        written = read_json(self.meta_path) or {}
        if committed.get("metrics") and committed["step"] > written.get("step", 0):
            self.monitor.log(committed["metrics"], committed["step"])
            with self.buffer.fenced():
                write_json(self.meta_path, committed, sync=self.config.buffer.durability == "safe")

    def write(
        self, step: int, experiences: list[Experience], positions: list[dict], metrics: dict[str, float], version: int
    ) -> None:
        """Step ``step``'s experiences, tagged with this explorer's name, the position after it
        (tasksets read up to that batch, weights of ``version``) and its metrics in one buffer
        transaction; then its metrics line, then the meta file, which says the line is out."""
        for exp in experiences:
            exp.eid = dataclasses.replace(exp.eid, explorer=self.role)
        position = {"step": step, "model_version": version, "tasksets": positions, "metrics": dict(metrics)}
        with timer(metrics, "write_experiences"):
            self.buffer.write(experiences, state=position)
        crash_point("explorer.after_append")
        self.step = step
        self.monitor.log(metrics, step)
        with self.buffer.fenced():
            write_json(self.meta_path, position, sync=self.config.buffer.durability == "safe")
        crash_point("explorer.after_meta")

    def landed(self, step: int) -> bool:
        """Whether the buffer holds step ``step`` (a write that raised may have landed after all)."""
        return (self.buffer.state() or {}).get("step", 0) >= step

    def finish(self) -> None:
        """No more steps: the trainer reads to the end of what this explorer wrote."""
        self.buffer.finish()
