"""One Ray session and one vLLM engine on the tiny model, shared by the vLLM tests (start-up dominates)
and released after this folder's last test (package scope): the engine holds about 3 GB that the
engine suites' later runs, beside the main suite in CI, need."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.fixtures import local_ray

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is far larger
API_KEY = "vllm-sesame"
"""The shared engine's endpoint requires it (``api_key``): trinity's own clients must send it."""


@pytest.fixture(scope="package", autouse=True)
def folder_ray():
    """One Ray for the whole folder: the shared engine's actor outlives each module's
    ``ray_session``, which finds this Ray running and leaves it up."""
    with local_ray("trinity-vllm-tests"):
        yield


@pytest.fixture(scope="package")
def shared_vllm_engine(tiny_model_dir: Path):
    """The shared engine, started on first use and again after a test killed it (the crash
    test does), so no test depends on running before another."""
    from trinity.config.schema import InferenceModelConfig, ModelConfig
    from trinity.model.engines import EngineCrashed
    from trinity_vllm.engine import VLLMRolloutEngine

    limits = {"max_prompt_tokens": 32, "max_response_tokens": 24, "max_model_len": 56}
    started: list[VLLMRolloutEngine] = []

    def alive() -> VLLMRolloutEngine:
        if started:
            try:
                started[-1].logprobs([])  # a round trip to its actor, no vLLM work
                return started[-1]
            except EngineCrashed:
                pass
        started.append(
            VLLMRolloutEngine(
                InferenceModelConfig(
                    model_path=str(tiny_model_dir), enforce_eager=True, seed=1, enable_openai_api=True, api_key=API_KEY
                ),
                ModelConfig(model_path=str(tiny_model_dir), **limits),
            )
        )
        return started[-1]

    yield alive
    for engine in started:
        engine.shutdown()


@pytest.fixture
def vllm_engine(shared_vllm_engine):
    return shared_vllm_engine()
