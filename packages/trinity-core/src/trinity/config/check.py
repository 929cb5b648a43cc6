"""The one validation and derivation pass over a loaded ``Config``.

Runs in a fixed order (global, monitor, algorithm, model, cluster, synchronizer,
intervals, explorer, buffer, trainer, stages) because later steps read what earlier
ones derived. Every problem is collected with its dotted path; plugin names are
checked through the plugin registry, so an unknown name gets the registry's message.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from trinity.config.load import IssueCollector, build
from trinity.config.schema import (
    AlgorithmConfig,
    BufferConfig,
    Config,
    ExplorerConfig,
    InferenceModelConfig,
    StorageConfig,
    TrainerConfig,
)
from trinity.plugins import Kind, PluginError, get_registry, resolve

logger = logging.getLogger(__name__)

MODES = ("both", "train", "explore", "bench")
SYNC_STYLES = ("fixed", "dynamic_by_explorer", "dynamic_by_trainer")
SAVE_STRATEGIES = ("single_thread", "single_process", "single_node", "unrestricted")
SAVE_HF = ("last", "always", "never")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_EXPERIENCE_BUFFER = "experience_buffer"
DEFAULT_TOKEN_BUDGET = 16384
"""Default ``trainer.max_token_len_per_gpu`` floor (verl's ``ppo_max_token_len_per_gpu`` default)."""
DEFAULT_WORKFLOW = "math_workflow"
"""The workflow of a taskset that names none at any level, as in the Trinity-RFT examples."""

# The algorithm functions: config field -> plugin kind.
_ALGORITHM_FNS = {
    "advantage_fn": Kind.ADVANTAGE_FN,
    "policy_loss_fn": Kind.POLICY_LOSS_FN,
    "kl_penalty_fn": Kind.KL_FN,
    "kl_loss_fn": Kind.KL_FN,
    "entropy_loss_fn": Kind.ENTROPY_LOSS_FN,
    "sample_strategy": Kind.SAMPLE_STRATEGY,
}


def _plugin_ok(issues: IssueCollector, kind: Kind, name: str, path: str) -> bool:
    """Whether ``name`` is registered for ``kind`` (imports nothing); if not, the issue."""
    try:
        get_registry().check(kind, name, config_key=path)
    except PluginError as exc:
        issues.add(path, str(exc).removeprefix(f"{path} "))
        return False
    return True


def _plugin(issues: IssueCollector, kind: Kind, name: str, path: str) -> Any:
    """The implementation of ``name`` (imported), or None with the issue recorded."""
    if not _plugin_ok(issues, kind, name, path):
        return None
    try:
        return resolve(kind, name)
    except PluginError as exc:
        issues.add(path, str(exc))
        return None


def _explorer_runs(config: Config) -> bool:
    return config.mode in ("both", "explore", "bench")


def _trainer_runs(config: Config) -> bool:
    return config.mode in ("both", "train")


def check_global(config: Config, issues: IssueCollector) -> None:
    if config.mode not in MODES:
        issues.add("mode", f"'{config.mode}' is not a mode; choose one of {', '.join(MODES)}")
    root = Path(config.checkpoint_root_dir).expanduser()
    job_dir = (root / config.project / config.name).absolute()
    if not config.continue_from_checkpoint and job_dir.is_dir() and any(job_dir.iterdir()):
        config.name = f"{config.name}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
        logger.warning("%s is not empty and continue_from_checkpoint is false: starting %s", job_dir, config.name)
        job_dir = job_dir.with_name(config.name)
    config.checkpoint_job_dir = str(job_dir)
    if not config.ray_namespace:
        config.ray_namespace = f"{config.project}/{config.name}"


def check_monitor(config: Config, issues: IssueCollector) -> None:
    names = config.monitor.monitor_type
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        issues.add("monitor.monitor_type", f"expected a monitor name or a list of names, got {names!r}")
        return
    for i, name in enumerate(names):
        _plugin_ok(issues, Kind.MONITOR, name, "monitor.monitor_type" + (f"[{i}]" if len(names) > 1 else ""))


def _fn_args(kind: Kind, name: str, args: dict | None, path: str, issues: IssueCollector) -> dict:
    """The function's default args updated with ``args``; unknown args are issues."""
    fn = _plugin(issues, kind, name, path.removesuffix("_args"))
    if fn is None:
        return args or {}
    defaults = fn.default_args() if hasattr(fn, "default_args") else {}
    for key in args or {}:
        if key not in defaults:
            accepted = ", ".join(sorted(defaults)) or "none"
            issues.add(f"{path}.{key}", f"{kind.label} '{name}' takes no argument '{key}' (accepted: {accepted})")
    return {**defaults, **(args or {})}


def check_algorithm(config: Config, issues: IssueCollector) -> None:
    algo_cfg = config.algorithm
    algorithm = _plugin(issues, Kind.ALGORITHM_TYPE, algo_cfg.algorithm_type, "algorithm.algorithm_type")
    if algorithm is None:
        return
    if algorithm.repeat_times is not None:
        algo_cfg.repeat_times = algorithm.repeat_times
    if algo_cfg.repeat_times < 1:
        issues.add("algorithm.repeat_times", f"must be at least 1, got {algo_cfg.repeat_times}")
    elif algorithm.requires_repeat_times_gt_1 and algo_cfg.repeat_times < 2 and config.mode != "train":
        issues.add(
            "algorithm.repeat_times",
            f"algorithm '{algorithm.name}' compares several rollouts of a task: set repeat_times > 1 "
            f"(got {algo_cfg.repeat_times})",
        )
    for field_name, kind in _ALGORITHM_FNS.items():
        name = getattr(algo_cfg, field_name) or getattr(algorithm, field_name)
        setattr(algo_cfg, field_name, name)
        path = f"algorithm.{field_name}"
        if _plugin_ok(issues, kind, name, path):
            args_field = f"{field_name}_args"
            given = getattr(algo_cfg, args_field) or {}
            args = _fn_args(kind, name, given, f"algorithm.{args_field}", issues)
            if "loss_agg_mode" in args and "loss_agg_mode" not in given:  # the global mode unless the fn sets its own
                args["loss_agg_mode"] = algo_cfg.loss_agg_mode
            setattr(algo_cfg, args_field, args)


def check_model(config: Config, issues: IssueCollector) -> None:
    model = config.model
    if not model.model_path:
        issues.add("model.model_path", "required: the path (or hub id) of the model to train")
    model.critic_model_path = model.critic_model_path or model.model_path
    _derive_token_limits(model, "model", issues)
    for path, inference in config.explorer.inference_models():
        inference.model_path = inference.model_path or (model.model_path if path == "explorer.rollout_model" else "")
        if not inference.model_path:
            issues.add(f"{path}.model_path", "required for an auxiliary model")
        for limit in ("max_model_len", "max_prompt_tokens", "max_response_tokens", "min_response_tokens"):
            if getattr(inference, limit) is None:
                setattr(inference, limit, getattr(model, limit))
        if inference is not config.explorer.rollout_model:
            _derive_token_limits(inference, path, issues)


def _derive_token_limits(model: Any, path: str, issues: IssueCollector) -> None:
    """Fill the one missing of max_model_len / max_prompt_tokens / max_response_tokens.

    With only max_model_len set, prompts and responses are bounded by it alone (the
    guide's rule for the OpenAI API: a response gets max_model_len - prompt length).
    """
    total, prompt, response = model.max_model_len, model.max_prompt_tokens, model.max_response_tokens
    if total is None:
        if prompt is None or response is None:
            issues.add(
                f"{path}.max_model_len",
                f"not set and cannot be derived: set it, or both {path}.max_prompt_tokens and {path}.max_response_tokens",
            )
            return
        total = prompt + response
    elif prompt is None and response is not None:
        prompt = total - response
    elif response is None and prompt is not None:
        response = total - prompt
    model.max_model_len, model.max_prompt_tokens, model.max_response_tokens = total, prompt, response
    if prompt is not None and response is not None:
        if prompt < 1 or response < 1:
            issues.add(
                f"{path}.max_model_len",
                f"{total} leaves no room: max_prompt_tokens {prompt}, max_response_tokens {response}",
            )
        elif prompt + response > total:
            issues.add(
                f"{path}.max_model_len",
                f"max_prompt_tokens {prompt} + max_response_tokens {response} = {prompt + response} "
                f"exceeds max_model_len {total}",
            )
    minimum = model.min_response_tokens
    if response is not None and minimum is not None and minimum >= response:
        issues.add(f"{path}.min_response_tokens", f"{minimum} must be less than max_response_tokens {response}")


def _gpus(model: InferenceModelConfig) -> int:
    return model.engine_num * model.tensor_parallel_size


def check_cluster(config: Config, issues: IssueCollector) -> None:
    cluster = config.cluster
    if cluster.node_num < 1 or cluster.gpu_per_node < 0:
        issues.add(
            "cluster", f"node_num must be >= 1 and gpu_per_node >= 0 (got {cluster.node_num}, {cluster.gpu_per_node})"
        )
        return
    total = cluster.node_num * cluster.gpu_per_node
    if total == 0:  # CPU run: engines share the CPU
        return
    rollout = config.explorer.rollout_model
    aux = [_gpus(m) for m in config.explorer.auxiliary_models]
    explorer_gpus = _gpus(rollout) + sum(aux)
    arithmetic = (
        f"rollout_model {rollout.engine_num} engines x TP {rollout.tensor_parallel_size} = {_gpus(rollout)}"
        + (f" + auxiliary_models {' + '.join(map(str, aux))}" if aux else "")
        + f" = {explorer_gpus} GPUs for the explorer, of node_num {cluster.node_num} x gpu_per_node "
        f"{cluster.gpu_per_node} = {total}"
    )
    if config.mode == "both" and explorer_gpus >= total:
        issues.add("cluster", f"no GPU left for the trainer: {arithmetic}, leaves {total - explorer_gpus}")
    elif config.mode in ("explore", "bench") and explorer_gpus > total:
        issues.add("cluster", f"not enough GPUs: {arithmetic}")


def trainer_gpu_num(config: Config) -> int:
    """GPUs left to the trainer: all of them in train mode, the rest after the explorer in both."""
    total = config.cluster.node_num * config.cluster.gpu_per_node
    if config.mode == "train":
        return total
    explorer = config.explorer
    return max(total - _gpus(explorer.rollout_model) - sum(_gpus(m) for m in explorer.auxiliary_models), 0)


def check_synchronizer(config: Config, issues: IssueCollector) -> None:
    sync = config.synchronizer
    engine = config.explorer.rollout_model.engine_type
    if sync.sync_method is None:
        if config.mode == "both":
            gpus = config.cluster.node_num * config.cluster.gpu_per_node
            # NCCL on GPUs; on a CPU, where nccl would broadcast over gloo, memory sync needs no group.
            sync.sync_method = "nccl" if engine.startswith("vllm") and gpus else "memory"
        else:
            sync.sync_method = "checkpoint"
    elif config.mode != "both" and sync.sync_method != "checkpoint":
        issues.add(
            "synchronizer.sync_method",
            f"'{sync.sync_method}' needs explorer and trainer in one run (mode both); "
            f"mode '{config.mode}' runs them apart: use checkpoint",
        )
    _plugin_ok(issues, Kind.SYNC_METHOD, sync.sync_method, "synchronizer.sync_method")
    if sync.sync_method == "nccl" and not engine.startswith("vllm"):
        issues.add(
            "synchronizer.sync_method",
            f"'nccl' broadcasts into vLLM engines only (explorer.rollout_model.engine_type is '{engine}'); "
            "use memory (mode both) or checkpoint, which work with every engine",
        )
    if sync.sync_style not in SYNC_STYLES:
        issues.add("synchronizer.sync_style", f"'{sync.sync_style}' is not one of {', '.join(SYNC_STYLES)}")
    if sync.sync_interval < 1:
        issues.add("synchronizer.sync_interval", f"must be at least 1, got {sync.sync_interval}")
    if sync.sync_offset < 0:
        issues.add("synchronizer.sync_offset", f"must be 0 or more, got {sync.sync_offset}")


def check_intervals(config: Config, issues: IssueCollector) -> None:
    interval, sync = config.explorer.eval_interval, config.synchronizer.sync_interval
    if interval < 1:
        issues.add("explorer.eval_interval", f"must be at least 1, got {interval}")
    elif interval % sync:
        rounded = (interval // sync + 1) * sync
        logger.warning(
            "explorer.eval_interval %d is not a multiple of synchronizer.sync_interval %d: evaluating every %d steps",
            interval,
            sync,
            rounded,
        )
        config.explorer.eval_interval = rounded


def check_explorer(config: Config, issues: IssueCollector) -> None:
    explorer = config.explorer
    for path, model in explorer.inference_models():
        if _explorer_runs(config):
            _plugin_ok(issues, Kind.ROLLOUT_ENGINE, model.engine_type, f"{path}.engine_type")
        if model.engine_num < 1 or model.tensor_parallel_size < 1:
            issues.add(
                path,
                f"engine_num and tensor_parallel_size must be >= 1 (got {model.engine_num}, {model.tensor_parallel_size})",
            )
    for key in ("runner_per_model", "max_timeout"):
        if getattr(explorer, key) < 1:
            issues.add(f"explorer.{key}", f"must be at least 1, got {getattr(explorer, key)}")
    if explorer.max_retry_times < 0:
        issues.add("explorer.max_retry_times", f"must be 0 or more, got {explorer.max_retry_times}")


def check_buffer(config: Config, issues: IssueCollector) -> None:
    buffer, inputs = config.buffer, config.buffer.explorer_input
    if buffer.batch_size < 1:
        issues.add("buffer.batch_size", f"must be at least 1, got {buffer.batch_size}")
    if not buffer.train_batch_size:
        buffer.train_batch_size = buffer.batch_size * config.algorithm.repeat_times
    if inputs.taskset is not None:
        if inputs.tasksets:
            issues.add("buffer.explorer_input.taskset", "give either taskset or tasksets, not both")
        inputs.tasksets = [inputs.taskset]
        inputs.taskset = None
    if _explorer_runs(config) and config.mode != "bench" and not inputs.tasksets:
        issues.add("buffer.explorer_input.tasksets", f"mode '{config.mode}' explores: give a taskset")
    seen: dict[str, str] = {}
    groups = [("tasksets", inputs.tasksets, False), ("eval_tasksets", inputs.eval_tasksets, True)]
    for group, storages, is_eval in groups:
        for i, storage in enumerate(storages):
            path = f"buffer.explorer_input.{group}[{i}]"
            storage.name = storage.name or f"{'eval_' if is_eval else ''}taskset_{i}"
            if storage.name in seen:
                issues.add(
                    f"{path}.name", f"'{storage.name}' is also the name of {seen[storage.name]}; names must be unique"
                )
            seen[storage.name] = path
            _fill_taskset(config, storage, is_eval, path, issues)
    trainer_input = buffer.trainer_input
    if trainer_input.experience_buffer is None:
        trainer_input.experience_buffer = StorageConfig(name=DEFAULT_EXPERIENCE_BUFFER, storage_type="queue")
    experience = trainer_input.experience_buffer
    experience.name = experience.name or DEFAULT_EXPERIENCE_BUFFER
    if experience.storage_type == "queue" and not experience.path and config.mode in ("train", "explore"):
        # Explorer and trainer run as separate processes: they meet through this file.
        experience.path = str(Path(config.checkpoint_job_dir) / "buffer" / f"{experience.name}.db")
    _plugin_ok(
        issues, Kind.BUFFER_STORAGE, experience.storage_type, "buffer.trainer_input.experience_buffer.storage_type"
    )
    experience.batch_size = buffer.train_batch_size
    experience.total_epochs, experience.total_steps = buffer.total_epochs, buffer.total_steps
    for key, aux in trainer_input.auxiliary_buffers.items():
        aux.name = aux.name or key
        _plugin_ok(
            issues, Kind.BUFFER_STORAGE, aux.storage_type, f"buffer.trainer_input.auxiliary_buffers.{key}.storage_type"
        )


def _fill_taskset(config: Config, storage: StorageConfig, is_eval: bool, path: str, issues: IssueCollector) -> None:
    buffer, inputs = config.buffer, config.buffer.explorer_input
    storage.is_eval = is_eval
    if storage.repeat_times is None:
        storage.repeat_times = 1 if is_eval else config.algorithm.repeat_times
    workflow = storage.default_workflow_type
    if is_eval:
        workflow = storage.default_eval_workflow_type or inputs.default_eval_workflow_type or workflow
    storage.default_workflow_type = workflow or inputs.default_workflow_type or buffer.default_workflow_type
    storage.default_reward_fn_type = (
        storage.default_reward_fn_type or inputs.default_reward_fn_type or buffer.default_reward_fn_type
    )
    storage.batch_size = buffer.batch_size
    storage.total_epochs = 1 if is_eval else buffer.total_epochs
    storage.total_steps = None if is_eval else buffer.total_steps
    _plugin_ok(issues, Kind.BUFFER_STORAGE, storage.storage_type, f"{path}.storage_type")
    _plugin_ok(issues, Kind.TASK_SELECTOR, storage.task_selector.selector_type, f"{path}.task_selector.selector_type")
    if not _explorer_runs(config):
        return
    if storage.default_workflow_type is None:
        storage.default_workflow_type = DEFAULT_WORKFLOW
        logger.info("%s names no workflow: using %s", path, DEFAULT_WORKFLOW)
    _plugin_ok(issues, Kind.WORKFLOW, storage.default_workflow_type, f"{path}.default_workflow_type")
    if storage.default_reward_fn_type is not None:
        _plugin_ok(issues, Kind.REWARD_FN, storage.default_reward_fn_type, f"{path}.default_reward_fn_type")


def check_trainer(config: Config, issues: IssueCollector) -> None:
    trainer = config.trainer
    if _trainer_runs(config):
        _plugin_ok(issues, Kind.TRAINER_ENGINE, trainer.trainer_type, "trainer.trainer_type")
        _check_expert_buffer(config, issues)
    if trainer.trainer_config is not None and trainer.trainer_config_path:
        issues.add("trainer.trainer_config_path", "give either trainer_config or trainer_config_path, not both")
    elif trainer.trainer_config_path:
        try:
            trainer.trainer_config = yaml.safe_load(Path(trainer.trainer_config_path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            issues.add("trainer.trainer_config_path", f"cannot read {trainer.trainer_config_path}: {exc}")
    if trainer.trainer_config is not None and not isinstance(trainer.trainer_config, dict):
        issues.add("trainer.trainer_config", f"expected a mapping, got {type(trainer.trainer_config).__name__}")
    if trainer.total_steps is None:
        trainer.total_steps = config.buffer.total_steps
    if trainer.save_strategy not in SAVE_STRATEGIES:
        issues.add("trainer.save_strategy", f"'{trainer.save_strategy}' is not one of {', '.join(SAVE_STRATEGIES)}")
    if trainer.save_hf_checkpoint not in SAVE_HF:
        issues.add("trainer.save_hf_checkpoint", f"'{trainer.save_hf_checkpoint}' is not one of {', '.join(SAVE_HF)}")
    max_len = config.model.max_model_len
    if trainer.max_token_len_per_gpu is None and max_len is not None:
        trainer.max_token_len_per_gpu = max(2 * max_len, DEFAULT_TOKEN_BUDGET)
    elif max_len is not None and trainer.max_token_len_per_gpu < max_len:
        issues.add(
            "trainer.max_token_len_per_gpu",
            f"{trainer.max_token_len_per_gpu} is below model.max_model_len {max_len}: a full-length sample would not fit",
        )
    if config.log.level.upper() not in LOG_LEVELS:
        issues.add("log.level", f"'{config.log.level}' is not one of {', '.join(LOG_LEVELS)}")


def _check_expert_buffer(config: Config, issues: IssueCollector) -> None:
    """Expert data the sample strategy reads (``mix``) comes from an auxiliary buffer that exists."""
    algo = config.algorithm
    if algo.sample_strategy not in get_registry().names(Kind.SAMPLE_STRATEGY):
        return  # reported by check_algorithm
    strategy = resolve(Kind.SAMPLE_STRATEGY, algo.sample_strategy)(**algo.sample_strategy_args)
    reads = strategy.expert_reads(config.buffer.train_batch_size)
    auxiliary = config.buffer.trainer_input.auxiliary_buffers
    if reads and reads[0] not in auxiliary:
        issues.add(
            "buffer.trainer_input.auxiliary_buffers",
            f"sample strategy '{algo.sample_strategy}' reads expert data from the auxiliary buffer "
            f"'{reads[0]}', which is not configured (configured: {', '.join(auxiliary) or 'none'})",
        )


_STAGE_SECTIONS = {
    "algorithm": AlgorithmConfig,
    "buffer": BufferConfig,
    "explorer": ExplorerConfig,
    "trainer": TrainerConfig,
}


def check_stages(config: Config, issues: IssueCollector) -> None:
    names: set[str] = set()
    for i, stage in enumerate(config.stages):
        path = f"stages[{i}]"
        if not stage.stage_name:
            issues.add(f"{path}.stage_name", "required: it names the stage's checkpoint directory")
        elif stage.stage_name in names:
            issues.add(f"{path}.stage_name", f"'{stage.stage_name}' is used twice; stage names must be unique")
        names.add(stage.stage_name)
        if stage.mode is not None and stage.mode not in MODES:
            issues.add(f"{path}.mode", f"'{stage.mode}' is not a mode; choose one of {', '.join(MODES)}")
        for section, cls in _STAGE_SECTIONS.items():
            build(cls, getattr(stage, section), f"{path}.{section}", issues)


CHECKS = (
    check_global,
    check_monitor,
    check_algorithm,
    check_model,
    check_cluster,
    check_synchronizer,
    check_intervals,
    check_explorer,
    check_buffer,
    check_trainer,
    check_stages,
)


def check_config(config: Config, issues: IssueCollector) -> Config:
    """Validate and derive in place, in the order of ``CHECKS``; returns ``config``."""
    for check in CHECKS:
        check(config, issues)
    return config
