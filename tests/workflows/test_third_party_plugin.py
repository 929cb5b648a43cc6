"""examples/plugins/trinity-plugin-example, installed like a user would, run by ``trinity run``.

The distribution is pip-installed into a temporary target directory (no dependencies, no
build isolation: no network), which reaches subprocesses only through PYTHONPATH. Its
workflow and reward then run end to end: ``trinity run`` in explore mode on a tiny model,
with Ray, writing experiences to a file buffer that the test reads back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugins" / "trinity-plugin-example"
WORDS = ["apple", "river", "stone", "cloud"]


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has the example plugin installed."""
    tmp = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(EXAMPLE, tmp / "source")  # builds write into the source tree
    site = tmp / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def trinity(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_plugin_registers_through_its_entry_point(plugin_env):
    rows = {(r["kind"], r["name"]): r for r in json.loads(trinity(plugin_env, "plugins", "--json"))}
    assert rows[("workflow", "reverse_text_workflow")]["distribution"] == "trinity-plugin-example"
    assert rows[("reward_fn", "reverse_text_reward")]["target"] == "trinity_plugin_example.reward:reverse_text_reward"


@pytest.mark.timeout(300)
def test_trinity_run_explores_with_the_plugin_workflow_and_reward(plugin_env, tiny_model_dir, tmp_path):
    data = tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in WORDS))
    config = {
        "project": "plugin_example",
        "name": "reverse",
        "checkpoint_root_dir": str(tmp_path / "checkpoints"),
        "mode": "explore",
        "model": {"model_path": str(tiny_model_dir), "max_prompt_tokens": 64, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {
            "batch_size": 2,
            "total_epochs": 1,
            "explorer_input": {
                "taskset": {
                    "name": "words",
                    "storage_type": "file",
                    "path": str(data),
                    "format": {"prompt_key": "word"},
                    "workflow_args": {"instruction": "Reverse: {word}"},
                    "reward_fn_args": {"exact_bonus": 2.0},
                },
                "default_workflow_type": "reverse_text_workflow",
                "default_reward_fn_type": "reverse_text_reward",
            },
            "trainer_input": {
                "experience_buffer": {"name": "reversed", "storage_type": "file", "path": str(tmp_path / "out")}
            },
        },
        "explorer": {"eval_on_startup": False, "rollout_model": {"engine_type": "transformers"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "monitor": {"monitor_type": "console"},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    trinity(plugin_env, "run", "--config", str(tmp_path / "config.yaml"))

    rows = [json.loads(line) for line in (tmp_path / "out" / "reversed.jsonl").read_text().splitlines()]
    assert len(rows) == len(WORDS) * 2  # repeat_times samples of every word
    prompts = sorted({row["messages"][0]["content"] for row in rows})
    assert prompts == sorted(f"Reverse: {w}" for w in WORDS)  # workflow_args reached the workflow
    for row in rows:
        assert set(row["metrics"]) == {"similarity", "exact"}
        assert row["reward"] == pytest.approx(sum(row["metrics"].values()))
        assert 0.0 <= row["metrics"]["similarity"] <= 1.0
