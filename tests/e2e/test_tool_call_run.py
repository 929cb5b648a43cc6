"""Multi-turn tool calling end to end: ``trinity run`` (explorer + trainer, mode both) trains the
tiny model taught to call the calculator with ``tool_call_workflow``, and every experience it
trained on is masked to exactly the model's turns."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
import yaml
from e2e_helpers import trinity_run
from test_run import assert_ok, metrics
from transformers import AutoTokenizer

from helpers.tool_model import taskset_rows
from trinity.buffer.serialization import deserialize_experience

JOB = Path("ckpt") / "tools" / "calculator"


def tool_call_experiment(tmp_path: Path, model: Path, engine: str = "transformers", steps: int = 2) -> Path:
    """mode both, GRPO on the calculator question, four runs a step, weights after each step."""
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in taskset_rows()))
    config = {
        "project": "tools",
        "name": "calculator",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "mode": "both",
        "model": {"model_path": str(model), "max_prompt_tokens": 640, "max_response_tokens": 96, "temperature": 0.4},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
        "buffer": {
            "batch_size": 1,
            "total_epochs": steps,
            "explorer_input": {
                "taskset": {"name": "calculator", "storage_type": "file", "path": str(data)},
                "default_workflow_type": "tool_call_workflow",
                "default_reward_fn_type": "math_reward",
            },
            "trainer_input": {  # a queue kept in sqlite, read back by the test
                "experience_buffer": {
                    "name": "experiences",
                    "storage_type": "queue",
                    "path": str(tmp_path / "experiences.db"),
                }
            },
        },
        "explorer": {"eval_on_startup": False, "rollout_model": {"engine_type": engine}},
        "synchronizer": {"sync_interval": 1},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "console"},
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def trained_experiences(tmp_path: Path) -> list:
    with contextlib.closing(sqlite3.connect(tmp_path / "experiences.db")) as db:
        return [deserialize_experience(data) for (data,) in db.execute("SELECT data FROM experiences_exp")]


def check_tool_call_run(tmp_path: Path, model: Path, steps: int) -> None:
    """The run trained ``steps`` steps on conversations with tool turns, each experience masked to
    the assistant's text and end-of-turn tokens (tool results, user turns and the template's
    text between turns are context), with a logprob per response token."""
    trainer = metrics(tmp_path, "trainer", JOB)
    assert [r["step"] for r in trainer] == list(range(1, steps + 1))
    assert all("actor/pg_loss" in r for r in trainer)
    experiences = trained_experiences(tmp_path)
    assert len(experiences) == 4 * steps
    tokenizer = AutoTokenizer.from_pretrained(model)
    with_tools = 0
    for exp in experiences:
        roles = [m["role"] for m in exp.messages]
        assert roles[0] == "user" and roles[1] == "assistant", roles
        replies = [m["content"] for m in exp.messages if m["role"] == "assistant"]
        results = [m["content"] for m in exp.messages if m["role"] == "tool"]
        response, mask = exp.tokens[exp.prompt_length :], exp.action_mask.bool()
        assert exp.logprobs.shape == mask.shape == response.shape
        assert tokenizer.decode(response[mask]) == "".join(f"{reply}<|im_end|>" for reply in replies)
        context = tokenizer.decode(response[~mask])
        for result in results:
            assert f"<tool_response>\n{result}\n</tool_response>" in context
        assert "<tools>" in tokenizer.decode(exp.tokens[: exp.prompt_length])  # offered by the template
        with_tools += bool(results) and exp.metrics["tool_calls"] >= 1
    assert with_tools >= 2, "the taught model called the calculator in too few runs"


@pytest.mark.slow
def test_tool_call_workflow_trains_with_the_transformers_engine(tmp_path, tool_model_dir):
    assert_ok(trinity_run(tool_call_experiment(tmp_path, tool_model_dir)))
    check_tool_call_run(tmp_path, tool_model_dir, steps=2)
