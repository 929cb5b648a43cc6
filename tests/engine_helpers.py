"""Helpers of the training-engine tests (tests/engine, tests/verl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.config.check import check_algorithm
from trinity.config.load import IssueCollector
from trinity.config.schema import Config


def make_config(model_dir: Path, algorithm: str = "grpo", engine: str = "torch", **fields: Any) -> Config:
    """A checked-algorithm config; ``fields`` are dotted paths, e.g. ``trainer__grad_clip``."""
    config = Config(mode="train")
    config.cluster.node_num, config.cluster.gpu_per_node = (
        1,
        0,
    )  # the trainer's process only; cluster__gpu_per_node=N asks for N ranks
    config.model.model_path = str(model_dir)
    config.algorithm.algorithm_type = algorithm
    config.algorithm.repeat_times = 4
    config.algorithm.optimizer.lr = 1e-3
    config.trainer.trainer_type = engine
    config.trainer.use_dynamic_bsz = False
    config.trainer.micro_batch_size_per_gpu = 4
    for path, value in fields.items():
        *parents, leaf = path.split("__")
        target = config
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)
    issues = IssueCollector()
    check_algorithm(config, issues)
    issues.raise_if_any()
    return config
