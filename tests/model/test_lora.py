"""LoRA on the reference engines (peft): the torch trainer trains the adapter alone, syncs and
checkpoints only its tensors, and the transformers engine holding the base + adapter gives the
trainer's logprobs after a sync; the config derives Trinity-RFT's rollout keys and refuses what
cannot work, naming the key."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers.engine_helpers import make_config
from trinity.common.batch import Batch
from trinity.common.experience import EID, Experience
from trinity.config import derive_and_check
from trinity.config.check import check_lora
from trinity.config.derive import derive_lora
from trinity.config.load import IssueCollector
from trinity.config.schema import Config, InferenceModelConfig, LoRAConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.model.lora import adapter_state, fresh_adapter_state, with_adapter, write_adapter_folder
from trinity.plugins import Kind, resolve
from trinity.rollout.transformers_rollout import TransformersRolloutEngine
from trinity.training.torch_trainer import TorchTrainingEngine

RANK, ALPHA = 4, 8


def lora_config(model_dir: Path, algorithm: str = "grpo", **fields) -> Config:
    lora = LoRAConfig(name="lora", lora_rank=RANK, lora_alpha=ALPHA)
    config = make_config(model_dir, algorithm, model__lora_configs=[lora], **fields)
    config.explorer.rollout_model.enable_lora = True
    return config


def rollout_engine(model_dir: Path, config: Config) -> TransformersRolloutEngine:
    return TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(model_dir), enable_lora=True), config.model.model_copy()
    )


@pytest.fixture(scope="module")
def experiences(tiny_model_dir: Path) -> list[Experience]:
    rollout = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir)),
        ModelConfig(model_path=str(tiny_model_dir), max_prompt_tokens=32, max_response_tokens=12),
    )
    results = rollout.generate(["12+7=", "3+4="], SamplingArgs(n=4, max_tokens=12, min_tokens=12, seed=0))
    return [
        Experience(
            tokens=torch.tensor(c.prompt_token_ids + c.response_token_ids),
            prompt_length=len(c.prompt_token_ids),
            logprobs=torch.tensor(c.response_logprobs),
            reward=float(run % 2 == 0),
            eid=EID(batch="0", task=str(task), run=run),
        )
        for task, completions in enumerate(results)
        for run, c in enumerate(completions)
    ]


def with_advantages(engine: TorchTrainingEngine, experiences: list[Experience]) -> Batch:
    batch = engine.prepare_batch(Batch.from_experiences(experiences))
    algo = engine.config.algorithm
    return resolve(Kind.ADVANTAGE_FN, algo.advantage_fn)(**algo.advantage_fn_args)(batch)[0]


def test_only_the_adapter_trains_and_syncs(
    tiny_model_dir: Path, experiences: list[Experience], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="trinity.training.torch_trainer"):
        engine = TorchTrainingEngine(lora_config(tiny_model_dir))
    trainable = {n for n, p in engine.actor.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    in_optimizer = {id(p) for group in engine.actor_optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in engine.actor.parameters() if p.requires_grad}
    base = {n: p.detach().clone() for n, p in engine.actor.named_parameters() if not p.requires_grad}
    # all-linear on 2 layers: q, k, v, o, gate, up, down -> 7 modules x 2 layers x (A, B)
    sent = engine.weights_for_sync()
    assert len(sent) == 7 * 2 * 2 and all("lora_" in k for k in sent)
    adapter_bytes = sum(t.numel() * t.element_size() for t in sent.values())
    full_bytes = sum(p.numel() * p.element_size() for p in engine.actor.get_base_model().state_dict().values())
    assert adapter_bytes < full_bytes / 10
    assert f"{adapter_bytes / 2**20:.2f} MiB" in caplog.text  # the run's log reports the adapter's size

    before = {k: v.clone() for k, v in sent.items()}
    engine.train_step(with_advantages(engine, experiences))
    after = engine.weights_for_sync()
    assert any(not torch.equal(before[k], after[k]) for k in after if ".lora_B." in k)  # B moved off 0
    for name, param in engine.actor.named_parameters():
        if not param.requires_grad:
            assert torch.equal(param, base[name]), name


def test_rollout_logprobs_equal_the_trainers_after_sync(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    config = lora_config(tiny_model_dir)
    engine = TorchTrainingEngine(config)
    batch = with_advantages(engine, experiences)
    for _ in range(2):
        engine.train_step(batch)
    rollout = rollout_engine(tiny_model_dir, config)
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    n = int(batch.response_mask[0].sum())
    trainer = engine.compute_logprobs(batch)[0, :n]
    stale = torch.tensor(rollout.logprobs([ids])[0][-n:])
    assert not torch.allclose(stale, trainer, atol=1e-3)  # the rollout still has the fresh adapter
    rollout.update_weights(state_dict=engine.weights_for_sync(), version=2)
    synced = torch.tensor(rollout.logprobs([ids])[0][-n:])
    torch.testing.assert_close(synced, trainer, atol=1e-5, rtol=0)
    # and sampling's own logprobs (the hook on the inner model) are the adapter's too
    out = rollout.generate_from_ids([ids[:-n]], SamplingArgs(n=1, max_tokens=4, seed=0))[0][0]
    check = engine.compute_logprobs(
        Batch.from_experiences(
            [Experience(tokens=torch.tensor(out.prompt_token_ids + out.response_token_ids), prompt_length=len(ids) - n)]
        )
    )[0, : len(out.response_token_ids)]
    torch.testing.assert_close(torch.tensor(out.response_logprobs), check, atol=1e-5, rtol=0)
    with pytest.raises(KeyError, match="not in the LoRA adapter"):
        rollout.update_weights(state_dict={"model.embed_tokens.weight": torch.zeros(1)}, version=3)


def test_reference_is_the_base_without_a_copy(tiny_model_dir: Path, experiences: list[Experience]) -> None:
    config = lora_config(tiny_model_dir, algorithm__kl_loss_fn="k2")
    engine = TorchTrainingEngine(config)
    assert engine.reference is engine.actor  # no second model in memory
    batch = with_advantages(engine, experiences)
    engine.train_step(batch)
    engine.train_step(batch)
    base = TransformersRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir)), ModelConfig(model_path=str(tiny_model_dir))
    )
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    n = int(batch.response_mask[0].sum())
    ref = engine.compute_ref_logprobs(batch)[0, :n]
    torch.testing.assert_close(ref, torch.tensor(base.logprobs([ids])[0][-n:]), atol=1e-5, rtol=0)
    assert not torch.allclose(ref, engine.compute_logprobs(batch)[0, :n], atol=1e-4)


def test_checkpoint_holds_the_adapter_and_resumes(
    tiny_model_dir: Path, experiences: list[Experience], tmp_path: Path
) -> None:
    config = lora_config(tiny_model_dir)
    original = TorchTrainingEngine(config)
    batch = with_advantages(original, experiences)
    for _ in range(2):
        original.train_step(batch)
    original.save_checkpoint(str(tmp_path), step=2)
    saved = tmp_path / "actor" / "huggingface"
    assert (saved / "adapter_config.json").is_file() and not (saved / "model.safetensors").exists()
    assert load_file(str(saved / "adapter_model.safetensors")).keys() == original.weights_for_sync().keys()
    expected = original.train_step(batch)

    resumed = TorchTrainingEngine(config)
    assert resumed.load_checkpoint(str(tmp_path)) == 2
    got = resumed.train_step(batch)
    for key in expected:
        assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key
    for key, tensor in original.weights_for_sync().items():
        torch.testing.assert_close(resumed.weights_for_sync()[key], tensor, atol=1e-6, rtol=0)

    rollout = rollout_engine(tiny_model_dir, config)  # checkpoint sync / bench: the adapter from disk
    rollout.update_weights(checkpoint_path=str(tmp_path), version=2)
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    n = int(batch.response_mask[0].sum())
    two_steps = TorchTrainingEngine(config)
    two_steps.load_checkpoint(str(tmp_path))
    torch.testing.assert_close(
        torch.tensor(rollout.logprobs([ids])[0][-n:]), two_steps.compute_logprobs(batch)[0, :n], atol=1e-5, rtol=0
    )


def test_a_saved_adapter_is_the_starting_point(
    tiny_model_dir: Path, experiences: list[Experience], tmp_path: Path
) -> None:
    first = TorchTrainingEngine(lora_config(tiny_model_dir))
    batch = with_advantages(first, experiences)
    first.train_step(batch)
    first.save_checkpoint(str(tmp_path), step=1)
    lora = LoRAConfig(path=str(tmp_path / "actor" / "huggingface"), lora_rank=RANK, lora_alpha=ALPHA)
    config = make_config(tiny_model_dir, model__lora_configs=[lora])
    started = TorchTrainingEngine(config)
    for key, tensor in first.weights_for_sync().items():
        torch.testing.assert_close(started.weights_for_sync()[key], tensor, atol=0, rtol=0)
    assert any(p.requires_grad for p in started.actor.parameters())


def test_a_fresh_adapter_for_vllm_s_endpoint_is_the_base_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``fresh_adapter_state``, what vLLM's endpoint serves by the adapter's name before the first sync
    (``enable_runtime_lora_updating`` without a ``path``): peft's layout of the adapter, all zeros, shaped
    without reading the weights; written as a folder, peft loads it as the base model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lora = LoRAConfig(lora_rank=RANK, lora_alpha=ALPHA)
    fresh = fresh_adapter_state(str(tiny_model_dir), lora)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with torch.no_grad():
        expected = base(ids).logits
    layout = adapter_state(with_adapter(base, lora, trainable=False))
    assert {n: t.shape for n, t in fresh.items()} == {n: t.shape for n, t in layout.items()}
    assert all(not tensor.any() for tensor in fresh.values())
    write_adapter_folder(tmp_path / "fresh", fresh, lora, str(tiny_model_dir))
    served = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), tmp_path / "fresh"
    )
    with torch.no_grad():
        torch.testing.assert_close(served.eval()(ids).logits, expected, atol=0, rtol=0)


def checked(config: Config) -> IssueCollector:
    issues = IssueCollector()
    derive_lora(config, issues)
    check_lora(config, issues)
    return issues


def test_config_derives_the_rollout_keys_and_refuses_what_cannot_run(tmp_path: Path) -> None:
    config = Config(mode="both")
    config.trainer.trainer_type = "torch"
    config.explorer.rollout_model.engine_type = "transformers"
    config.model.lora_configs = [LoRAConfig(name="lora", lora_rank=16, lora_alpha=32)]
    assert not checked(config).issues
    rollout = config.explorer.rollout_model
    assert rollout.enable_lora and config.model.lora_configs[0].is_dummy
    assert rollout.lora_modules == [{"lora_int_id": 1, "lora_name": "lora", "lora_path": None, "base_model_name": None}]
    assert rollout.lora_kwargs == {"max_loras": 1, "max_lora_rank": 16}

    config.model.lora_configs = [LoRAConfig(lora_rank=0, path=str(tmp_path)), LoRAConfig()]
    config.explorer.rollout_model.engine_type = "external"
    errors = {e.path: e.message for e in checked(config).issues}
    assert "2 adapters: one is supported" in errors["model.lora_configs"]
    assert "trains no adapter" in errors["model.lora_configs[0].lora_rank"]
    assert "adapter_config.json" in errors["model.lora_configs[0].path"]
    assert (
        "'external' takes no LoRA adapter (model.lora_configs) yet, and the other"
        in errors["explorer.rollout_model.engine_type"]
    )


def test_verl_and_vllm_take_the_adapter_through_memory_or_checkpoint_sync() -> None:
    """Trinity-RFT's LoRA example pair (verl + vLLM) trains and samples the adapter; what vLLM
    cannot do with one is refused by key: an NCCL broadcast (full weights) and its own OpenAI
    server (it would answer with the base model, unless enable_runtime_lora_updating serves the
    adapter on it: tests/config/test_check_rules.py)."""
    config = Config(mode="both")
    config.model.lora_configs = [LoRAConfig()]
    config.explorer.rollout_model.engine_type = "vllm"
    issues = checked(config)
    assert not issues.issues and config.explorer.rollout_model.enable_lora
    assert not any("LoRA" in i.message for i in issues.inert)

    config = Config(mode="both")
    config.model.lora_configs = [LoRAConfig()]
    config.explorer.rollout_model.engine_type = "vllm"
    config.explorer.rollout_model.enable_openai_api = True
    config.synchronizer.sync_method = "nccl"
    issues = IssueCollector()
    derive_and_check(config, issues)  # with the plugins' checks: these two are trinity-vllm's
    errors = {e.path: e.message for e in issues.issues}
    assert "a LoRA adapter (model.lora_configs) reaches vLLM as a folder" in errors["synchronizer.sync_method"]
    assert "answer with the base model" in errors["explorer.rollout_model.enable_openai_api"]


def test_an_engine_pair_without_lora_trains_the_full_model_with_a_warning() -> None:
    """A run none of whose engines takes an adapter (here an explorer on an external endpoint)
    trains and samples the full model, as before LoRA took effect, and says so."""
    config = Config(mode="explore")
    config.model.lora_configs = [LoRAConfig()]
    config.explorer.rollout_model.engine_type = "external"
    issues = checked(config)
    assert not config.explorer.rollout_model.enable_lora
    assert any("'external' takes no LoRA adapter yet" in i.message for i in issues.inert)


def test_engines_without_an_adapter_never_import_peft(tiny_model_dir: Path) -> None:
    """peft takes 1.9 s to import on 2 cores: a run without LoRA paid it at its first rollout
    (the quickstart 7% slower side by side), through the check of whether the model is one."""
    code = (
        "import sys\n"
        "from trinity.config.schema import InferenceModelConfig, ModelConfig\n"
        "from trinity.model.engines import SamplingArgs\n"
        "from trinity.rollout.transformers_rollout import TransformersRolloutEngine\n"
        f"path = {str(tiny_model_dir)!r}\n"
        "engine = TransformersRolloutEngine(InferenceModelConfig(model_path=path), ModelConfig(model_path=path))\n"
        "engine.generate(['1 + 2 ='], SamplingArgs(max_tokens=4))\n"
        "print('peft' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_vllm_only_lora_keys_warn_by_name_on_other_engines() -> None:
    config = Config(mode="both")
    config.model.lora_configs = [LoRAConfig(lora_dtype="bfloat16")]
    config.model.fully_sharded_loras = True
    config.model.max_cpu_loras = 2
    config.explorer.rollout_model.engine_type = "transformers"
    inert = {i.path: i.message for i in checked(config).inert}
    assert set(inert) == {"model.fully_sharded_loras", "model.max_cpu_loras", "model.lora_configs[0].lora_dtype"}
    assert all("read by the vLLM engine only" in message for message in inert.values())
    config.explorer.rollout_model.engine_type = "vllm"
    assert not checked(config).inert
