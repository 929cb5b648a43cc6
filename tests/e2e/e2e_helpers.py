"""Helpers of the end-to-end tests: an experiment config from the quickstart, the CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from omegaconf import OmegaConf

from helpers.cli import TRINITY
from helpers.quickstart import QUICKSTART, REPO, quickstart_config  # noqa: F401  (imported from here too)
from trinity.testing.crash_points import CRASH_AT, CRASH_SIGNAL

EXPLORE_ONLY = ("mode=explore", "synchronizer.sync_method=checkpoint")
"""Overrides for a run of the explorer alone (no trainer, so no weights to sync)."""


def write_experiment(tmp_path: Path, model: Path, data: Path, *changes: str, stages: bool = False) -> Path:
    """``tmp_path/experiment.yaml``: the quickstart pointed at ``model``/``data`` under
    ``tmp_path``, plus dotlist changes (``helpers.quickstart.quickstart_config``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "experiment.yaml"
    OmegaConf.save(quickstart_config(tmp_path, model, data, *changes, stages=stages), path)
    return path


def written_experiences(tmp_path: Path, count: int, **read) -> list:
    """``count`` experiences of the sql experience buffer a ``write_experiment`` run wrote, read
    back by a reader of its own (``read`` goes to ``read``: a ``timeout``)."""
    from trinity.buffer import open_experience_reader
    from trinity.config.schema import ExperienceBufferConfig

    job = tmp_path / "ckpt" / "quickstart" / "arithmetic"
    buffer = ExperienceBufferConfig(name="experience_buffer", path=str(job / "buffer" / "experience_buffer.db"))
    reader = open_experience_reader(buffer, "audit")
    try:
        return reader.read(count, **read)
    finally:
        reader.close()


def _trinity(config: Path, overrides: tuple[str, ...], env: dict[str, str] | None = None) -> dict:
    """What both ways of running ``trinity run`` on ``config`` share: command, env (this
    process's, plus ``env``), cwd."""
    return {
        "args": [*TRINITY, "run", "--config", str(config), *overrides],
        "env": {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        "cwd": config.parent,
    }


def frozen_at(point: str) -> dict[str, str]:
    """The environment under which a run's process stops itself (SIGSTOP) at crash point
    ``point`` (``trinity.testing.crash_points``: ``name[:n]``), for a test to act on it there."""
    return {CRASH_AT: point, CRASH_SIGNAL: "SIGSTOP"}


def trinity_run(config: Path, *overrides: str, timeout: float = 600, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(**_trinity(config, overrides), capture_output=True, text=True, timeout=timeout, **popen)


def trinity_start(config: Path, *overrides: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """``trinity run`` in the background, in a session of its own (a test may kill its processes),
    with ``env`` over this process's environment."""
    return subprocess.Popen(**_trinity(config, overrides, env), start_new_session=True, **popen)
