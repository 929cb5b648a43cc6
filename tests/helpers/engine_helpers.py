"""Engines for tests: an engine client over the transformers rollout engine, and configs and
trainers for the training-engine tests (tests/engine, tests/verl_engine)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trinity.config import load_config
from trinity.config.check import check_algorithm
from trinity.config.derive import derive_algorithm
from trinity.config.load import IssueCollector
from trinity.config.schema import Config, InferenceModelConfig, ModelConfig
from trinity.rollout.client import EngineClient
from trinity.rollout.transformers_rollout import TransformersRolloutEngine
from trinity.trainer.trainer import Trainer


@contextmanager
def transformers_client(inference: InferenceModelConfig, model: ModelConfig) -> Iterator[EngineClient]:
    """An ``EngineClient`` over the transformers rollout engine, closed on exit."""
    client = EngineClient(TransformersRolloutEngine(inference, model))
    try:
        yield client
    finally:
        client.close()


def one_grpo_step(engine: Any) -> None:
    """One GRPO update of a training engine on eight random rows (two groups of four, rewards
    1/0): its weights and optimizer state are no longer the starting model's."""
    import torch

    from trinity.common.batch import Batch
    from trinity.common.experience import EID, Experience
    from trinity.plugins import Kind, resolve

    gen = torch.Generator().manual_seed(0)
    rows = [
        Experience(
            tokens=torch.randint(3, 500, (12,), generator=gen),
            prompt_length=5,
            reward=float(i % 2),
            eid=EID(batch=0, task=i // 4, run=i % 4),
        )
        for i in range(8)
    ]
    batch = engine.prepare_batch(Batch.from_experiences(rows))
    engine.train_step(resolve(Kind.ADVANTAGE_FN, "grpo")()(batch)[0])


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
    derive_algorithm(config, issues)
    check_algorithm(config, issues)
    issues.raise_if_any()
    return config


def train_mode_trainer(tmp_path: Path, model_dir: Path, algorithm: str = "") -> Trainer:
    """A ``mode: train`` Trainer of GRPO on the torch engine (2 prompts x 2 runs a step, an sql
    experience buffer under ``tmp_path``), loaded as ``trinity run`` loads its config;
    ``algorithm``: more ``algorithm`` entries, flow style with a leading comma (``", kl_loss_fn: none"``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            mode: train
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model: {{model_path: {model_dir}, max_prompt_tokens: 8, max_response_tokens: 8}}
            cluster: {{node_num: 1, gpu_per_node: 0}}
            algorithm: {{algorithm_type: grpo, repeat_times: 2{algorithm}}}
            trainer: {{trainer_type: torch}}
            synchronizer: {{sync_method: checkpoint}}
            buffer:
              batch_size: 2
              train_batch_size: 4
              trainer_input:
                experience_buffer: {{name: exp, storage_type: sql, path: {tmp_path / "exp.db"}}}
            """
        )
    )
    return Trainer(load_config(path))
