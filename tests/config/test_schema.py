"""The schema declared once: ranges and enums, values as users write them, older names, keys with
no effect yet, plugins' own arguments, and the documents generated from it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from config_helpers import issues_of, write

from helpers.cli import trinity
from trinity.cli.commands import inert_workflow_args
from trinity.config import load_config
from trinity.config.base import inert_message
from trinity.config.compat import NO_EFFECT_KEYS
from trinity.config.load import children
from trinity.config.reference import inert_keys
from trinity.config.schema import Config, MegatronParallelConfig, TinkerConfig

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "packages" / "trinity-core" / "src" / "trinity" / "config" / "schema"


BAD_VALUES = [
    ("algorithm.optimizer.lr=-1e-6", "algorithm.optimizer.lr", "must be > 0.0, got -1e-06"),
    ("model.temperature=-0.5", "model.temperature", "must be >= 0.0, got -0.5"),
    ("model.top_p=1.5", "model.top_p", "must be <= 1.0, got 1.5"),
    ("model.top_p=0", "model.top_p", "must be > 0.0, got 0"),
    ("buffer.total_epochs=0", "buffer.total_epochs", "must be >= 1, got 0"),
    ("synchronizer.sync_interval=0", "synchronizer.sync_interval", "must be >= 1, got 0"),
    ("explorer.eval_interval=0", "explorer.eval_interval", "must be >= 1, got 0"),
    ("explorer.max_timeout=0", "explorer.max_timeout", "must be > 0, got 0"),
    ("algorithm.optimizer.lr_warmup_steps_ratio=1.5", "algorithm.optimizer.lr_warmup_steps_ratio", "<= 1.0"),
    ("explorer.rollout_model.gpu_memory_utilization=1.2", "explorer.rollout_model.gpu_memory_utilization", "<= 1.0"),
    ("explorer.over_rollout.ratio=1.0", "explorer.over_rollout.ratio", "must be < 1.0, got 1.0"),
    ("algorithm.optimizer.betas=[0.9]", "algorithm.optimizer.betas", "expected 2 items, got 1"),
    (
        "buffer.explorer_input.taskset.rollout_args.top_p=2",
        "buffer.explorer_input.taskset.rollout_args.top_p",
        "<= 1.0",
    ),
    (
        "mode=serving",
        "mode",
        "'serving' is not one of both, train, explore, bench, serve, colocate; did you mean 'serve'?",
    ),
    ("synchronizer.sync_style=fixd", "synchronizer.sync_style", "did you mean 'fixed'?"),
    ("trainer.save_hf_checkpoint=sometimes", "trainer.save_hf_checkpoint", "is not one of last, always, never"),
    (
        "algorithm.optimizer.lr_scheduler_type=linear",
        "algorithm.optimizer.lr_scheduler_type",
        "one of constant, cosine",
    ),
    ("algorithm.loss_agg_mode=mean", "algorithm.loss_agg_mode", "is not one of token-mean"),
    ("log.level=LOUD", "log.level", "'LOUD' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    (
        "buffer.explorer_input.taskset.format.prompt_type=chat",
        "buffer.explorer_input.taskset.format.prompt_type",
        "'chat'",
    ),
    ("buffer.batch_size=abc", "buffer.batch_size", "expected int, got str 'abc'"),
    ("explorer.eval_on_startup=maybe", "explorer.eval_on_startup", "expected bool, got str 'maybe'"),
]


@pytest.mark.parametrize("override, key, message", BAD_VALUES, ids=[b[1] for b in BAD_VALUES])
def test_a_bad_value_names_the_key_the_value_and_what_is_allowed(tmp_path, override, key, message):
    found = issues_of(write(tmp_path), [override])
    assert message in found[key], found
    assert list(found) == [key], found  # one cause, one message


def test_every_bad_value_of_a_file_is_reported_at_once_and_the_checks_still_run(tmp_path):
    overrides = [b[0] for b in BAD_VALUES if not b[0].startswith("buffer.explorer_input.taskset.format")]
    found = issues_of(write(tmp_path), [*overrides, "algorithm.advantage_fn=grpoo"])
    assert {b[1] for b in BAD_VALUES if b[0] in overrides} <= set(found)
    assert "did you mean 'grpo'" in found["algorithm.advantage_fn"]  # a check after the schema errors


def test_sync_interval_zero_is_a_clear_cli_error_not_a_traceback(tmp_path):
    result = trinity("config", "check", str(write(tmp_path)), "synchronizer.sync_interval=0")
    assert result.returncode == 2
    assert "synchronizer.sync_interval: must be >= 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_environment_strings_are_coerced_to_the_declared_types(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCH", "32")
    monkeypatch.setenv("LR", "2e-5")
    monkeypatch.setenv("STARTUP", "false")
    overrides = [
        "buffer.batch_size=${oc.env:BATCH,8}",
        "algorithm.optimizer.lr=${oc.env:LR}",
        "model.top_k=${oc.env:NO_K,5}",
        "explorer.eval_on_startup=${oc.env:STARTUP}",
    ]
    cfg = load_config(write(tmp_path), overrides)
    assert cfg.buffer.batch_size == 32 and cfg.buffer.train_batch_size == 128
    assert cfg.algorithm.optimizer.lr == 2e-5
    assert cfg.explorer.eval_on_startup is False
    assert cfg.model.top_k == 5  # the default of the interpolation, as a string, made an int


def test_trinity_rft_names_of_older_releases_are_accepted(tmp_path, caplog):
    path = write(
        tmp_path,
        """
        synchronizer: {sync_style: dynamic_by_explorer, sync_method: offline}
        """,
    )
    cfg = load_config(
        path,
        [
            "mode=train",
            "buffer.train_batch_size=16",
            "explorer.runner_num=3",
            "algorithm.optimizer.warmup_style=cosine",
            "buffer.explorer_input.taskset.task_selector.selector_type=shuffle",
            "buffer.trainer_input.experience_buffer={name: exp, use_priority_queue: true, reuse_cooldown_time: 5}",
            "explorer.rollout_model.engine_args={swap_space: 4}",
            "trainer.ppo_max_token_len_per_gpu=8192",
        ],
    )
    assert cfg.synchronizer.sync_style == "explorer_driven"
    assert cfg.synchronizer.sync_method == "checkpoint"
    assert cfg.explorer.runner_per_model == 3
    assert cfg.algorithm.optimizer.lr_scheduler_type == "cosine"
    assert cfg.buffer.explorer_input.tasksets[0].data_selector.selector_type == "shuffle"
    replay = cfg.buffer.trainer_input.experience_buffer.replay_buffer
    assert replay.enable is True and replay.reuse_cooldown_time == 5
    assert cfg.explorer.rollout_model.extra_engine_args == {"swap_space": 4}
    assert cfg.trainer.max_token_len_per_gpu == 8192
    for old, new in [
        ("explorer.runner_num", "explorer.runner_per_model"),
        ("buffer.explorer_input.taskset.task_selector", "buffer.explorer_input.taskset.data_selector"),
        ("buffer.trainer_input.experience_buffer.use_priority_queue", "replay_buffer.enable"),
        ("trainer.ppo_max_token_len_per_gpu", "trainer.max_token_len_per_gpu"),
    ]:
        assert f"{old}: deprecated: use" in caplog.text and new in caplog.text
    assert "synchronizer.sync_style: 'dynamic_by_explorer' is deprecated: using 'explorer_driven'" in caplog.text
    assert "synchronizer.sync_method: 'offline' is deprecated: using 'checkpoint'" in caplog.text


def test_case_and_aliases_of_enums(tmp_path):
    cfg = load_config(write(tmp_path), ["synchronizer.sync_style=Trainer_Driven", "log.level=debug", "mode=BOTH"])
    assert (cfg.synchronizer.sync_style, cfg.log.level, cfg.mode) == ("trainer_driven", "DEBUG", "both")


def test_a_dotted_workflow_path_loads_that_class(tmp_path):
    from trinity.plugins import Kind, resolve

    name = "trinity_workflows.workflows.MathWorkflow"
    cfg = load_config(write(tmp_path), [f"buffer.explorer_input.taskset.default_workflow_type={name}"])
    assert cfg.buffer.explorer_input.tasksets[0].default_workflow_type == name
    assert resolve(Kind.WORKFLOW, name).__name__ == "MathWorkflow"
    found = issues_of(write(tmp_path), ["buffer.explorer_input.taskset.default_workflow_type=no_such_pkg.Flow"])
    assert "unknown workflow 'no_such_pkg.Flow'" in found["buffer.explorer_input.taskset.default_workflow_type"]


def test_a_key_with_no_effect_warns_by_name_with_its_reason_and_strict_refuses_it(tmp_path, caplog):
    path = write(tmp_path, "monitor: {monitor_type: console}\n")
    overrides = ["explorer.runner_prepare_concurrency=4"]
    load_config(path, [*overrides, "explorer.runner_prepare_max_retries=2"])  # the default: nothing to say
    key = "explorer.runner_prepare_concurrency"
    message = inert_message(inert_keys()[key].reason)
    assert message.startswith("has no effect in trinity: trinity's workflow runners are coroutines")
    assert f"{key}: {message}" in caplog.text and "runner_prepare_max_retries" not in caplog.text
    assert issues_of(path, overrides, strict=True) == {key: message}
    result = trinity("config", "check", "--strict", str(path), *overrides)
    assert result.returncode == 2 and f"{key}: has no effect in trinity" in result.stderr


def test_the_keys_trinity_rft_s_launcher_sets_per_engine_are_replaced_with_a_warning(tmp_path, caplog):
    keys = {"engine_id": 3, "node_rank": 1, "bundle_indices": "0,1", "ray_actor_name": "x", "cuda_visible_devices": "2"}
    cfg = load_config(write(tmp_path), [f"explorer.rollout_model.{k}={v}" for k, v in keys.items()])
    rollout = cfg.explorer.rollout_model
    assert [getattr(rollout, k) for k in keys] == [0, 0, "", None, None]
    for key in keys:
        assert f"explorer.rollout_model.{key}: is derived by trinity: the value in the file is replaced" in caplog.text


def test_a_derived_key_in_the_file_is_replaced_with_a_warning(tmp_path, caplog):
    cfg = load_config(write(tmp_path), ["cluster.total_gpu_num=64"])
    assert cfg.cluster.total_gpu_num == 0
    assert "cluster.total_gpu_num: is derived by trinity" in caplog.text


def test_token_budget_counts_sequence_parallelism(tmp_path, caplog):
    parallel = ["trainer.ulysses_sequence_parallel_size=4", "model.max_prompt_tokens=3000"]
    cfg = load_config(write(tmp_path), [*parallel, "trainer.trainer_type=verl"])
    assert cfg.model.max_model_len == 3032 and cfg.trainer.max_token_len_per_gpu == 1516  # ceil(2 x 3032 / 4)
    load_config(write(tmp_path), ["trainer.ulysses_sequence_parallel_size=4", "trainer.max_token_len_per_gpu=24"])
    assert "trainer.max_token_len_per_gpu" not in caplog.text  # 24 x 4 >= 96: a full sample fits
    load_config(write(tmp_path), ["trainer.max_token_len_per_gpu=64"])
    assert "trainer.max_token_len_per_gpu: 64 x ulysses_sequence_parallel_size 1 is below" in caplog.text


def test_the_torch_engine_budget_is_at_least_16384_tokens_unless_set(tmp_path):
    """Trinity-RFT's 2 x max_model_len cut the quickstart's batch into 64 micro-batches (5x slower steps)."""
    torch = ["trainer.trainer_type=torch"]
    assert load_config(write(tmp_path), torch).trainer.max_token_len_per_gpu == 16384
    long = load_config(write(tmp_path), [*torch, "model.max_prompt_tokens=10000"])
    assert long.trainer.max_token_len_per_gpu == 2 * long.model.max_model_len
    assert (
        load_config(write(tmp_path), [*torch, "trainer.max_token_len_per_gpu=76"]).trainer.max_token_len_per_gpu == 76
    )


PLUGIN = '''
from trinity.plugin_api import Field, PluginArgs, hookimpl
from trinity_workflows.workflows import MathWorkflow


class GradedWorkflow(MathWorkflow):
    """A workflow that declares its arguments."""

    class Args(PluginArgs):
        attempts: int = Field(1, ge=1, description="Tries per task.")
        style: str = Field("short", description="Answer style.")


@hookimpl
def trinity_register_workflows(register):
    register("graded_workflow", GradedWorkflow)
'''


def test_a_plugin_declares_its_args_and_config_check_validates_them(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "graded.py").write_text(PLUGIN)
    taskset = "buffer.explorer_input.taskset"

    def check(args: str) -> subprocess.CompletedProcess:
        workflow = f"{taskset}.default_workflow_type=graded_workflow"
        overrides = [workflow, f"{taskset}.workflow_args={args}"]
        return trinity("config", "check", str(write(tmp_path)), *overrides, env={"TRINITY_PLUGIN_DIRS": str(plugins)})

    result = check("{attempts: 0, styl: long}")
    assert result.returncode == 2, result.stderr
    assert f"{taskset}.workflow_args.attempts: must be >= 1, got 0" in result.stderr
    assert f"{taskset}.workflow_args.styl: unknown key; did you mean '{taskset}.workflow_args.style'?" in result.stderr
    good = check("{attempts: 3}")
    assert good.returncode == 0, good.stderr


def test_schema_walk_every_key_is_acted_on():
    """A field no code reads must go to ``compat.NO_EFFECT_KEYS`` (taken out with a warning): the list
    of keys with no effect can only shrink as features land, and nothing is accepted and silently ignored."""
    sources = [
        path.read_text()
        for path in (REPO / "packages").glob("*/src/**/*.py")
        if SCHEMA not in path.parents and path.name not in ("compat.py", "reference.py")
    ]
    code = "\n".join(sources)
    unused = []
    for model, name, field in _fields(Config):
        if children(field.annotation):  # a section's keys are checked one by one
            continue
        if model is TinkerConfig:  # each key set is refused at run by check_tinker (test_run_refusals.py)
            continue
        if model is MegatronParallelConfig:  # each key off its default is refused by check_trainer
            continue
        if f".{name}" not in code and f'"{name}"' not in code and f"'{name}'" not in code:
            unused.append(f"{model.__name__}.{name}")
    assert not unused, f"fields no code reads; act on them or move them to compat.NO_EFFECT_KEYS: {unused}"


def _fields(model, seen=None):
    seen = set() if seen is None else seen
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        yield model, name, field
        inner = children(field.annotation)
        if inner:
            yield from _fields(inner[1], seen)


def test_every_field_is_documented_and_the_docs_are_in_step():
    missing = [f"{m.__name__}.{n}" for m, n, f in _fields(Config) if not (f.description or "").strip()]
    assert not missing, missing
    result = trinity("config", "docs", "--check", "--out", str(REPO / "docs" / "config.md"))
    assert result.returncode == 0, result.stderr


def test_config_schema_prints_a_json_schema_with_types_defaults_and_ranges():
    result = trinity("config", "schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    sync = schema["$defs"]["SynchronizerConfig"]["properties"]["sync_interval"]
    assert sync == {
        "default": 1,
        "description": "Steps between weight syncs.",
        "minimum": 1,
        "title": "Sync Interval",
        "type": "integer",
    }
    assert schema["$defs"]["MonitorConfig"]["properties"]["monitor_type"]["default"] == ["tensorboard"]
    assert "wait_for_checkpoint" not in schema["$defs"]["SynchronizerConfig"]["properties"]  # compat takes it out
    assert schema["additionalProperties"] is False


def test_monitor_args_are_checked_against_the_monitors_that_read_them(tmp_path, caplog):
    path = write(tmp_path, "monitor: {monitor_type: [mlflow, wandb], monitor_args: {username: [a], entity: team}}\n")
    found = issues_of(path)
    assert found == {"monitor.monitor_args.username": "expected str, got list ['a']"}
    load_config(path, ["monitor.monitor_args.username=me"])
    assert "monitor.monitor_args.entity: no monitor of mlflow, wandb reads it (they read: api_key" in caplog.text


def test_a_trainer_that_reads_its_own_data_needs_a_batch_size(tmp_path):
    """As Trinity-RFT: mode train, or SFT/DPO data, cannot derive train_batch_size."""
    sft = ["algorithm.algorithm_type=sft", "buffer.trainer_input.experience_buffer={path: /data/sft.jsonl}"]
    for overrides in (["mode=train"], sft):
        found = issues_of(write(tmp_path), overrides)
        assert "required: the trainer reads its own data here" in found["buffer.train_batch_size"], overrides
    assert load_config(write(tmp_path), [*sft, "buffer.train_batch_size=8"]).buffer.train_batch_size == 8


def test_experience_operators_are_checked_by_name_and_args(tmp_path):
    pipeline = "data_processor.experience_pipeline.operators"
    found = issues_of(
        write(tmp_path),
        [f"{pipeline}=[{{name: reward_std_filterr}}, {{name: overlong_reward_shaping, args: {{cache_length: -1}}}}]"],
    )
    assert (
        "unknown experience operator 'reward_std_filterr'; did you mean 'reward_std_filter'?"
        in found[f"{pipeline}[0].name"]
    )
    assert found[f"{pipeline}[1].args.cache_length"] == "must be >= 0, got -1"
    cfg = load_config(write(tmp_path), [f"{pipeline}=[{{name: dapo_dynamic_sampling}}]"])
    assert cfg.data_processor.experience_pipeline.operators[0].args["max_refill_rounds"] == 10  # defaults filled


INERT_NOW = 9
"""Keys accepted without effect today, under issue 47's bound of 10 (issue 33's was 20: the rollout model's data,
pipeline and expert parallel keys now reach vLLM, Megatron's parallel keys are refused off their defaults, and
enable_runtime_lora_updating serves the adapter on vLLM's endpoint): lower this as keys take effect, never raise it."""


