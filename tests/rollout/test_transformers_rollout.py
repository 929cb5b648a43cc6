"""The transformers rollout engine on the tiny model: lengths, logprobs, stops, seeds, truncation, weights."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.model.torch_model import model_dtype
from trinity.rollout.transformers_rollout import TransformersRolloutEngine
from trinity.testing.tiny_model import build_tiny_model

PROMPTS = ["The quick brown fox", "12+7=", "Question: What is the capital of France? Answer:"]
GREEDY = SamplingArgs(temperature=0.0, max_tokens=24)


def make_engine(path: Path, **model_fields) -> TransformersRolloutEngine:
    limits = {"max_prompt_tokens": 32, "max_response_tokens": 24, "max_model_len": 56, **model_fields}
    return TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(path), engine_type="transformers"),
        ModelConfig(model_path=str(path), **limits),
    )


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> TransformersRolloutEngine:
    return make_engine(tiny_model_dir)


def test_n_samples_with_requested_lengths(engine: TransformersRolloutEngine) -> None:
    results = engine.generate(PROMPTS, SamplingArgs(n=4, max_tokens=8, min_tokens=8))
    assert [len(r) for r in results] == [4, 4, 4]
    for prompt, completions in zip(PROMPTS, results, strict=True):
        for c in completions:
            assert c.prompt_token_ids == engine.tokenizer(prompt)["input_ids"]
            assert len(c.response_token_ids) == len(c.response_logprobs) == 8
            assert c.finish_reason == "length"
    default = engine.generate(PROMPTS[:1], SamplingArgs(n=2))[0]
    assert all(len(c.response_token_ids) <= 24 for c in default)


def test_logprobs_are_raw_model_logprobs(engine: TransformersRolloutEngine, tiny_model_dir: Path) -> None:
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    args = SamplingArgs(n=2, temperature=0.7, top_k=20, top_p=0.9, max_tokens=16)
    for completions in engine.generate(PROMPTS, args):
        for c in completions:
            ids = torch.tensor([c.prompt_token_ids + c.response_token_ids])
            with torch.no_grad():
                logits = reference(ids).logits[0, :-1].log_softmax(-1)
            expected = logits.gather(-1, ids[0, 1:, None])[:, 0][len(c.prompt_token_ids) - 1 :]
            torch.testing.assert_close(torch.tensor(c.response_logprobs), expected, atol=1e-4, rtol=0)
            full = engine.logprobs([c.prompt_token_ids + c.response_token_ids])[0]
            assert full[0] == 0.0
            torch.testing.assert_close(torch.tensor(full[len(c.prompt_token_ids) :]), expected, atol=1e-4, rtol=0)


def test_a_prompt_is_read_once_for_all_its_samples(engine: TransformersRolloutEngine) -> None:
    """The ``n`` samples of a prompt share one pass over it (its cache is repeated for them):
    the only forward over more than one position has a row per prompt, not per sample, and
    greedy samples of prompts of different lengths (left-padded) equal a single sample's."""
    widths: list[tuple[int, int]] = []

    def record(module, args, kwargs, output) -> None:
        widths.append(tuple(kwargs["input_ids"].shape))

    hook = engine.model.get_decoder().register_forward_hook(record, with_kwargs=True)
    try:
        shared = engine.generate(PROMPTS, replace(GREEDY, n=3, logprobs=True))
    finally:
        hook.remove()
    assert [rows for rows, positions in widths if positions > 1] == [len(PROMPTS)], widths
    alone = engine.generate(PROMPTS, replace(GREEDY, logprobs=True))
    for samples, (single,) in zip(shared, alone, strict=True):
        for sample in samples:
            assert sample.response_token_ids == single.response_token_ids
            torch.testing.assert_close(sample.response_logprobs, single.response_logprobs, atol=1e-5, rtol=0)


def test_checkpoint_generation_defaults_do_not_leak(tiny_model_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_model_dir, tmp_path, dirs_exist_ok=True)
    settings = json.loads((tmp_path / "generation_config.json").read_text())
    settings.update(top_k=1, min_p=0.99, do_sample=True)  # each would make every sample the greedy one
    (tmp_path / "generation_config.json").write_text(json.dumps(settings))
    (completions,) = make_engine(tmp_path).generate(PROMPTS[:1], SamplingArgs(n=4, max_tokens=8, seed=0))
    assert len({tuple(c.response_token_ids) for c in completions}) > 1


