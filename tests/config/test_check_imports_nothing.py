"""Checking a config runs no code it names: ``trinity config check``, ``check_tree`` (the derive
step and the checker, which the studio's check runs too) and ``load_config`` find a dotted
``module.Class`` path's module without importing it or any of its parent packages.

The package ``markpkg`` appends its name to a marker file when any of its modules is imported;
every plugin field of the config names something in it. Only ``trinity run`` imports them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from config_helpers import write

from trinity.common.lazy_import import module_exists
from trinity.config import ConfigError, check_tree, load_config
from trinity.config.load import read_yaml

MOD = "markpkg.sub.mod"

DOTTED = {
    "workflow": [
        f"buffer.explorer_input.taskset.default_workflow_type={MOD}.Flow",
        "buffer.explorer_input.taskset.workflow_args={turns: 3}",
        f"buffer.explorer_input.taskset.default_reward_fn_type={MOD}.reward",
        "buffer.explorer_input.taskset.reward_fn_args={scale: 2}",
        f"buffer.explorer_input.eval_tasksets=[{{path: /data/e.jsonl, default_workflow_type: {MOD}.Flow,"
        " workflow_args: {turns: 1}}]",
    ],
    "algorithm_fns": [
        f"algorithm.{key}={MOD}.fn"
        for key in ("advantage_fn", "policy_loss_fn", "kl_loss_fn", "kl_penalty_fn", "entropy_loss_fn")
    ]
    + [f"algorithm.sample_strategy={MOD}.Strategy", "algorithm.advantage_fn_args={epsilon: 0.1}"],
    "algorithm_type": [f"algorithm.algorithm_type={MOD}.Algorithm"],
    "monitor": [f"monitor.monitor_type=[{MOD}.Monitor]", "monitor.monitor_args={project: x}"],
    "operators": [f"data_processor.experience_pipeline.operators=[{{name: {MOD}.Operator, args: {{a: 1}}}}]"],
    "engines": [
        f"trainer.trainer_type={MOD}.Engine",
        "trainer.grad_offload=true",
        f"explorer.rollout_model.engine_type={MOD}.Engine",
        f"synchronizer.sync_method={MOD}.Sync",
    ],
    "storage": [
        f"buffer.explorer_input.taskset.storage_type={MOD}.Storage",
        f"buffer.explorer_input.taskset.data_selector.selector_type={MOD}.Selector",
        "mode=train",
        "buffer.trainer_input.experience_buffer={storage_type: queue, replay_buffer: "
        f"{{enable: true, priority_fn: {MOD}.priority}}}}",
    ],
}
"""Each plugin field of the config, named by a dotted path (a group per config: the checks of one
field must not hide another's)."""


@pytest.fixture
def markpkg(tmp_path, monkeypatch):
    """``markpkg/__init__.py``, ``markpkg/sub/__init__.py`` and ``markpkg/sub/mod.py`` on ``sys.path``:
    importing any of them appends its name to the marker file (returned)."""
    root, marker = tmp_path / "pkgroot", tmp_path / "imported.txt"
    (root / "markpkg" / "sub").mkdir(parents=True)
    for module, file in (
        ("markpkg", "markpkg/__init__.py"),
        ("markpkg.sub", "markpkg/sub/__init__.py"),
        (MOD, "markpkg/sub/mod.py"),
    ):
        code = f"with open({str(marker)!r}, 'a') as f:\n    f.write({module!r} + '\\n')\n"
        (root / file).write_text(code + ("class Flow:\n    pass\n" if module == MOD else ""))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    yield marker
    for name in ("markpkg", "markpkg.sub", MOD):
        sys.modules.pop(name, None)


def imported(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def test_module_exists_finds_a_module_without_importing_its_packages(markpkg):
    assert module_exists(MOD) and module_exists("markpkg.sub") and module_exists("markpkg")
    assert not module_exists("markpkg.sub.nothing") and not module_exists("markpkg.nothing.mod")
    assert not module_exists("this.x"), "this is a module, not a package: it has no submodules"
    assert module_exists("json.decoder") and module_exists("os.path") and not module_exists("no_such_pkg.mod")
    assert imported(markpkg) == []
    assert "this" not in sys.modules or sys.modules["this"].__spec__  # found, never run here


@pytest.mark.parametrize("group", sorted(DOTTED))
def test_checking_imports_no_dotted_path_the_config_names(tmp_path, markpkg, group):
    path, overrides = write(tmp_path), DOTTED[group]
    config, issues = check_tree(read_yaml(path, overrides))  # derive + check, as the studio and the CLI
    assert imported(markpkg) == [], f"{group}: the check imported {imported(markpkg)}"
    assert not [i for i in issues.issues if "markpkg" in i.message and "unknown" in i.message], issues.issues
    try:
        load_config(path, overrides)
    except ConfigError:
        pass  # errors a dotted path causes elsewhere (an engine that is not one) are fine: no import
    assert imported(markpkg) == [], f"{group}: load_config imported {imported(markpkg)}"


def test_trinity_config_check_imports_nothing_the_config_names(tmp_path, markpkg):
    overrides = [o for group in ("workflow", "algorithm_fns", "monitor", "operators") for o in DOTTED[group]]
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "config", "check", str(write(tmp_path)), *overrides],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported(markpkg) == [], result.stderr
    assert result.returncode == 0, result.stderr
    assert f"default_workflow_type: {MOD}.Flow" in result.stdout
    assert "not imported by the check; trinity run imports and checks it" in result.stderr


def test_a_path_through_a_module_runs_nothing(tmp_path):
    """``this.x.Y`` (``this`` prints the Zen of Python when imported) is unknown, and nothing printed it."""
    overrides = ["buffer.explorer_input.taskset.default_workflow_type=this.x.Y"]
    result = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "config", "check", str(write(tmp_path)), *overrides],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "unknown workflow 'this.x.Y'" in result.stderr
    assert "Beautiful is better than ugly" not in result.stdout + result.stderr


def test_the_run_imports_what_the_check_did_not(tmp_path, markpkg):
    """What the check leaves to the run: the same config, loaded to run, imports the workflow."""
    load_config(write(tmp_path), DOTTED["workflow"][:2], run=True)
    assert imported(markpkg) == ["markpkg", "markpkg.sub", MOD]
