"""Partial rollout on the transformers engine: a weight update pauses a sampling call between
decode steps, and its unfinished rows resume with the new weights (a few seconds)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.rollout.client import EngineClient
from trinity.rollout.transformers_rollout import TransformersRolloutEngine

PROMPTS = ["The quick brown fox", "Question: What is the capital of France? Answer:"]
TOKENS = 20
PAUSE_AT = 6
"""The decode forward pass during which the weight update arrives."""


def partial_engine(path: Path, **fields) -> TransformersRolloutEngine:
    engine = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(path), engine_type="transformers", ignore_eos=True, **fields),
        ModelConfig(model_path=str(path), max_prompt_tokens=32, max_response_tokens=TOKENS, max_model_len=64),
    )
    engine.partial_rollout = True
    return engine


def new_weights(engine: TransformersRolloutEngine) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        name: value + 0.05 * torch.randn(value.shape, generator=generator)
        for name, value in engine.model.state_dict().items()
    }


def sample_across_an_update(engine: TransformersRolloutEngine, args: SamplingArgs, weights: dict) -> list:
    """``args`` sampled through the explorer's client while version 1 of the weights arrives
    at the ``PAUSE_AT``-th forward pass (held there until the update waits: no race)."""
    client = EngineClient(engine)
    passes, reached = [0], threading.Event()

    def hold(module, inputs, output) -> None:
        passes[0] += 1
        if passes[0] == PAUSE_AT:
            reached.set()
            while not engine.gate.waiting:
                threading.Event().wait(0.001)

    hook = engine.model.register_forward_hook(hold)
    try:
        request = client.submit("generate", PROMPTS, args)
        assert reached.wait(60)
        client.call("update_weights", weights, None, 1).result(60)
        results = request.result(60)
    finally:
        hook.remove()
        client.close()
    assert engine.model_version == 1
    return [c for completions in results for c in completions]


@pytest.mark.parametrize("n", [1, 3])
def test_a_generation_interrupted_by_a_sync_finishes_with_tokens_of_both_versions(tiny_model_dir: Path, n: int):
    engine = partial_engine(tiny_model_dir)
    weights = new_weights(engine)
    completions = sample_across_an_update(engine, SamplingArgs(n=n, temperature=1.0, max_tokens=TOKENS), weights)
    assert len(completions) == len(PROMPTS) * n
    for c in completions:
        assert len(c.response_token_ids) == len(c.response_logprobs) == len(c.token_versions) == TOKENS
        assert c.finish_reason == "length"
        # in order: the tokens before the pause are version 0's, the rest version 1's
        first_new = c.token_versions.index(1)
        assert 0 < first_new < TOKENS
        assert c.token_versions == [0] * first_new + [1] * (TOKENS - first_new)
        assert c.model_version == 0  # the response's first token's weights
    assert len({c.token_versions.index(1) for c in completions}) == 1  # the rows paused together


def test_the_resumed_tokens_logprobs_are_the_new_weights(tiny_model_dir: Path) -> None:
    """Each token's logprob is that of the weights that sampled it on the whole sequence, as a
    direct forward pass computes it: the resumed part re-read prompt and prefix with the new weights."""
    engine = partial_engine(tiny_model_dir)
    old = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    weights = new_weights(engine)
    new = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    new.load_state_dict(weights)
    completions = sample_across_an_update(engine, SamplingArgs(n=2, temperature=1.0, max_tokens=TOKENS), weights)
    for c in completions:
        ids = torch.tensor([c.prompt_token_ids + c.response_token_ids])
        versions = torch.tensor(c.token_versions)
        for version, model in ((0, old), (1, new)):
            with torch.no_grad():
                logits = model(ids).logits[0, :-1].log_softmax(-1)
            expected = logits.gather(-1, ids[0, 1:, None])[:, 0][len(c.prompt_token_ids) - 1 :]
            mine = versions == version
            torch.testing.assert_close(torch.tensor(c.response_logprobs)[mine], expected[mine], atol=1e-4, rtol=0)
        # the other version's logprobs differ: the comparison above could tell them apart
        with torch.no_grad():
            stale = old(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        resumed = torch.tensor(c.response_logprobs)[versions == 1]
        assert (resumed - stale[len(c.prompt_token_ids) - 1 :][versions == 1]).abs().max() > 1e-2


def test_without_partial_rollout_an_update_waits_for_the_call(tiny_model_dir: Path) -> None:
    engine = partial_engine(tiny_model_dir)
    engine.partial_rollout = False
    client = EngineClient(engine)
    started = threading.Event()
    hook = engine.model.register_forward_hook(lambda *_: started.set())
    try:
        request = client.submit("generate", PROMPTS, SamplingArgs(max_tokens=TOKENS))
        assert started.wait(60)
        client.call("update_weights", new_weights(engine), None, 1).result(60)
        completions = [c for completions in request.result(60) for c in completions]
    finally:
        hook.remove()
        client.close()
    assert all(c.token_versions is None and c.model_version == 0 for c in completions)