def test_greedy_is_deterministic_and_seeds_reproduce(engine: TransformersRolloutEngine, tiny_model_dir: Path) -> None:
    first = engine.generate(PROMPTS, SamplingArgs(n=3, temperature=0.0, max_tokens=12))
    # a temperature too small to divide by is greedy, as in vLLM (sampling at 1e-300 was NaN)
    second = engine.generate(PROMPTS, SamplingArgs(n=3, temperature=1e-300, max_tokens=12))
    for a, b in zip(first, second, strict=True):
        assert {tuple(c.response_token_ids) for c in a + b} == {tuple(a[0].response_token_ids)}

    def tokens(results):
        return [c.response_token_ids for completions in results for c in completions]

    seeded = SamplingArgs(n=3, max_tokens=12, seed=5)
    assert tokens(engine.generate(PROMPTS, seeded)) == tokens(engine.generate(PROMPTS, seeded))
    unseeded = SamplingArgs(n=3, max_tokens=12)
    assert tokens(engine.generate(PROMPTS, unseeded)) != tokens(engine.generate(PROMPTS, unseeded))
    state = torch.get_rng_state()
    twin_a, twin_b = make_engine(tiny_model_dir), make_engine(tiny_model_dir)
    assert tokens(twin_a.generate(PROMPTS, unseeded)) == tokens(twin_b.generate(PROMPTS, unseeded))
    assert torch.equal(torch.get_rng_state(), state)


def test_stop_strings_cut_text_and_tokens(engine: TransformersRolloutEngine) -> None:
    full = engine.generate(PROMPTS, GREEDY)
    stops = [c[0].text[5:7] for c in full]
    stopped = engine.generate(PROMPTS, SamplingArgs(temperature=0.0, max_tokens=24, stop=stops))
    for original, cut in zip(full, stopped, strict=True):
        original, cut = original[0], cut[0]
        at = min(i for i in (original.text.find(s) for s in stops) if i >= 0)
        assert cut.finish_reason == "stop"
        assert cut.text == original.text[:at]
        assert cut.response_token_ids == original.response_token_ids[: len(cut.response_token_ids)]
        stop_end = engine.tokenizer.decode(cut.response_token_ids)
        assert any(s in stop_end for s in stops)
        assert not any(s in engine.tokenizer.decode(cut.response_token_ids[:-1]) for s in stops)


def test_stop_strings_wait_for_min_tokens_and_match_the_response_only(engine: TransformersRolloutEngine) -> None:
    """As vLLM: no stop string ends a response before ``min_tokens``, and one that ends the prompt
    (the ``x`` of "fox", the ``=`` of "12+7=") does not end the response."""
    greedy = engine.generate(PROMPTS[1:2], GREEDY)[0][0]
    assert greedy.text.startswith("=====")  # the tiny model repeats the prompt's last character
    for min_tokens in (1, 5):
        (cut,) = engine.generate(PROMPTS[1:2], replace(GREEDY, stop=["="], min_tokens=min_tokens))[0]
        assert cut.finish_reason == "stop" and cut.response_token_ids == greedy.response_token_ids[:min_tokens]
        assert cut.text == engine.tokenizer.decode(cut.response_token_ids[:-1])
    seeded = SamplingArgs(n=3, temperature=1.0, max_tokens=12, min_tokens=0, seed=7)
    full = engine.generate(PROMPTS[:2], seeded)
    cut = engine.generate(PROMPTS[:2], replace(seeded, stop=["x", "="]))
    for whole, part in zip(sum(full, []), sum(cut, []), strict=True):
        at = min((i for i in (whole.text.find("x"), whole.text.find("=")) if i >= 0), default=len(whole.text))
        assert part.text == whole.text[:at]
        assert part.response_token_ids == whole.response_token_ids[: len(part.response_token_ids)]


def test_eos_ends_a_response_but_not_before_min_tokens(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    greedy = engine.generate(PROMPTS[:1], GREEDY)[0][0].response_token_ids
    engine.eos_ids = [greedy[0]]  # pretend the greedy first token is the EOS
    early = engine.generate(PROMPTS[:1], SamplingArgs(temperature=0.0, max_tokens=24, min_tokens=0))[0][0]
    assert early.response_token_ids == greedy[:1]
    assert early.finish_reason == "stop"
    late = engine.generate(PROMPTS[:1], SamplingArgs(temperature=0.0, max_tokens=24, min_tokens=5))[0][0]
    assert len(late.response_token_ids) >= 5


def test_ignore_eos_generates_up_to_the_limit(tiny_model_dir: Path) -> None:
    engine = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir), engine_type="transformers", ignore_eos=True),
        ModelConfig(model_path=str(tiny_model_dir), max_prompt_tokens=32, max_response_tokens=24, max_model_len=56),
    )
    greedy = engine.generate(PROMPTS[:1], GREEDY)[0][0].response_token_ids
    engine.eos_ids = [greedy[0]]  # as above: the greedy first token would end the response
    (result,) = engine.generate(PROMPTS[:1], SamplingArgs(temperature=0.0, max_tokens=24, min_tokens=0))[0]
    assert result.response_token_ids == greedy and len(greedy) == 24
    assert result.finish_reason == "length"


