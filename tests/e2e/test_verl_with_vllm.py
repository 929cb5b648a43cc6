"""The pairing GPU users run: the verl training engine with the vLLM rollout engine, in one
environment (verl 0.9.1 with vllm-cpu 0.31 here), full weights in memory and a LoRA adapter by
checkpoint sync. Skipped unless both are installed."""

from __future__ import annotations

import os

import pytest
from e2e_helpers import trinity_run, write_experiment
from test_run import JOB, assert_ok, job_log, metrics

pytest.importorskip("verl")
pytest.importorskip("vllm")

from safetensors.torch import load_file  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, for the run's engine
VERL_WITH_VLLM = (
    "trainer.trainer_type=verl",
    "explorer.rollout_model.engine_type=vllm",
    "explorer.rollout_model.enforce_eager=true",
    "buffer.batch_size=4",
    "algorithm.repeat_times=4",
    "buffer.total_steps=3",
)
"""Three GRPO steps of 4 tasks x 4 runs, verl training, vLLM sampling."""


def test_grpo_with_verl_trainer_and_vllm_explorer(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VERL_WITH_VLLM,
    )
    result = trinity_run(config)
    assert_ok(result)
    assert [r["rollout/experience_count"] for r in metrics(tmp_path, "explorer")] == [16, 16, 16]
    trained = metrics(tmp_path, "trainer")
    assert [r["step"] for r in trained] == [1, 2, 3]
    assert all("actor/pg_loss" in r and "actor/grad_norm" in r for r in trained)
    # The verl engine's weights reached vLLM after every step.
    assert "weights of version 2 loaded" in job_log(tmp_path)
    assert (tmp_path / JOB / "global_step_3" / "actor" / "huggingface" / "config.json").is_file()


def test_a_lora_adapter_goes_from_verl_to_vllm_by_checkpoint_sync(tmp_path, tiny_model_dir, arithmetic_data):
    """verl trains the adapter alone; checkpoint sync writes its tensors to the job folder at
    every step and vLLM loads them as its LoRA adapter."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *VERL_WITH_VLLM,
        "model.lora_configs=[{name: lora, lora_rank: 8, lora_alpha: 16}]",
        "synchronizer.sync_method=checkpoint",
    )
    result = trinity_run(config)
    assert_ok(result)
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2, 3]
    assert "weights of version 2 loaded" in job_log(tmp_path)
    synced = load_file(tmp_path / JOB / "sync" / "version_3" / "model.safetensors")
    assert synced and all(".lora_" in name for name in synced)  # the adapter alone crossed over
