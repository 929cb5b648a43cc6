"""``engine_type: external``: rollouts from an OpenAI-compatible server given by URL (here the
tiny model behind trinity's own endpoint), no weights, a clear error when nothing answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.ports import free_port
from trinity.config.schema import ExternalModelConfig, InferenceModelConfig, ModelConfig
from trinity.model.engines import EngineStartError, SamplingArgs
from trinity.rollout.client import EngineClient
from trinity.rollout.external import ExternalEngine
from trinity.rollout.model_wrapper import ModelWrapper
from trinity.rollout.transformers_rollout import TransformersRolloutEngine


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path):
    config = InferenceModelConfig(model_path=str(tiny_model_dir), engine_type="transformers", name="tiny")
    client = EngineClient(
        TransformersRolloutEngine(config, ModelConfig(model_path=str(tiny_model_dir), max_model_len=64))
    )
    client.serve_openai(config)
    yield client.api_url
    client.close()


def external(env: str = "TRINITY_TEST_BASE_URL") -> InferenceModelConfig:
    config = InferenceModelConfig(engine_type="external", max_response_tokens=6)
    config.external_model_config = ExternalModelConfig(base_url_env=env, model_name="tiny")
    return config


def test_chat_through_an_external_server(server, monkeypatch):
    monkeypatch.setenv("TRINITY_TEST_BASE_URL", server)
    client = EngineClient(ExternalEngine(external(), ModelConfig()))
    try:
        model = ModelWrapper(client, SamplingArgs(n=2, temperature=1.0))
        experiences = model.chat([{"role": "user", "content": "1+1="}])
        assert len(experiences) == 2
        for exp in experiences:
            assert isinstance(exp.info["response_text"], str)
            assert exp.messages[-1] == {"role": "assistant", "content": exp.info["response_text"]}
            assert 1 <= exp.logprobs.numel() <= 6  # the server's logprobs, no token ids of its own
    finally:
        client.close()


def test_an_external_server_that_does_not_answer_fails_at_start(monkeypatch):
    monkeypatch.setenv("TRINITY_TEST_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(EngineStartError, match=r"no OpenAI-compatible server answers at http://127.0.0.1:\d+/v1"):
        ExternalEngine(external(), ModelConfig())
    monkeypatch.delenv("TRINITY_TEST_BASE_URL")
    with pytest.raises(EngineStartError, match=r"\$TRINITY_TEST_BASE_URL \(external_model.base_url_env\) is not set"):
        ExternalEngine(external(), ModelConfig())
