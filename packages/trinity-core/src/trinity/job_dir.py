"""The on-disk layout of a job (``checkpoint_job_dir``): checkpoints, role metadata, stage markers.

The one place that knows these paths, so that explorer, trainer and launcher share files
without importing each other::

    <job dir>/global_step_<N>/            a trainer checkpoint (HF weights under actor/huggingface)
    <job dir>/global_step_<N>.tmp/        one being written: renamed into place when complete
    <job dir>/meta/<trainer name>.json    the trainer's position: its checkpoint and reader state
    <job dir>/meta/<explorer name>.json   an explorer's position (a copy: the buffer holds it)
    <job dir>/meta/stage_done.json        a finished stage and its final model
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from trinity.config.schema import Config
from trinity.testing.crash_points import crash_point

logger = logging.getLogger(__name__)

HF_WEIGHTS_SUBDIR = "actor/huggingface"
"""Where a checkpoint keeps the actor's weights in Hugging Face format (both engines)."""
_PREFIX = "global_step_"


def trainer_meta_path(config: Config) -> Path:
    return Path(config.checkpoint_job_dir) / "meta" / f"{config.trainer.name}.json"


def explorer_meta_path(config: Config, name: str) -> Path:
    return Path(config.checkpoint_job_dir) / "meta" / f"{name}.json"


def stage_done_path(config: Config) -> Path:
    return Path(config.checkpoint_job_dir) / "meta" / "stage_done.json"


def checkpoint_dir(config: Config, step: int) -> Path:
    return Path(config.checkpoint_job_dir) / f"{_PREFIX}{step}"


def write_checkpoint(
    target: Path, save: Callable[[Path], None], fence: Callable[[], AbstractContextManager[None]]
) -> None:
    """Checkpoint ``target`` all or nothing: ``save`` writes a temp dir beside it, and the
    rename runs inside ``fence()`` (it raises if this process is stale), so a crash or a
    stale process never leaves a half-written or foreign ``global_step_<N>``."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # a crash's leftover
    save(tmp)
    crash_point("trainer.after_save")
    with fence():
        shutil.rmtree(target, ignore_errors=True)  # the same step saved before a crash, never named by meta
        tmp.rename(target)
    crash_point("trainer.after_rename")


def has_hf_weights(checkpoint: Path) -> bool:
    """Whether a checkpoint holds the actor's HF weights (verl writes the config and tokenizer
    there either way; ``trainer.save_hf_checkpoint`` decides about the weights)."""
    return any((checkpoint / HF_WEIGHTS_SUBDIR).glob("*.safetensors"))


def _steps(config: Config) -> list[int]:
    """Steps of the complete checkpoints (temp dirs excluded), ascending."""
    names = (path.name.removeprefix(_PREFIX) for path in Path(config.checkpoint_job_dir).glob(f"{_PREFIX}*"))
    return sorted(int(step) for step in names if step.isdigit())


def saved_checkpoints(config: Config) -> list[tuple[int, Path]]:
    """``(step, HF weights dir)`` of every checkpoint of the experiment with HF weights, by step."""
    found = [(step, checkpoint_dir(config, step)) for step in _steps(config)]
    return [(step, path / HF_WEIGHTS_SUBDIR) for step, path in found if has_hf_weights(path)]


def prune_checkpoints(config: Config, keep: int) -> None:
    """Remove all but the ``keep`` newest checkpoints (``trainer.max_checkpoints_to_keep``; 0 keeps
    all). Runs after the metadata names the newest, so a resume never points at a removed one."""
    if keep <= 0:
        return
    for step in _steps(config)[:-keep]:
        shutil.rmtree(checkpoint_dir(config, step), ignore_errors=True)
        logger.info("removed checkpoint %s (trainer.max_checkpoints_to_keep %d)", checkpoint_dir(config, step), keep)
