"""Unpackaged plugins: a directory of Python files named by TRINITY_PLUGIN_DIRS / --plugin-dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.timeout(120)
def test_cli_plugin_dir_option(tmp_path):
    write_plugin(tmp_path, "dir_plugin_cli", "length_cli")
    env = {k: v for k, v in os.environ.items() if k != PLUGIN_DIRS_ENV}
    out = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "--plugin-dir", str(tmp_path), "plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    rows = {(r["kind"], r["name"]): r for r in json.loads(out)}
    assert rows[("reward_fn", "length_cli")]["distribution"] == f"local:{tmp_path}"
