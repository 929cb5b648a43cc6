"""A real tiny model behind a ModelWrapper (built once), and ``trinity`` run in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from trinity.common.experience import Task
from trinity.common.tiny_model import build_tiny_model
from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.engine.base import SamplingArgs
from trinity.engine.client import EngineClient
from trinity.engine.transformers_rollout import TransformersRolloutEngine
from trinity.explorer.model_wrapper import ModelWrapper
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
    client = EngineClient(engine)
    yield client
    client.close()


@pytest.fixture
def model(client: EngineClient) -> ModelWrapper:
    return ModelWrapper(client, SamplingArgs(n=1, max_tokens=16, temperature=1.0))


@pytest.fixture
def make_workflow(model: ModelWrapper):
    """``make_workflow(workflow_type, raw, **task_fields)``: the registered workflow on a task."""

    def make(workflow_type: str, raw: dict, auxiliary_models=(), **task_fields) -> Workflow:
        task = Task(workflow_type=workflow_type, raw=raw, taskset_name="t", index=3, **task_fields)
        model.defaults = replace(model.defaults, n=task.repeat_times)  # as the runner asks for a task's repeats
        return resolve(Kind.WORKFLOW, workflow_type)(task, model, auxiliary_models)

    return make


def _trinity(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture
def trinity_cli():
    """``trinity_cli(env, *args)``: run ``trinity <args>`` in a subprocess; its stdout (asserting success)."""
    return _trinity


@pytest.fixture
def explore(tiny_model_dir: Path, tmp_path: Path):
    """``explore(env, rows, taskset, workflow, reward_fn, *cli_options)``: ``trinity run`` in
    explore mode (2 samples per row, tiny model) in a subprocess; the experience rows it wrote."""

    def run(
        env: dict[str, str], rows: list[dict], taskset: dict, workflow: str, reward_fn: str, *cli: str
    ) -> list[dict]:
        data = tmp_path / "tasks.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        config = {
            "project": "workflows",
            "name": "explore",
            "checkpoint_root_dir": str(tmp_path / "checkpoints"),
            "mode": "explore",
            "model": {"model_path": str(tiny_model_dir), "max_prompt_tokens": 64, "max_response_tokens": 8},
            "cluster": {"node_num": 1, "gpu_per_node": 0},
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "buffer": {
                "batch_size": 2,
                "total_epochs": 1,
                "explorer_input": {
                    "taskset": {"name": "tasks", "storage_type": "file", "path": str(data), **taskset},
                    "default_workflow_type": workflow,
                    "default_reward_fn_type": reward_fn,
                },
                "trainer_input": {
                    "experience_buffer": {"name": "out", "storage_type": "file", "path": str(tmp_path / "out")}
                },
            },
            "explorer": {"eval_on_startup": False, "rollout_model": {"engine_type": "transformers"}},
            "synchronizer": {"sync_method": "checkpoint"},
            "monitor": {"monitor_type": "console"},
        }
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        _trinity(env, *cli, "run", "--config", str(tmp_path / "config.yaml"))
        return [json.loads(line) for line in (tmp_path / "out" / "out.jsonl").read_text().splitlines()]

    return run