def _plugin_inert_declarations() -> list[str]:
    """``file:line`` of every ``inert(...)`` plugin argument in every package (read from the sources, as
    importing every plugin to ask its ``Args`` takes seconds); each has a ``reason``."""
    import ast

    found = []
    for source in sorted((REPO / "packages").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "inert":
                found.append(f"{source.name}:{node.lineno}")
    return found


def test_inert_keys_do_not_grow_and_each_is_in_the_docs_with_its_reason():
    keys = inert_keys()  # the config's own (compat.NO_EFFECT_KEYS), each at the first place its section appears
    assert len(keys) == sum(len(table) for table in NO_EFFECT_KEYS.values())
    declared = _plugin_inert_declarations()
    assert len(keys) + len(declared) <= INERT_NOW, f"more than {INERT_NOW} keys without effect: {keys}, {declared}"
    docs = (REPO / "docs" / "config.md").read_text()
    assert f"## Keys with no effect ({len(keys)})" in docs
    missing = [key for key, entry in keys.items() if f"| `{key}` | {entry.reason} |" not in docs]
    assert not missing, missing
    plugin_keys = inert_workflow_args()  # the workflows' own: every declaration
    assert len(plugin_keys) >= len(declared)
    assert [key for key, reason in plugin_keys.items() if f"| `{key}` | {reason} |" not in docs] == []
