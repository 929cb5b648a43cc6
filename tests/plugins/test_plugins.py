"""The plugin core: discovery through entry points, tables, errors, operator controls."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from helpers.cli import trinity
from trinity.plugins import DuplicatePluginError, Kind, UnknownPluginError, hookimpl
from trinity.plugins.kinds import KNOWN_PROVIDERS
from trinity.plugins.manager import build_registry

SIBLINGS = ("trinity-core", "trinity-verl", "trinity-vllm", "trinity-monitors", "trinity-workflows")


def test_every_hook_registers_into_its_kind():
    """A local plugin implementing every hook lands one name in each kind's table."""
    plugin = types.ModuleType("every_hook")
    for kind in Kind:

        def impl(register, _kind=kind):
            register(f"test_{_kind.value}", "collections:OrderedDict")

        setattr(plugin, kind.hook_name, hookimpl(impl, specname=kind.hook_name))
    registry = build_registry(extra_plugins=[("every_hook", plugin)])
    for kind in Kind:
        entry = registry.entry(kind, f"test_{kind.value}")
        assert (entry.plugin, entry.distribution) == ("every_hook", "local")
    assert registry.resolve(Kind.WORKFLOW, "test_workflow").__name__ == "OrderedDict"


def test_plugins_json_lists_names_from_all_five_packages():
    result = trinity("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert set(rows[0]) == {"kind", "name", "target", "distribution"}
    assert set(SIBLINGS) <= {row["distribution"] for row in rows}
    pairs = {(row["kind"], row["name"]): row["distribution"] for row in rows}
    assert pairs[("trainer_engine", "verl")] == "trinity-verl"
    assert pairs[("rollout_engine", "vllm")] == "trinity-vllm"
    assert pairs[("monitor", "wandb")] == "trinity-monitors"
    assert pairs[("workflow", "math_workflow")] == "trinity-workflows"
    assert pairs[("advantage_fn", "grpo")] == "trinity-core"


def test_plugins_table_output():
    result = trinity("plugins")
    assert result.returncode == 0
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["kind", "name", "distribution", "target"]
    assert any(line.split()[:3] == ["monitor", "console", "trinity-core"] for line in lines)


def test_known_providers_match_what_siblings_register():
    """The core's install hints cannot drift from what the siblings really provide."""
    registry = build_registry()
    registered = {(e.kind, e.name): e.distribution for e in registry.all_entries()}
    for (kind, name), extra in KNOWN_PROVIDERS.items():
        assert registered.get((kind, name)) == f"trinity-{extra}", (kind, name)
    sibling_names = {key for key, dist in registered.items() if dist != "trinity-core"}
    assert sibling_names == set(KNOWN_PROVIDERS)


def test_discovery_imports_no_heavy_library():
    code = textwrap.dedent(
        """
        import sys
        from trinity.plugins.manager import build_registry
        registry = build_registry()
        assert registry.names(__import__("trinity.plugins", fromlist=["Kind"]).Kind.TRAINER_ENGINE)
        heavy = [m for m in ("torch", "transformers", "ray", "vllm", "verl", "mlflow", "wandb") if m in sys.modules]
        print(",".join(heavy))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_unknown_name_lists_installed_and_suggests():
    registry = build_registry()
    with pytest.raises(UnknownPluginError) as err:
        registry.resolve(Kind.ADVANTAGE_FN, "grpoo", config_key="algorithm.advantage_fn")
    exc = err.value
    assert (exc.kind, exc.name, exc.suggestion) == (Kind.ADVANTAGE_FN, "grpoo", "grpo")
    assert "ppo" in exc.installed and "rloo" in exc.installed
    assert "did you mean 'grpo'" in str(exc) and "rloo" in str(exc)


def test_name_of_a_missing_sibling_says_what_to_install(monkeypatch):
    monkeypatch.setenv("TRINITY_DISABLE_PLUGINS", "trinity-verl")
    registry = build_registry()
    with pytest.raises(UnknownPluginError) as err:
        registry.check(Kind.TRAINER_ENGINE, "verl", config_key="trainer_type")
    assert str(err.value).startswith(
        "trainer_type 'verl' is provided by trinity-verl, which is not installed: pip install \"trinity-core[verl]\""
    )
    assert err.value.extra == "verl"


def test_an_auxiliary_model_s_missing_engine_is_named_by_its_key_before_any_engine_starts(tmp_path, monkeypatch):
    """The explorer's process lacks trinity-vllm, which the launcher's config check saw: the
    explorer resolves every model's engine first, so it fails naming the auxiliary model
    before loading the rollout model (whose path does not even exist)."""
    import logging

    from trinity.config import load_config
    from trinity.explorer.explorer import Explorer
    from trinity.plugins import manager

    path = tmp_path / "config.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model: {{model_path: {tmp_path / "no_model"}, max_prompt_tokens: 16, max_response_tokens: 8}}
            cluster: {{node_num: 1, gpu_per_node: 0}}
            explorer:
              rollout_model: {{engine_type: transformers}}
              auxiliary_models: [{{model_path: {tmp_path / "no_judge"}, engine_type: transformers}}]
            trainer: {{trainer_type: torch}}
            buffer: {{batch_size: 2, explorer_input: {{taskset: {{path: {tmp_path}}}}}}}
            """
        )
    )
    config = load_config(path, ["mode=explore", "synchronizer.sync_method=checkpoint"])
    config.explorer.auxiliary_models[0].engine_type = "vllm"
    monkeypatch.setenv("TRINITY_DISABLE_PLUGINS", "trinity-vllm")
    monkeypatch.setattr(manager, "_registry", build_registry())
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))  # the explorer adds its own
    monkeypatch.setattr(root, "level", root.level)
    with pytest.raises(UnknownPluginError) as err:
        Explorer(config)
    assert err.value.config_key == "explorer.auxiliary_models[0].engine_type"
    assert str(err.value).startswith(
        "explorer.auxiliary_models[0].engine_type 'vllm' is provided by trinity-vllm, which is not installed"
    )


