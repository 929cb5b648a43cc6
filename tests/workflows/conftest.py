"""A real tiny model behind a ModelWrapper, shared by the workflow tests (built once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.common.experience import Task
from trinity.common.tiny_model import build_tiny_model
from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.engine.base import SamplingArgs
from trinity.engine.transformers_rollout import TransformersRolloutEngine
from trinity.explorer.model_wrapper import LocalEngineClient, ModelWrapper
from trinity.explorer.workflow import Workflow
from trinity.plugins import Kind, resolve


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def client(tiny_model_dir: Path):
    path = str(tiny_model_dir)
    engine = TransformersRolloutEngine(
        InferenceModelConfig(model_path=path, engine_type="transformers", seed=0), ModelConfig(model_path=path)
    )
    client = LocalEngineClient(engine)
    yield client
    client.close()


@pytest.fixture
def model(client: LocalEngineClient) -> ModelWrapper:
    return ModelWrapper(client, SamplingArgs(n=1, max_tokens=16, temperature=1.0))


@pytest.fixture
def make_workflow(model: ModelWrapper):
    """``make_workflow(workflow_type, raw, **task_fields)``: the registered workflow on a task."""

    def make(workflow_type: str, raw: dict, auxiliary_models=(), **task_fields) -> Workflow:
        task = Task(workflow_type=workflow_type, raw=raw, taskset_name="t", index=3, **task_fields)
        return resolve(Kind.WORKFLOW, workflow_type)(task, model, auxiliary_models)

    return make
