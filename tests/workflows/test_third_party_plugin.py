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


def test_the_plugin_registers_through_its_entry_point(plugin_env, trinity_cli):
    rows = {(r["kind"], r["name"]): r for r in json.loads(trinity_cli(plugin_env, "plugins", "--json"))}
    assert rows[("workflow", "reverse_text_workflow")]["distribution"] == "trinity-plugin-example"
    assert rows[("reward_fn", "reverse_text_reward")]["target"] == "trinity_plugin_example.reward:reverse_text_reward"


@pytest.mark.timeout(300)
def test_trinity_run_explores_with_the_plugin_workflow_and_reward(plugin_env, explore):
    taskset = {
        "format": {"prompt_key": "word"},
        "workflow_args": {"instruction": "Reverse: {word}"},
        "reward_fn_args": {"exact_bonus": 2.0},
    }
    rows = explore(plugin_env, [{"word": w} for w in WORDS], taskset, "reverse_text_workflow", "reverse_text_reward")
    assert len(rows) == len(WORDS) * 2  # repeat_times samples of every word
    prompts = sorted({row["messages"][0]["content"] for row in rows})
    assert prompts == sorted(f"Reverse: {w}" for w in WORDS)  # workflow_args reached the workflow
    for row in rows:
        assert set(row["metrics"]) == {"similarity", "exact"}
        assert row["reward"] == pytest.approx(sum(row["metrics"].values()))
        assert 0.0 <= row["metrics"]["similarity"] <= 1.0