def test_allowlist_keeps_core_and_named_plugins_only(monkeypatch):
    monkeypatch.setenv("TRINITY_PLUGINS_ALLOWLIST", "trinity_monitors")
    distributions = {e.distribution for e in build_registry().all_entries()}
    assert distributions == {"trinity-core", "trinity-monitors"}


def test_duplicate_names_are_refused_naming_both_owners():
    plugin = types.ModuleType("dup")
    plugin.trinity_register_advantage_fns = hookimpl(
        lambda register: register("grpo", "x:y"), specname="trinity_register_advantage_fns"
    )
    with pytest.raises(DuplicatePluginError) as err:
        build_registry(extra_plugins=[("dup", plugin)])
    message = str(err.value)
    assert "advantage function 'grpo' is registered twice" in message
    assert "core_algorithm (trinity-core" in message and "dup (local)" in message


# --- a third-party plugin distribution, built and installed during the test ---------------------


def _write_distribution(root: Path, dist: str, module: str, body: str) -> Path:
    src = root / dist
    (src / module).mkdir(parents=True)
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "{dist}"
            version = "0.0.1"
            [project.entry-points.trinity]
            {module} = "{module}.plugin"
            """
        )
    )
    (src / module / "__init__.py").write_text("")
    (src / module / "plugin.py").write_text(textwrap.dedent(body))
    return src


def pip_install_to(target: Path, *sources: Path) -> Path:
    """Install distributions into ``target`` only (found through PYTHONPATH), not the test environment."""
    for src in sources:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                str(target),
                str(src),
            ],
            check=True,
            capture_output=True,
        )
    return target


@pytest.fixture(scope="module")
def third_party(tmp_path_factory) -> Path:
    """Three real distributions pip-installed into one target dir: a good one, a broken one, a duplicate."""
    root = tmp_path_factory.mktemp("third_party")
    good = _write_distribution(
        root,
        "trinity-echo-plugin",
        "echo_plugin",
        """
        from trinity.plugins import hookimpl

        class EchoWorkflow:
            pass

        @hookimpl
        def trinity_register_workflows(register):
            register("echo_workflow", EchoWorkflow)

        @hookimpl
        def trinity_register_reward_fns(register):
            register("echo_reward", "echo_plugin.plugin:EchoWorkflow")
        """,
    )
    broken = _write_distribution(
        root, "trinity-broken-plugin", "broken_plugin", "raise RuntimeError('boom at import')\n"
    )
    return pip_install_to(root / "site", good, broken)


def test_third_party_plugin_resolves_from_config(third_party, tmp_path):
    config = tmp_path / "echo.yaml"
    config.write_text(
        textwrap.dedent(
            """
            mode: explore
            model: {model_path: /models/tiny, max_model_len: 64}
            cluster: {gpu_per_node: 0}
            explorer: {rollout_model: {engine_type: transformers}}
            buffer:
              batch_size: 2
              explorer_input:
                taskset: {path: /data/tasks.jsonl, default_workflow_type: echo_workflow, default_reward_fn_type: echo_reward}
            """
        )
    )
    env = {"PYTHONPATH": str(third_party)}
    result = trinity("config", "check", str(config), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "default_workflow_type: echo_workflow" in result.stdout
    listing = json.loads(trinity("plugins", "--json", env=env).stdout)
    assert {
        "kind": "workflow",
        "name": "echo_workflow",
        "target": "echo_plugin.plugin:EchoWorkflow",
        "distribution": "trinity-echo-plugin",
    } in listing


def test_broken_plugin_is_reported_and_the_rest_keep_working(third_party):
    result = trinity("plugins", "--json", env={"PYTHONPATH": str(third_party)})
    assert result.returncode == 0
    assert "plugin broken_plugin (trinity-broken-plugin) failed to load: RuntimeError: boom at import" in result.stderr
    assert any(row["name"] == "echo_workflow" for row in json.loads(result.stdout))


def test_disable_env_blocks_a_third_party_plugin(third_party):
    env = {"PYTHONPATH": str(third_party), "TRINITY_DISABLE_PLUGINS": "trinity-echo-plugin, broken_plugin"}
    result = trinity("plugins", "--json", env=env)
    assert result.stderr == ""
    assert not any(row["name"] == "echo_workflow" for row in json.loads(result.stdout))


def test_third_party_duplicate_of_a_core_name_is_refused(tmp_path):
    dup = _write_distribution(
        tmp_path,
        "trinity-dup-plugin",
        "dup_plugin",
        """
        from trinity.plugins import hookimpl

        @hookimpl
        def trinity_register_advantage_fns(register):
            register("grpo", "dup_plugin.plugin:X")
        """,
    )
    target = pip_install_to(tmp_path / "site", dup)
    result = trinity("plugins", env={"PYTHONPATH": str(target)})
    assert result.returncode != 0
    assert "advantage function 'grpo' is registered twice" in result.stderr
    assert "trinity-core" in result.stderr and "trinity-dup-plugin" in result.stderr
