"""The trainer's checkpoints: save, resume, and saves serialised per ``trainer.save_strategy``.

A save writes the checkpoint (temp dir, then renamed), then the metadata naming it with the
readers' positions, then commits the readers, both fenced by the reader's generation: a crash
anywhere resumes from the last metadata with no batch lost or trained twice, and a trainer
another process replaced fails instead of writing (``docs/buffer.md``, the resume contract).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from trinity.common.files import read_json, write_json
from trinity.config.schema import Config
from trinity.job_dir import (
    checkpoint_dir,
    has_hf_weights,
    prune_checkpoints,
    trainer_meta_path,
    write_checkpoint,
)
from trinity.model.engines import TrainingEngine
from trinity.testing.crash_points import crash_point
from trinity.trainer.reading import StepReader

logger = logging.getLogger(__name__)

_THREAD_SAVE_LOCK = threading.Lock()


@contextmanager
def save_guard(config: Config) -> Iterator[None]:
    """Serialise saves per ``trainer.save_strategy``.

    ``single_thread``: one save at a time in the whole system (thread lock and a file lock
    under checkpoint_root_dir); ``single_process`` and ``single_node``: the file lock
    only (on one node these coincide); ``unrestricted``: no lock.
    """
    strategy = config.trainer.save_strategy
    if strategy == "unrestricted":
        yield
        return
    lock_path = Path(config.checkpoint_root_dir).expanduser() / ".trinity_save.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    thread_lock = _THREAD_SAVE_LOCK if strategy == "single_thread" else threading.Lock()
    with thread_lock, FileLock(lock_path):
        yield


class Checkpoints:
    """Saves the trainer's engine and readers together, and resumes both from the last save."""

    def __init__(self, config: Config, role: str, engine: TrainingEngine, readers: StepReader):
        self.config, self.role, self.engine, self.readers = config, role, engine, readers
        self.saved_step = 0
        self.saved_hf = True  # whether the last checkpoint holds HF weights

    def resume(self) -> int | None:
        """The step of the last save, the engine and readers back there; None without one
        (``continue_from_checkpoint`` off, or a fresh job)."""
        meta = read_json(trainer_meta_path(self.config)) if self.config.continue_from_checkpoint else None
        if not meta:
            return None
        self.saved_step = self.engine.load_checkpoint(meta["checkpoint"])
        self.saved_hf = has_hf_weights(Path(meta["checkpoint"]))
        self.readers.load_state_dict(meta)
        logger.info("%s: resumed from %s (step %d)", self.role, meta["checkpoint"], self.saved_step)
        return self.saved_step

    def hf_weights(self, final: bool) -> bool:
        """Whether a checkpoint gets the actor's HF weights: ``trainer.save_hf_checkpoint``
        ``always``, or ``last`` for the run's final one (the next stage and bench mode read them)."""
        policy = self.config.trainer.save_hf_checkpoint
        return policy == "always" or (policy == "last" and final)

    def save_final(self, step: int) -> None:
        """At the end of a run: save unless the last save is of ``step`` and has what a final one needs."""
        if step != self.saved_step or (self.hf_weights(final=True) and not self.saved_hf):
            self.save(step, final=True)

    def save(self, step: int, final: bool = False) -> None:
        """Checkpoint, then the metadata naming it and the reader positions, then commit."""
        target = checkpoint_dir(self.config, step)
        hf_weights = self.hf_weights(final)
        fenced = self.readers.reader.fenced
        with save_guard(self.config):
            write_checkpoint(target, lambda tmp: self.engine.save_checkpoint(str(tmp), step, hf_weights), fenced)
        meta = {"step": step, "checkpoint": str(target), **self.readers.state_dict()}
        with fenced():
            write_json(trainer_meta_path(self.config), meta, sync=self.config.buffer.durability == "safe")
        crash_point("trainer.after_meta")
        self.readers.commit()
        crash_point("trainer.after_commit")
        self.saved_step, self.saved_hf = step, has_hf_weights(target)
        logger.info("%s: saved %s", self.role, target)
        prune_checkpoints(self.config, self.config.trainer.max_checkpoints_to_keep)
