"""MoE router replay (R3) on the tiny Qwen3-MoE model: the transformers engine records each token's
experts, they travel with the experience through the buffer's bytes, and the torch trainer's forward
routes as recorded.

The mismatch replay closes is made real here: the rollout engine holds the weights in bfloat16, as
a GPU engine does, and the trainer in float32. About 1% of (token, layer) routing choices then
flip, and the rows with a flip carry most of the train/rollout logprob gap. Where no choice
flipped, replay changes no logprob; where one did, it removes the flip's share. Replaying a
forward's own routing changes nothing on Qwen2-MoE, Qwen3-MoE and Mixtral. About 20 s.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from helpers.engine_helpers import make_config
from trinity.buffer.serialization import (
    deserialize_experience,
    experience_from_dict,
    experience_to_dict,
    serialize_experience,
)
from trinity.common.batch import Batch
from trinity.common.experience import Experience
from trinity.config.derive import derive_model
from trinity.config.load import IssueCollector
from trinity.config.schema import Config, InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.model.moe_routing import RoutingRecorder, replay_routing
from trinity.rollout.model_wrapper import _to_experience
from trinity.rollout.transformers_rollout import TransformersRolloutEngine
from trinity.training.torch_trainer import TorchTrainingEngine

PROMPTS = ["hello world", "the cat sat on the mat and", "one two three four", "a b c"]


def make_engine(path: Path, record: bool = True) -> TransformersRolloutEngine:
    return TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(path), engine_type="transformers", enable_return_routed_experts=record),
        ModelConfig(model_path=str(path), max_prompt_tokens=64, max_response_tokens=16),
    )


def rollouts(engine: TransformersRolloutEngine, n: int) -> list[Experience]:
    """Four prompts x ``n`` samples, through the buffer's bytes."""
    rows = engine.generate(PROMPTS, SamplingArgs(n=n, temperature=1.0, max_tokens=16, seed=1))
    return [deserialize_experience(serialize_experience(_to_experience(c, None))) for row in rows for c in row]


@pytest.fixture(scope="module")
def engine(tiny_moe_model_dir: Path) -> TransformersRolloutEngine:
    return make_engine(tiny_moe_model_dir)


@pytest.fixture(scope="module")
def trainer(tiny_moe_model_dir: Path) -> TorchTrainingEngine:
    return TorchTrainingEngine(make_config(tiny_moe_model_dir, algorithm__enable_router_replay=True))


def native_routing(trainer: TorchTrainingEngine, batch: Batch) -> torch.Tensor:
    """The trainer's own routing of the batch, ``Batch.routed_experts``' layout."""
    recorder = RoutingRecorder(trainer.actor)
    try:
        with torch.no_grad():
            trainer.actor(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
            )
    finally:
        recorder.remove()
    (step,) = recorder.steps
    return step.view(step.shape[0], batch.batch_size, -1, step.shape[-1]).permute(1, 2, 0, 3)


def flipped(recorded: torch.Tensor, native: torch.Tensor) -> torch.Tensor:
    """``[B, columns]``: where a recorded token's experts differ from the trainer's in some layer."""
    same = (recorded.long().sort(-1).values == native.sort(-1).values).all(-1).all(-1)
    return ~same & (recorded[..., 0, 0] >= 0)


def gaps(trainer: TorchTrainingEngine, experiences: list[Experience], replay: bool) -> tuple[Batch, torch.Tensor]:
    """The batch and its ``|logprob(train) - logprob(rollout)|`` ``[B, R]`` on response tokens."""
    if not replay:
        experiences = [dataclasses.replace(e, routed_experts=None) for e in experiences]
    batch = Batch.from_experiences(experiences)
    return batch, (trainer.compute_logprobs(batch) - batch.old_logprobs).abs() * batch.response_mask


