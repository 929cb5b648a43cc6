"""``trinity convert CHECKPOINT OUT``: a checkpoint's actor as a Hugging Face model folder.

CHECKPOINT is a ``global_step_N`` folder, or a job folder (its latest checkpoint). The training
engine that wrote it exports it (``TrainingEngine.export_hf``): named by ``--engine``, else by the
``trainer.trainer_type`` recorded in the job folder's ``config.yaml``, else the default export,
which copies the checkpoint's HF weights. A LoRA checkpoint becomes the base model with the adapter
merged in (``W + B A alpha / r``; base from the adapter's ``base_model_name_or_path`` or
``--base-model``), or with ``--adapter`` the peft adapter folder alone (what peft and vLLM load).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from trinity.model.engines import ExportError, TrainingEngine
from trinity.model.lora import ADAPTER_CONFIG, adapter_base, is_adapter_folder, merge_adapter_folder
from trinity.model.torch_model import ACTOR_HF_SUBDIR
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


def convert(
    path: Path, out: Path, engine: str | None = None, adapter: bool = False, base_model: str | None = None
) -> tuple[Path, str]:
    """Export the actor of the checkpoint at ``path`` to ``out``; returns the checkpoint and how.
    A LoRA checkpoint's adapter is merged into its base model, or written alone with ``adapter``."""
    checkpoint = find_checkpoint(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: choose a new one")
    actor = checkpoint / ACTOR_HF_SUBDIR
    if is_adapter_folder(actor):
        return checkpoint, _export_adapter(actor, out, adapter, base_model)
    if adapter:
        raise ExportError(f"{checkpoint} holds the full model, not a LoRA adapter: convert it without --adapter")
    name = engine or recorded_engine(checkpoint)
    exporter = resolve(Kind.TRAINER_ENGINE, name, "--engine") if name else TrainingEngine
    out.mkdir(parents=True, exist_ok=True)
    exporter.export_hf(checkpoint, out)
    if not (out / "config.json").is_file() or not any(out.glob("*.safetensors")):
        raise ExportError(f"the export wrote no config.json and safetensors weights in {out}")
    return checkpoint, name or "the HF weights it holds"


def _export_adapter(actor: Path, out: Path, adapter_only: bool, base_model: str | None) -> str:
    if adapter_only:
        shutil.copytree(actor, out, dirs_exist_ok=True)
        if not (out / ADAPTER_CONFIG).is_file() or not any(out.glob("adapter_model.*")):
            raise ExportError(f"{actor} holds no adapter_model weights next to its {ADAPTER_CONFIG}")
        return "the LoRA adapter alone"
    base = base_model or adapter_base(actor)
    if not base:
        raise ExportError(f"{actor / ADAPTER_CONFIG} names no base model: name it with --base-model")
    try:
        merge_adapter_folder(actor, out, base)
    except OSError as exc:  # a base model moved away since the run (transformers says which file)
        raise ExportError(
            f"cannot load the LoRA adapter's base model {base!r}: name it with --base-model ({exc})"
        ) from None
    return f"merging the LoRA adapter into {base}"
