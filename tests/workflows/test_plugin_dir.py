"""Unpackaged plugins: a directory of Python files named by TRINITY_PLUGIN_DIRS / --plugin-dir."""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest

from helpers.ray_cluster import ray_head
from trinity.plugins import Kind
from trinity.plugins.manager import PLUGIN_DIRS_ENV, build_registry

PLUGIN_FILE = """
from trinity.plugins import hookimpl

def {name}(response, truth=None, prompt=None):
    return {{"length": float(len(response))}}

@hookimpl
def trinity_register_reward_fns(register):
    register("{name}", "{module}:{name}")
"""


def write_plugin(directory: Path, module: str, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{module}.py").write_text(PLUGIN_FILE.format(module=module, name=name))


def test_every_file_of_every_directory_registers(tmp_path, monkeypatch):
    write_plugin(tmp_path / "a", "dir_plugin_one", "length_one")
    write_plugin(tmp_path / "b", "dir_plugin_two", "length_two")
    (tmp_path / "b" / "dir_plugin_broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    (tmp_path / "b" / "json.py").write_text("# shadows the standard library's json\n")
    monkeypatch.setenv(PLUGIN_DIRS_ENV, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    monkeypatch.setattr(sys, "path", list(sys.path))

    registry = build_registry()

    entry = registry.entry(Kind.REWARD_FN, "length_one")
    assert entry.distribution == f"local:{tmp_path / 'a'}"
    assert registry.resolve(Kind.REWARD_FN, "length_two")("abc") == {"length": 3.0}
    failures = {Path(f.plugin).name: f.error for f in registry.failures}
    assert "broken on purpose" in failures["dir_plugin_broken.py"]
    assert "module name 'json' is taken" in failures["json.py"]


def test_a_missing_directory_is_a_reported_failure(tmp_path, monkeypatch):
    monkeypatch.setenv(PLUGIN_DIRS_ENV, str(tmp_path / "nowhere"))
    failures = build_registry().failures
    assert [f.error for f in failures] == [f"{PLUGIN_DIRS_ENV} names a directory that does not exist"]


LOCAL_WORKFLOW = """
from trinity.explorer.workflow import Workflow, set_reward
from trinity.plugins import hookimpl


class EchoWorkflow(Workflow):
    async def run_async(self):
        messages = [{"role": "user", "content": self.task.raw["prompt"]}]
        experiences = await self.model.chat_async(messages, n=self.repeat_times)
        return [set_reward(e, self.score(e.info["response_text"], truth=None)) for e in experiences]


@hookimpl
def trinity_register_workflows(register):
    register("echo_local_workflow", "dir_plugin_run:EchoWorkflow")
"""


def test_cli_plugin_dir_option(tmp_path, trinity_cli):
    write_plugin(tmp_path, "dir_plugin_cli", "length_cli")
    env = {k: v for k, v in os.environ.items() if k != PLUGIN_DIRS_ENV}
    rows = {
        (r["kind"], r["name"]): r
        for r in json.loads(trinity_cli(env, "--plugin-dir", str(tmp_path), "plugins", "--json"))
    }
    assert rows[("reward_fn", "length_cli")]["distribution"] == f"local:{tmp_path}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cluster", ["started", "joined"])
def test_trinity_run_with_a_plugin_dir_reaches_the_explorer_process(tmp_path, explore, cluster):
    """``started``: the Ray that ``trinity run`` starts, whose workers inherit its environment;
    ``joined``: a ``ray start --head`` cluster, started without the plugin directory, whose
    workers inherit only what the run forwards."""
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "dir_plugin_reward", "length_run")
    (plugins / "dir_plugin_run.py").write_text(LOCAL_WORKFLOW)
    env = {k: v for k, v in os.environ.items() if k != PLUGIN_DIRS_ENV}
    with ray_head() if cluster == "joined" else nullcontext() as address:
        rows = explore(
            {**env, "RAY_ADDRESS": address} if address else env,
            [{"prompt": "apple"}, {"prompt": "pear"}],
            {},
            "echo_local_workflow",
            "length_run",
            "--plugin-dir",
            str(plugins),
        )
    assert len(rows) == 4
    for row in rows:
        assert row["metrics"] == {"length": float(len(row["info"]["response_text"]))}
