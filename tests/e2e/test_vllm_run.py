"""The quickstart end to end with ``engine_type: vllm`` (vllm-cpu): explorer, trainer, weights in memory."""

from __future__ import annotations

import os

import pytest
from e2e_helpers import trinity_run, write_experiment
from test_run import assert_ok, metrics

pytest.importorskip("vllm")


@pytest.mark.slow
def test_quickstart_grpo_with_vllm_engine(tmp_path, tiny_model_dir, arithmetic_data, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "explorer.rollout_model.engine_type=vllm",
        "explorer.rollout_model.enforce_eager=true",
        "buffer.batch_size=4",
        "algorithm.repeat_times=4",
        "buffer.total_steps=3",
    )
    result = trinity_run(config)
    assert_ok(result)
    explorer = metrics(tmp_path, "explorer")
    assert [r["rollout/experience_count"] for r in explorer] == [16, 16, 16]
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2, 3]
    assert "weights of version 2 loaded" in result.stdout + result.stderr  # memory sync into vLLM
