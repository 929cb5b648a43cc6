"""``trinity convert`` of verl FSDP checkpoints: sharded (merged by verl) and with HF weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.engine_helpers import make_config, one_grpo_step

pytest.importorskip("verl")

from transformers import AutoModelForCausalLM  # noqa: E402

from trinity.cli.convert import convert  # noqa: E402
from trinity_verl.engine import VerlTrainingEngine  # noqa: E402


def saved(tiny_model_dir: Path, directory: Path, ranks: int, hf_weights: bool) -> dict[str, torch.Tensor]:
    """A verl checkpoint after one update; returns the actor's weights."""
    engine = VerlTrainingEngine(make_config(tiny_model_dir, "grpo", "verl", cluster__gpu_per_node=ranks))
    one_grpo_step(engine)
    engine.save_checkpoint(str(directory), step=1, hf_weights=hf_weights)
    weights = engine.weights_for_sync()
    engine.ranks.shutdown()
    return weights


def assert_loads_as(out: Path, weights: dict[str, torch.Tensor], atol: float) -> None:
    model = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, weights[name].float(), rtol=0, atol=atol)


def test_sharded_checkpoint_of_two_ranks_is_merged(tiny_model_dir, tmp_path, ray_session):
    weights = saved(tiny_model_dir, tmp_path / "global_step_1", ranks=2, hf_weights=False)
    assert not list((tmp_path / "global_step_1" / "actor" / "huggingface").glob("*.safetensors"))
    convert(tmp_path / "global_step_1", tmp_path / "hf", engine="verl")
    assert_loads_as(tmp_path / "hf", weights, atol=1e-2)  # verl's merger writes bfloat16


def test_checkpoint_with_hf_weights_is_copied(tiny_model_dir, tmp_path):
    weights = saved(tiny_model_dir, tmp_path / "global_step_1", ranks=1, hf_weights=True)
    convert(tmp_path / "global_step_1", tmp_path / "hf", engine="verl")
    assert_loads_as(tmp_path / "hf", weights, atol=0)
