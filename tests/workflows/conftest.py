"""A real tiny model behind a ModelWrapper (built once), and ``trinity`` run in subprocesses."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from helpers.cli import trinity
from helpers.engine_helpers import transformers_client
from trinity.common.experience import Task
from trinity.config.schema import Config, InferenceModelConfig, ModelConfig
from trinity.explorer.runner import TaskRunner
from trinity.explorer.workflow import Workflow
from trinity.model.engines import SamplingArgs
from trinity.plugins import Kind, resolve
from trinity.rollout.client import EngineClient
from trinity.rollout.model_wrapper import ModelWrapper


@pytest.fixture(scope="session")
def client(tiny_model_dir: Path):
    path = str(tiny_model_dir)
    inference = InferenceModelConfig(model_path=path, engine_type="transformers", seed=0)
    with transformers_client(inference, ModelConfig(model_path=path)) as client:
        yield client


@pytest.fixture
def model(client: EngineClient) -> ModelWrapper:
    return ModelWrapper(client, SamplingArgs(n=1, max_tokens=16, temperature=1.0))


@pytest.fixture
def run_tasks(client: EngineClient, tiny_model_dir: Path):
    """``run_tasks(tasks, auxiliary=[], **explorer)``: the explorer's ``TaskRunner`` on the tiny
    model (``auxiliary``: one client per auxiliary model), one batch; its ``BatchOutcome``."""
    runners = []

    def run(tasks: list[Task], auxiliary: list[EngineClient] = (), **explorer):
        model = {"model_path": str(tiny_model_dir), "engine_type": "transformers", "max_response_tokens": 8}
        aux = [{"engine_type": "external"} for _ in auxiliary]
        config = Config.model_validate(
            {
                "model": {"model_path": str(tiny_model_dir), "max_prompt_tokens": 256, "max_response_tokens": 8},
                "explorer": {"rollout_model": model, "auxiliary_models": aux, **explorer},
                "buffer": {"batch_size": len(tasks)},
            }
        )
        runner = TaskRunner(config, [client], [[a] for a in auxiliary])
        runners.append(runner)
        return runner.run(tasks, "1")

    yield run
    for runner in runners:
        runner.loop.close()


@pytest.fixture
def make_workflow(model: ModelWrapper):
    """``make_workflow(workflow_type, raw, **task_fields)``: the registered workflow on a task."""

    def make(workflow_type: str, raw: dict, auxiliary_models=(), **task_fields) -> Workflow:
        task = Task(workflow_type=workflow_type, raw=raw, taskset_name="t", index=3, **task_fields)
        model.defaults = replace(model.defaults, n=task.repeat_times)  # as the runner asks for a task's repeats
        return resolve(Kind.WORKFLOW, workflow_type)(task, model, auxiliary_models)

    return make


def _trinity(env: dict[str, str], *args: str) -> str:
    result = trinity(*args, env=env, inherit=False, timeout=300)
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


@pytest.fixture(scope="session")
def hosted_judge():
    """A stand-in for a hosted judge (an OpenAI-compatible chat server, reached through
    ``engine_type: external``): it grades ``Score: 7``, ranks RULER's candidates 1, 1/2, 1/3...
    and says ``Correctness: YES`` to a search answer that is the correct answer, else ``NO``."""
    import re
    import threading
    import time

    import uvicorn
    from fastapi import FastAPI

    from helpers.ports import free_port

    app, prompts = FastAPI(), []

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "judge", "object": "model", "created": 0, "owned_by": "test"}]}

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        prompt = body["messages"][-1]["content"]
        prompts.append(prompt)
        count = len(re.findall(r"^# Candidate solution \d+$", prompt, re.MULTILINE))
        verdict = f"[{', '.join(str(1 / (i + 1)) for i in range(count))}]" if count else "Fair.\nScore: 7"
        if match := re.search(r"^Response: (.*)\nCorrect answer: (.*)$", prompt, re.MULTILINE):
            verdict = f"Correctness: {'YES' if match[1].strip() == match[2].strip() else 'NO'}"
        message = {"role": "assistant", "content": verdict}
        choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
        return {"id": "j", "object": "chat.completion", "created": 0, "model": "judge", "choices": [choice]}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1", prompts
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def external_judge(hosted_judge, monkeypatch):
    from trinity.config.schema import ExternalModelConfig, InferenceModelConfig, ModelConfig
    from trinity.rollout.client import EngineClient
    from trinity.rollout.external import ExternalEngine

    url, prompts = hosted_judge
    monkeypatch.setenv("TRINITY_JUDGE_URL", url)
    config = InferenceModelConfig(engine_type="external")
    config.external_model_config = ExternalModelConfig(base_url_env="TRINITY_JUDGE_URL", model_name="judge")
    client = EngineClient(ExternalEngine(config, ModelConfig()))
    prompts.clear()
    yield ModelWrapper(client, SamplingArgs(n=1, max_tokens=64)), prompts
    client.close()
