"""One Ray session and one vLLM engine on the tiny model, shared by the vLLM tests (start-up dominates)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is far larger


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, namespace="trinity-vllm-tests")
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def vllm_engine(ray_session, tiny_model_dir: Path):
    from trinity.config.schema import InferenceModelConfig, ModelConfig
    from trinity_vllm.engine import VLLMRolloutEngine

    limits = {"max_prompt_tokens": 32, "max_response_tokens": 24, "max_model_len": 56}
    engine = VLLMRolloutEngine(
        InferenceModelConfig(model_path=str(tiny_model_dir), enforce_eager=True, seed=1, enable_openai_api=True),
        ModelConfig(model_path=str(tiny_model_dir), **limits),
    )
    yield engine
    engine.shutdown()
