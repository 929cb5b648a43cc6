"""A verl checkpoint is read without unpickling code (docs/security.md, "Stored data").

verl 0.9.1 reads its shards with ``torch.load(weights_only=False)``; trinity has it read them
``weights_only`` (``trinity_verl.checkpoint``). Each shard of a real checkpoint (model, optimizer,
extra state) is replaced in turn by its own content plus one pickled object whose unpickling would
create a marker file: resume and ``trinity convert`` refuse it, naming the file, and the marker
never appears. Skipped where verl is not installed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.engine_helpers import make_config, one_grpo_step

pytest.importorskip("verl")

from trinity.model.engines import CheckpointRefused  # noqa: E402
from trinity_verl.checkpoint import load_shard  # noqa: E402
from trinity_verl.engine import VerlTrainingEngine  # noqa: E402

SHARDS = ("model", "optim", "extra_state")
"""verl's files of one rank of one model: ``{slot}_world_size_1_rank_0.pt``."""


class _Payload:
    """What a tampered shard could hold: unpickling it would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def saved(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[VerlTrainingEngine, Path]:
    """A GRPO engine on one rank and its checkpoint after one update (optimizer state included),
    without HF weights (so ``trinity convert`` merges the shards)."""
    engine = VerlTrainingEngine(make_config(tiny_model_dir, "grpo", "verl"))
    one_grpo_step(engine)
    directory = tmp_path_factory.mktemp("verl_checkpoint") / "global_step_1"
    engine.save_checkpoint(str(directory), step=1, hf_weights=False)
    return engine, directory


def tampered(checkpoint: Path, slot: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of ``checkpoint`` whose actor ``slot`` shard holds its own content plus a payload;
    returns the copy, the shard and the payload's marker."""
    copy = tmp_path / "global_step_1"
    shutil.copytree(checkpoint, copy)
    shard = copy / "actor" / f"{slot}_world_size_1_rank_0.pt"
    marker = tmp_path / "ran"
    state = load_shard(shard)
    state["trinity_payload"] = _Payload(marker)
    torch.save(state, shard)
    return copy, shard, marker


@pytest.mark.parametrize("slot", SHARDS)
def test_resume_refuses_a_shard_holding_a_pickled_object_and_runs_nothing(saved, slot: str, tmp_path: Path):
    engine, checkpoint = saved
    copy, shard, marker = tampered(checkpoint, slot, tmp_path)
    with pytest.raises(CheckpointRefused, match=rf"{shard} holds objects other than tensors.*\(Unsupported global"):
        engine.load_checkpoint(str(copy))
    assert not marker.exists()


def test_convert_refuses_a_model_shard_holding_a_pickled_object_and_runs_nothing(saved, tmp_path: Path):
    """verl's model merger (``trinity convert`` of a checkpoint without HF weights) reads the
    shards as resume does."""
    copy, shard, marker = tampered(saved[1], "model", tmp_path)
    with pytest.raises(CheckpointRefused, match=rf"{shard} holds objects other than tensors"):
        VerlTrainingEngine.export_hf(copy, tmp_path / "hf")
    assert not marker.exists()


def test_the_untampered_checkpoint_resumes(saved):
    """The same shards as written: model and optimizer (DTensors), RNG states and LR scheduler
    load ``weights_only``."""
    engine, checkpoint = saved
    assert engine.load_checkpoint(str(checkpoint)) == 1