def test_prompt_truncation(tiny_model_dir: Path) -> None:
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 8
    engine = make_engine(tiny_model_dir, max_prompt_tokens=16)
    short, long = engine.generate([PROMPTS[0], long_prompt], SamplingArgs(n=2, max_tokens=4, min_tokens=4))
    assert all(len(c.response_token_ids) == 4 and not c.prompt_truncated for c in short)
    assert len(long) == 2
    for c in long:
        assert c.prompt_truncated and c.response_token_ids == [] and c.finish_reason == "length"
        assert c.prompt_token_ids == engine.tokenizer(long_prompt)["input_ids"][:16]
        assert c.truncated_from == len(engine.tokenizer(long_prompt)["input_ids"])  # the length it had
    strict = make_engine(tiny_model_dir, max_prompt_tokens=16, enable_prompt_truncation=False)
    with pytest.raises(ValueError, match="exceeds max_prompt_tokens 16"):
        strict.generate([long_prompt], GREEDY)


def test_chat_template_and_thinking(tiny_model_dir: Path) -> None:
    messages = [{"role": "user", "content": "What is 12+7?"}]
    text = "<|im_start|>user\nWhat is 12+7?<|im_end|>\n<|im_start|>assistant\n"
    engine = make_engine(tiny_model_dir)  # enable_thinking unset: the template's default
    assert engine.chat_tokenizer.prompt_ids(messages) == engine.tokenizer(text)["input_ids"]
    no_thinking = make_engine(tiny_model_dir, enable_thinking=False)
    assert (
        no_thinking.tokenizer.decode(no_thinking.chat_tokenizer.prompt_ids(messages))
        == text + "<think>\n\n</think>\n\n"
    )
    custom = make_engine(tiny_model_dir, custom_chat_template="{{ messages[0]['content'] }} =")
    assert custom.tokenizer.decode(custom.chat_tokenizer.prompt_ids(messages)) == "What is 12+7? ="
    (completions,) = custom.chat([messages], SamplingArgs(n=2, max_tokens=4, min_tokens=4))
    assert [c.prompt_token_ids for c in completions] == [custom.chat_tokenizer.prompt_ids(messages)] * 2


def test_update_weights_from_state_dict_and_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    engine = make_engine(tiny_model_dir)
    before = engine.generate(PROMPTS, GREEDY)
    noisy = {k: v + 0.05 * torch.randn_like(v) for k, v in engine.model.state_dict().items() if "mlp" in k}
    engine.update_weights(state_dict=noisy, version=3)
    after = engine.generate(PROMPTS, GREEDY)
    assert engine.model_version == 3 and all(c[0].model_version == 3 for c in after)
    assert [c[0].response_logprobs for c in after] != [c[0].response_logprobs for c in before]
    other_dir = build_tiny_model(tmp_path / "other", seed=1)
    engine.update_weights(checkpoint_path=str(other_dir), version=4)
    fresh = make_engine(other_dir)
    assert engine.logprobs([[1, 2, 3, 4, 5]]) == fresh.logprobs([[1, 2, 3, 4, 5]])
    with pytest.raises(KeyError, match="not in the model"):
        engine.update_weights(state_dict={"no.such.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="exactly one"):
        engine.update_weights()


def test_the_weights_dtype_is_float32_on_a_cpu_and_the_dtype_key_on_a_gpu():
    """``auto`` is the checkpoint's own dtype, as ``from_pretrained`` reads it (it was looked up
    as ``torch.auto`` and failed on a GPU)."""
    assert model_dtype(torch.device("cpu"), "bfloat16") is torch.float32
    assert model_dtype(torch.device("cuda"), "bfloat16") is torch.bfloat16
    assert model_dtype(torch.device("cuda"), "auto") == "auto"


def test_rope_overrides_reach_the_rollout_and_the_training_engine_alike(tiny_model_dir: Path) -> None:
    """Trinity-RFT's model.rope_theta / rope_scaling over the checkpoint's RoPE, in both engines (through
    the one load_model): the logprobs move, and the trainer's match the rollout engine's."""
    from helpers.engine_helpers import make_config
    from trinity.training.torch_trainer import TorchTrainingEngine

    ids = [list(range(3, 60, 4))]
    rope = {"rope_theta": 100.0, "rope_scaling": {"type": "linear", "factor": 4.0}}
    default, moved = make_engine(tiny_model_dir).logprobs(ids)[0], make_engine(tiny_model_dir, **rope).logprobs(ids)[0]
    assert max(abs(a - b) for a, b in zip(default, moved, strict=True)) > 1e-3
    trainer = TorchTrainingEngine(
        make_config(tiny_model_dir, model__rope_theta=100.0, model__rope_scaling=rope["rope_scaling"])
    )
    params = trainer.actor.config.rope_parameters
    assert (params["rope_theta"], params["rope_type"], params["factor"]) == (100.0, "linear", 4.0)
    with torch.no_grad():
        logits = trainer.actor(torch.tensor(ids)).logits[0, :-1].log_softmax(-1)
    expected = logits.gather(-1, torch.tensor(ids[0][1:])[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(moved[1:]), expected, atol=1e-4, rtol=0)