@pytest.mark.parametrize("n", [1, 3])  # 3: the prompt's routing comes from shared_prompt_cache's forward
def test_recorded_routing_is_the_trainers_in_the_same_dtype(engine, trainer, n) -> None:
    experiences = rollouts(engine, n)
    for exp in experiences:
        assert exp.routed_experts.dtype == torch.int16
        assert exp.routed_experts.shape == (exp.tokens.numel() - 1, 2, 2)  # positions, MoE layers, top_k
    again = experience_from_dict(experience_to_dict(experiences[0]))  # the file storage's JSON form
    assert torch.equal(again.routed_experts, experiences[0].routed_experts)
    batch, gap = gaps(trainer, experiences, replay=True)
    assert not flipped(batch.routed_experts, native_routing(trainer, batch)).any()
    assert gap.max() < 1e-5


def test_replay_halves_the_logprob_gap_of_a_bf16_rollout(tiny_moe_model_dir, trainer) -> None:
    engine = make_engine(tiny_moe_model_dir)
    engine.model.to(torch.bfloat16)  # as a GPU rollout engine holds its weights
    experiences = rollouts(engine, 4)
    batch, replayed = gaps(trainer, experiences, replay=True)
    _, native = gaps(trainer, experiences, replay=False)
    flips = flipped(batch.routed_experts, native_routing(trainer, batch))
    recorded = batch.routed_experts[..., 0, 0] >= 0
    assert 0.002 < flips[recorded].float().mean() < 0.2  # a few tokens' routing flips in bfloat16
    tokens = batch.response_mask.sum()
    assert native.sum() / tokens >= 2 * replayed.sum() / tokens
    # the cause: rows where no choice flipped get the same logprobs either way
    clean = ~flips.any(-1)
    assert clean.sum() >= 2 and (~clean).sum() >= 2
    assert torch.allclose(native[clean], replayed[clean], atol=1e-6)
    assert native[~clean].sum() > 2 * replayed[~clean].sum()


def test_a_dense_model_is_refused_by_name(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="algorithm.enable_router_replay: the model at .* has no top-k MoE router"):
        make_engine(tiny_model_dir)
    with pytest.raises(ValueError, match="algorithm.enable_router_replay: the model at .* has no top-k MoE router"):
        TorchTrainingEngine(make_config(tiny_model_dir, algorithm__enable_router_replay=True))


def test_without_router_replay_nothing_is_recorded(tiny_moe_model_dir: Path) -> None:
    (completion,) = make_engine(tiny_moe_model_dir, record=False).generate(["hi"], SamplingArgs(max_tokens=4))[0]
    assert completion.routed_experts is None


def test_only_the_rollout_model_records(tiny_moe_model_dir: Path) -> None:
    """A judge or teacher beside the rollout model may be dense: only the rollout model records."""
    config = Config()
    config.model.model_path = str(tiny_moe_model_dir)
    config.algorithm.enable_router_replay = True
    config.explorer.auxiliary_models = [InferenceModelConfig(model_path=str(tiny_moe_model_dir))]
    derive_model(config, IssueCollector())
    assert config.explorer.rollout_model.enable_return_routed_experts
    assert not config.explorer.auxiliary_models[0].enable_return_routed_experts


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe", "mixtral"])
def test_replaying_a_models_own_routing_changes_nothing(family: str) -> None:
    """The routers of each transformers MoE family are found, and replaying the routing a forward
    recorded gives that forward's logits (gate weights recomputed as the family computes them:
    Mixtral renormalises the top-k without a ``norm_topk_prob``); other experts change them."""
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    experts = {"num_local_experts" if family == "mixtral" else "num_experts": 4, "num_experts_per_tok": 2}
    config = AutoConfig.for_model(family, vocab_size=64, intermediate_size=64, **shape, **experts)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
        for name, param in model.named_parameters():
            if ".experts." in name:
                torch.nn.init.normal_(param, std=0.2)
        input_ids = torch.randint(0, 64, (2, 7))
    recorder = RoutingRecorder(model)
    with torch.no_grad():
        native = model(input_ids=input_ids).logits
    recorder.remove()
    (step,) = recorder.steps
    routed = step.view(2, 2, 7, 2).permute(1, 2, 0, 3)  # [rows, columns, layers, top_k]
    with torch.no_grad(), replay_routing(model, routed):
        assert torch.allclose(model(input_ids=input_ids).logits, native, atol=1e-6)
    with torch.no_grad(), replay_routing(model, (routed + 1) % 4):
        assert not torch.allclose(model(input_ids=input_ids).logits, native, atol=1e-3)
