"""``trinity convert CHECKPOINT OUT``: a checkpoint's actor as a Hugging Face model folder.

CHECKPOINT is a ``global_step_N`` folder, or a job folder (its latest checkpoint). The training
engine that wrote it does the export (``TrainingEngine.export_hf``): named by ``--engine``, else
by the ``trainer.trainer_type`` the run recorded in the job folder's ``config.yaml``, else the
default export, which copies the HF weights a checkpoint holds.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from trinity.engine.base import ExportError, TrainingEngine
from trinity.plugins import Kind, resolve
from trinity.report import CONFIG_FILE, STEP_PREFIX, checkpoint_step


def find_checkpoint(path: Path) -> Path:
    """The ``global_step_N`` folder ``path`` names: itself, its ``actor``'s parent, or a job's latest."""
    path = path.resolve()
    if path.name == "actor" and path.parent.name.startswith(STEP_PREFIX):
        path = path.parent
    if (path / "actor").is_dir():
        return path
    steps = [p for p in path.glob(f"{STEP_PREFIX}*") if checkpoint_step(p) >= 0 and (p / "actor").is_dir()]
    steps.sort(key=checkpoint_step)
    if not steps:
        raise ExportError(
            f"{path}: not a checkpoint (no actor/ folder) nor a job folder with global_step_N checkpoints"
        )
    return steps[-1]


def recorded_engine(checkpoint: Path) -> str | None:
    """The ``trainer.trainer_type`` of the run that saved ``checkpoint``, where it recorded its config."""
    config = checkpoint.parent / CONFIG_FILE
    if not config.is_file():
        return None
    trainer = (yaml.safe_load(config.read_text()) or {}).get("trainer") or {}
    return trainer.get("trainer_type")


def convert(path: Path, out: Path, engine: str | None = None) -> tuple[Path, str]:
    """Export the actor of the checkpoint at ``path`` to ``out``; returns the checkpoint and how."""
    checkpoint = find_checkpoint(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: choose a new one")
    name = engine or recorded_engine(checkpoint)
    exporter = resolve(Kind.TRAINER_ENGINE, name, "--engine") if name else TrainingEngine
    out.mkdir(parents=True, exist_ok=True)
    exporter.export_hf(checkpoint, out)
    if not (out / "config.json").is_file() or not any(out.glob("*.safetensors")):
        raise ExportError(f"the export wrote no config.json and safetensors weights in {out}")
    return checkpoint, name or "the HF weights it holds"
