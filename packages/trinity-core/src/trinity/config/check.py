"""The one validation and derivation pass over a loaded ``Config``.

Runs in a fixed order (global, monitor, algorithm, model, cluster, plugin defaults,
synchronizer, intervals, explorer, buffer, trainer, stages, plugin checks) because later steps
read what earlier ones derived. Every problem is collected with its dotted path. Plugin names
are checked through the plugin registry (an unknown name gets the registry's message), a
plugin's arguments through its declared ``Args`` model; plugins fill the defaults they own
(``trinity_config_defaults``) and check the settings that name them (``trinity_check_config``):
this module names no plugin of a sibling package.

Derivations follow Trinity-RFT's config validators; where a rule of theirs only warns or
adjusts a value, so does this one (a rule stricter than the original is a warning).
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from trinity.common.files import DATA_FILE_BUILDERS
from trinity.common.http_guard import is_loopback
from trinity.config.base import PluginArgs
from trinity.config.load import IssueCollector, report_effects, validate_section
from trinity.config.memory import check_gpu_memory
from trinity.config.schema import (
    AlgorithmConfig,
    BufferConfig,
    Config,
    DataProcessorConfig,
    ExperienceBufferConfig,
    ExplorerConfig,
    InferenceModelConfig,
    TasksetConfig,
    TrainerConfig,
    parse_rs_options,
    parse_rs_thresholds,
)
from trinity.plugins import Kind, PluginError, get_registry, resolve
from trinity.plugins.manager import plugin_hooks

logger = logging.getLogger(__name__)

DEFAULT_EXPERIENCE_BUFFER = "experience_buffer"
TORCH_TOKEN_BUDGET = 16384
"""The torch engine's least default ``trainer.max_token_len_per_gpu`` (verl's own ``ppo_max_token_len_per_gpu`` default)."""

# The algorithm functions: config field -> plugin kind.
_ALGORITHM_FNS = {
    "advantage_fn": Kind.ADVANTAGE_FN,
    "policy_loss_fn": Kind.POLICY_LOSS_FN,
    "kl_penalty_fn": Kind.KL_FN,
    "kl_loss_fn": Kind.KL_FN,
    "entropy_loss_fn": Kind.ENTROPY_LOSS_FN,
    "sample_strategy": Kind.SAMPLE_STRATEGY,
}


def plugin_ok(issues: IssueCollector, kind: Kind, name: str, path: str) -> bool:
    """Whether ``name`` is registered for ``kind`` (imports nothing); if not, the issue."""
    try:
        get_registry().check(kind, name, config_key=path)
    except PluginError as exc:
        issues.add(path, str(exc).removeprefix(f"{path} "))
        return False
    return True


def _plugin(issues: IssueCollector, kind: Kind, name: str, path: str) -> Any:
    """The implementation of ``name`` (imported), or None with the issue recorded."""
    if not plugin_ok(issues, kind, name, path):
        return None
    try:
        return resolve(kind, name)
    except PluginError as exc:
        issues.add(path, str(exc))
        return None


def plugin_args(target: Any, args: dict[str, Any] | None, path: str, issues: IssueCollector) -> dict[str, Any]:
    """``args`` validated by the plugin's declared ``Args`` model, defaults filled in.

    A plugin without an ``Args`` model takes free-form arguments (as in Trinity-RFT): they
    pass through unchecked.
    """
    model = getattr(target, "Args", None)
    if not (isinstance(model, type) and issubclass(model, PluginArgs)):
        return dict(args or {})
    validated = validate_section(model, args or {}, path, issues)
    report_effects(validated, path, issues)
    return validated.model_dump()


def _explorer_runs(config: Config) -> bool:
    return config.mode in ("both", "explore", "bench", "serve", "colocate")


def _trainer_runs(config: Config) -> bool:
    return config.mode in ("both", "train", "colocate")


def check_global(config: Config, issues: IssueCollector) -> None:
    """The job folder ``<root>/<project>/<group>/<name>`` (absolute) and the Ray namespace."""
    root = Path(config.checkpoint_root_dir or ".").expanduser()
    job_dir = (root / config.project / config.group / config.name).absolute()
    if not config.continue_from_checkpoint and job_dir.is_dir() and any(job_dir.iterdir()):
        if config.mode == "bench":
            issues.warn("continue_from_checkpoint", "bench mode evaluates the existing checkpoints: set to true")
            config.continue_from_checkpoint = True
        else:
            config.name = f"{config.name}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
            issues.warn("name", f"{job_dir} is not empty and continue_from_checkpoint is false: starting {config.name}")
            job_dir = job_dir.with_name(config.name)
    config.checkpoint_job_dir = str(job_dir)
    config.log.save_dir = str(job_dir / "log")
    config.monitor.cache_dir = str(job_dir / "monitor")
    config.buffer.cache_dir = str(job_dir / "buffer")
    if not config.ray_namespace:
        config.ray_namespace = "/".join(part for part in (config.project, config.group, config.name) if part)


def check_monitor(config: Config, issues: IssueCollector) -> None:
    names = config.monitor.monitor_type
    monitors = []
    for i, name in enumerate(names):
        path = "monitor.monitor_type" + (f"[{i}]" if len(names) > 1 else "")
        if plugin_ok(issues, Kind.MONITOR, name, path):
            monitors.append(name)
    args = config.monitor.monitor_args
    if not args:
        return
    # One monitor_args serves every monitor of the list: each validates the keys it declares.
    declared: set[str] = set()
    free_form = False
    for name in monitors:
        model = getattr(_plugin(issues, Kind.MONITOR, name, "monitor.monitor_type"), "Args", None)
        if not (isinstance(model, type) and issubclass(model, PluginArgs)):
            free_form = True
            continue
        declared |= set(model.model_fields)
        validate_section(
            model, {k: v for k, v in args.items() if k in model.model_fields}, "monitor.monitor_args", issues
        )
    if not free_form:  # Trinity-RFT's monitors ignore what they do not read: a warning, not an error
        for key in sorted(set(args) - declared):
            issues.no_effect(
                f"monitor.monitor_args.{key}",
                f"no monitor of {', '.join(monitors)} reads it (they read: {', '.join(sorted(declared)) or 'nothing'})",
            )


def check_algorithm(config: Config, issues: IssueCollector) -> None:
    algo_cfg = config.algorithm
    algorithm = _plugin(issues, Kind.ALGORITHM_TYPE, algo_cfg.algorithm_type, "algorithm.algorithm_type")
    if algorithm is None:  # the functions named explicitly are still checked: all errors at once
        for field_name, kind in _ALGORITHM_FNS.items():
            if getattr(algo_cfg, field_name):
                plugin_ok(issues, kind, getattr(algo_cfg, field_name), f"algorithm.{field_name}")
        return
    if algorithm.repeat_times is not None:
        algo_cfg.repeat_times = algorithm.repeat_times
    compares_group = algorithm.requires_repeat_times_gt_1 and algo_cfg.advantage_fn in (None, algorithm.advantage_fn)
    if compares_group and algo_cfg.repeat_times < 2 and config.mode in ("both", "explore", "colocate"):
        issues.add(  # Trinity-RFT runs it, training on nothing: every advantage is 0
            "algorithm.repeat_times",
            f"algorithm '{algorithm.name}' compares several rollouts of a task, and repeat_times is "
            f"{algo_cfg.repeat_times}: every advantage would be 0; set algorithm.repeat_times to 2 or more",
        )
    for field_name, kind in _ALGORITHM_FNS.items():
        name = getattr(algo_cfg, field_name) or getattr(algorithm, field_name)
        setattr(algo_cfg, field_name, name)
        path = f"algorithm.{field_name}"
        fn = _plugin(issues, kind, name, path)
        if fn is None:
            continue
        args_field = f"{field_name}_args"
        given = getattr(algo_cfg, args_field) or {}
        args = plugin_args(fn, given, f"algorithm.{args_field}", issues)
        if "loss_agg_mode" in args and "loss_agg_mode" not in given:  # the global mode unless the fn sets its own
            args["loss_agg_mode"] = algo_cfg.loss_agg_mode
        setattr(algo_cfg, args_field, args)
    check_rollout_correction(config, issues)


def check_rollout_correction(config: Config, issues: IssueCollector) -> None:
    """``algorithm.rollout_correction`` against verl's rules; its ``bypass_mode`` and
    ``algorithm.bypass_old_logprobs`` made one (the trainer reads the latter); router replay refused."""
    algo = config.algorithm
    if algo.enable_router_replay:
        issues.add(
            "algorithm.enable_router_replay",
            "router replay (R3) is not supported: no rollout engine here records the MoE routing and no trainer "
            "replays it, and there is no MoE test model to check it on; set it to false",
        )
    rc = algo.rollout_correction
    if rc is None:
        return
    path = "algorithm.rollout_correction"
    if rc.bypass_mode is not None and "bypass_old_logprobs" in algo.model_fields_set:
        if rc.bypass_mode != algo.bypass_old_logprobs:
            issues.add(
                f"{path}.bypass_mode",
                f"is {str(rc.bypass_mode).lower()} and algorithm.bypass_old_logprobs is "
                f"{str(algo.bypass_old_logprobs).lower()}: both say whether the trainer recomputes the old logprobs; "
                "set one of them",
            )
    bypass = algo.bypass_old_logprobs if rc.bypass_mode is None else rc.bypass_mode
    algo.bypass_old_logprobs = rc.bypass_mode = bypass
    if rc.rollout_rs is not None:
        if rc.rollout_rs_threshold is None:
            issues.add(f"{path}.rollout_rs_threshold", f"rollout_rs {rc.rollout_rs!r} needs a threshold")
        else:
            try:
                parse_rs_thresholds(parse_rs_options(rc.rollout_rs), rc.rollout_rs_threshold)
            except ValueError as exc:
                issues.add(f"{path}.rollout_rs_threshold", str(exc))
    if bypass and rc.loss_type == "ppo_clip" and rc.rollout_is is not None:
        issues.warn(
            f"{path}.rollout_is",
            "in bypass mode with loss_type ppo_clip the importance weights are only logged (as in verl: the PPO "
            "ratio to the rollout policy corrects already); set loss_type: reinforce, or bypass_mode: false to "
            "recompute the old logprobs and weight the loss",
        )


TINKER = "tinker"
"""Trinity-RFT's engine and trainer type backed by the hosted Tinker service: refused here."""

TINKER_REFUSAL = (
    "needs the hosted Tinker service (Thinking Machines' training API, reached with the `tinker` client): "
    "trinity has no Tinker backend and no local server speaks its protocol; train here with "
    "trainer_type verl or torch and engine_type vllm or transformers (model.lora_configs for a LoRA run)"
)


def check_tinker(config: Config, issues: IssueCollector) -> None:
    """Tinker, as Trinity-RFT: ``model.tinker.enable`` makes the trainer and every engine ``tinker``.

    That backend is a hosted service, so any of it (the switch, a ``model.tinker`` key, a ``tinker``
    engine or trainer type) is refused at ``trinity run`` and a warning at ``trinity config check``.
    """
    tinker = config.model.tinker
    if tinker.enable:
        config.trainer.trainer_type = TINKER
        for _, inference in config.explorer.inference_models():
            inference.engine_type = TINKER
        issues.refuse_at_run(
            "model.tinker.enable", f"trainer_type and every engine_type become tinker, which {TINKER_REFUSAL}"
        )
        return
    named = [f"model.tinker.{key}" for key in sorted(tinker.model_fields_set)]
    named += [f"{path}.engine_type" for path, m in config.explorer.inference_models() if m.engine_type == TINKER]
    named += ["trainer.trainer_type"] if config.trainer.trainer_type == TINKER else []
    for path in named:
        issues.refuse_at_run(path, f"Tinker {TINKER_REFUSAL}")


def check_model(config: Config, issues: IssueCollector) -> None:
    model = config.model
    if model.external_model.enable:  # as Trinity-RFT: the rollout model is the external server's
        if config.mode != "bench":
            issues.add(
                "model.external_model.enable", f"an external model is evaluated in mode bench, not {config.mode}"
            )
        config.explorer.rollout_model.engine_type = "external"
        config.explorer.rollout_model.external_model_config = model.external_model.model_copy()
    if not model.model_path and not model.external_model.enable:
        issues.add("model.model_path", "required: the path (or hub id) of the model to train")
    model.critic_model_path = model.critic_model_path or model.model_path
    if model.chat_template_path is not None and model.custom_chat_template is None:
        try:
            model.custom_chat_template = Path(model.chat_template_path).read_text()
        except OSError as exc:
            issues.add("model.chat_template_path", f"cannot read the chat template: {exc}")
    _derive_token_limits(model, "model", issues)
    for path, inference in config.explorer.inference_models():
        is_rollout = inference is config.explorer.rollout_model
        inference.model_path = inference.model_path or (model.model_path if is_rollout else "")
        if not inference.model_path:
            issues.add(f"{path}.model_path", "required for an auxiliary model")
        inherited = ["temperature", "top_p", "top_k", "logprobs", "repetition_penalty", "enable_thinking"]
        inherited += ["max_model_len", "max_prompt_tokens", "max_response_tokens", "min_response_tokens"]
        inherited += ["enable_prompt_truncation", "rope_scaling", "rope_theta"]
        for key in inherited:
            if getattr(inference, key) is None:
                setattr(inference, key, getattr(model, key))
        if is_rollout:
            inference.trust_remote_code = inference.trust_remote_code or model.trust_remote_code
            inference.chat_template = inference.chat_template or model.custom_chat_template
        else:  # Trinity-RFT checks no auxiliary model's limits: its templates may leave them inconsistent
            _derive_token_limits(inference, path, issues, over_the_limit=issues.refuse_at_run)
        inference.enable_return_routed_experts = config.algorithm.enable_router_replay
        # Trinity-RFT's launcher sets these per engine; here one config serves engine_num engines the
        # explorer starts (engine_id per engine), Ray places and names none of them.
        inference.engine_id, inference.node_rank, inference.bundle_indices = 0, 0, ""
        inference.ray_actor_name = inference.cuda_visible_devices = None
        if not inference.use_v1:
            issues.refuse_at_run(f"{path}.use_v1", "vLLM removed its V0 engine in 0.11: trinity runs V1 (use_v1: true)")
        inference.ray_namespace = config.ray_namespace
        inference.checkpoint_job_dir = config.checkpoint_job_dir
        inference.gpu_per_engine = engine_gpus(inference)


def check_lora(config: Config, issues: IssueCollector) -> None:
    """``model.lora_configs`` as Trinity-RFT derives it: one adapter, the rollout model's
    ``enable_lora`` / ``lora_modules`` / ``lora_kwargs``; and both engines must take an adapter."""
    model = config.model
    if not model.lora_configs or model.tinker.enable:
        return
    path = "model.lora_configs"
    if len(model.lora_configs) > 1:
        issues.add(path, f"{len(model.lora_configs)} adapters: one is supported (as in Trinity-RFT)")
    for i, lora in enumerate(model.lora_configs):
        if lora.lora_rank < 1:
            issues.add(f"{path}[{i}].lora_rank", "0 trains no adapter: set it >= 1, or drop lora_configs to train all")
        if lora.path is not None and not (Path(lora.path) / "adapter_config.json").is_file():
            issues.add(f"{path}[{i}].path", f"{lora.path} is not a peft adapter folder (no adapter_config.json)")
        lora.is_dummy = lora.path is None
    rollout = config.explorer.rollout_model
    if not rollout.engine_type.startswith(
        "vllm"
    ):  # vLLM's own LoRA settings; other engines hold the adapter as the model
        vllm_only = {
            "model.fully_sharded_loras": model.fully_sharded_loras,
            "model.max_cpu_loras": model.max_cpu_loras is not None,
            **{f"{path}[{i}].lora_dtype": c.lora_dtype != "auto" for i, c in enumerate(model.lora_configs)},
        }
        for key in (key for key, set_ in vllm_only.items() if set_):
            issues.no_effect(
                key, f"read by the vLLM engine only (explorer.rollout_model.engine_type is '{rollout.engine_type}')"
            )
    engines = []
    if _trainer_runs(config):
        engines.append((Kind.TRAINER_ENGINE, config.trainer.trainer_type, "trainer.trainer_type", "torch"))
    if _explorer_runs(config):
        engines.append((Kind.ROLLOUT_ENGINE, rollout.engine_type, "explorer.rollout_model.engine_type", "transformers"))
    # an unknown name is reported by check_explorer / check_trainer
    known = [e for e in engines if e[1] in get_registry().names(e[0])]
    lacking = [e for e in known if not getattr(resolve(e[0], e[1]), "takes_lora", False)]
    if lacking and len(lacking) == len(known):  # as before LoRA took effect: the full model trains, warned
        for _, name, key, takes in lacking:
            issues.no_effect(path, f"{key} '{name}' takes no LoRA adapter yet ('{takes}' does): the full model trains")
        return
    for _, name, key, takes in lacking:  # one side with an adapter, the other without: the sync cannot work
        issues.add(
            key,
            f"'{name}' takes no LoRA adapter (model.lora_configs) yet, and the other engine does: use '{takes}', "
            "or drop model.lora_configs to train the full model",
        )
    rollout.enable_lora = True
    rollout.lora_modules = [
        {"lora_int_id": i + 1, "lora_name": c.name, "lora_path": c.path, "base_model_name": c.base_model_name}
        for i, c in enumerate(model.lora_configs)
    ]
    rollout.lora_kwargs = {
        "max_loras": len(model.lora_configs),
        "max_lora_rank": max(c.lora_rank for c in model.lora_configs),
    }


def _derive_token_limits(
    model: Any, path: str, issues: IssueCollector, over_the_limit: Callable[[str, str], None] | None = None
) -> None:
    """Fill max_model_len / max_prompt_tokens / max_response_tokens as Trinity-RFT does.

    Given two, the third follows; given only max_model_len, prompt and response get half each;
    a min_response_tokens that leaves no room is lowered (with a warning). Prompt and response
    over max_model_len are reported with ``over_the_limit`` (default: an error).
    """
    total, prompt, response = model.max_model_len, model.max_prompt_tokens, model.max_response_tokens
    if total is not None and prompt is not None and response is not None and prompt + response > total:
        (over_the_limit or issues.add)(
            f"{path}.max_model_len",
            f"max_prompt_tokens {prompt} + max_response_tokens {response} = {prompt + response} "
            f"exceeds max_model_len {total}",
        )
        return
    if total is None:
        if prompt is None or response is None:
            issues.add(
                f"{path}.max_model_len",
                f"not set and cannot be derived: set it, or both {path}.max_prompt_tokens and {path}.max_response_tokens",
            )
            return
        total = prompt + response
    elif prompt is None and response is None:
        prompt = total // 2
        response = total - prompt
    elif prompt is None:
        response = min(response, total - 1)
        prompt = total - response
    elif response is None:
        prompt = min(prompt, total - 1)
        response = total - prompt
    if prompt < 1 or response < 1:
        issues.add(f"{path}.max_model_len", f"{total} leaves no room for a prompt and a response")
        return
    model.max_model_len, model.max_prompt_tokens, model.max_response_tokens = total, prompt, response
    minimum = model.min_response_tokens
    if minimum is not None and minimum > response:  # Trinity-RFT lowers it; more than the maximum is a mistake
        issues.add(
            f"{path}.min_response_tokens",
            f"{minimum} is more than max_response_tokens {response}: lower {path}.min_response_tokens "
            f"or raise {path}.max_response_tokens",
        )
    elif minimum is not None and minimum == response:
        model.min_response_tokens = response - 1
        issues.warn(
            f"{path}.min_response_tokens",
            f"{minimum} leaves no room below max_response_tokens {response}: set to {response - 1}",
        )


def _gpus(model: InferenceModelConfig) -> int:
    return model.engine_num * model.gpu_per_engine


def check_cluster(config: Config, issues: IssueCollector) -> None:
    """The GPU split of Trinity-RFT: explorer engines first, the rest to the trainer.

    ``node_num`` / ``gpu_per_node`` of 0 are detected from the Ray cluster when the run starts
    (``trinity run`` fills them in); until then the arithmetic is skipped.
    """
    cluster = config.cluster
    total = cluster.node_num * cluster.gpu_per_node
    cluster.total_gpu_num = total
    if config.model.tinker.enable:  # the Tinker service trains and samples: no local GPU to split
        return
    explorer = config.explorer
    if _explorer_runs(config):
        cluster.rollout_gpu_num = _gpus(explorer.rollout_model)
        cluster.auxiliary_model_gpu_num = sum(_gpus(m) for m in explorer.auxiliary_models)
    cluster.explorer_gpu_num = cluster.rollout_gpu_num + cluster.auxiliary_model_gpu_num
    if total == 0:  # a CPU machine, or not detected yet: engines share the CPU
        return
    aux = [_gpus(m) for m in explorer.auxiliary_models]
    arithmetic = (
        f"rollout_model {explorer.rollout_model.engine_num} engines x {explorer.rollout_model.gpu_per_engine} GPUs "
        + (f"+ auxiliary_models {' + '.join(map(str, aux))} " if aux else "")
        + f"= {cluster.explorer_gpu_num} GPUs for the explorer, of node_num {cluster.node_num} x gpu_per_node "
        f"{cluster.gpu_per_node} = {total}"
    )
    change = (
        "lower explorer.rollout_model.engine_num or tensor_parallel_size"
        + (" (or explorer.auxiliary_models' engine_num)" if aux else "")
        + ", or raise cluster.node_num or cluster.gpu_per_node"
    )
    if config.mode == "both" and cluster.explorer_gpu_num >= total:
        hint = "; or mode: colocate, which shares one GPU between explorer and trainer" if total == 1 else ""
        issues.add("explorer.rollout_model.engine_num", f"no GPU left for the trainer: {arithmetic}: {change}{hint}")
        return
    if config.mode in ("explore", "bench", "serve") and cluster.explorer_gpu_num > total:
        issues.add("explorer.rollout_model.engine_num", f"not enough GPUs: {arithmetic}: {change}")
        return
    if config.mode == "colocate" and total != 1:
        issues.add("mode", f"colocate shares one GPU between explorer and trainer; the cluster has {total}")
        return
    cluster.trainer_gpu_num = total - cluster.explorer_gpu_num if config.mode != "colocate" else 1
    if cluster.trainer_gpu_num <= cluster.gpu_per_node:
        cluster.trainer_node_num, cluster.trainer_gpu_num_per_node = 1, cluster.trainer_gpu_num
    elif cluster.trainer_gpu_num % cluster.gpu_per_node:
        issues.add(
            "cluster",
            f"the trainer must get whole nodes: {arithmetic} leaves {cluster.trainer_gpu_num}, "
            f"not a multiple of gpu_per_node {cluster.gpu_per_node}",
        )
    else:
        cluster.trainer_node_num = cluster.trainer_gpu_num // cluster.gpu_per_node
        cluster.trainer_gpu_num_per_node = cluster.gpu_per_node


def trainer_gpu_num(config: Config) -> int:
    """GPUs left to the trainer: all of them in train mode, the rest after the explorer in both."""
    total = config.cluster.node_num * config.cluster.gpu_per_node
    if config.mode == "train":
        return total
    models = (config.explorer.rollout_model, *config.explorer.auxiliary_models)
    return max(total - sum(m.engine_num * engine_gpus(m) for m in models), 0)


def engine_gpus(model: InferenceModelConfig) -> int:
    """GPUs of one engine: tensor x data x pipeline parallel size (none for an external server)."""
    if model.engine_type == "external":
        return 0
    return model.tensor_parallel_size * model.data_parallel_size * model.pipeline_parallel_size


def plugin_defaults(config: Config, issues: IssueCollector) -> None:
    """Each plugin fills the unset values it owns."""
    plugin_hooks().trinity_config_defaults(config=config, issues=issues)


def plugin_checks(config: Config, issues: IssueCollector) -> None:
    """Each plugin checks the settings that name it, on the derived config."""
    plugin_hooks().trinity_check_config(config=config, issues=issues)


def check_synchronizer(config: Config, issues: IssueCollector) -> None:
    sync = config.synchronizer
    if sync.sync_method is None:
        sync.sync_method = "memory" if config.in_one_run else "checkpoint"
    elif not config.in_one_run and sync.sync_method != "checkpoint":
        issues.warn(
            "synchronizer.sync_method",
            f"'{sync.sync_method}' needs explorer and trainer in one run; mode '{config.mode}' runs them apart: "
            "using checkpoint",
        )
        sync.sync_method = "checkpoint"
    plugin_ok(issues, Kind.SYNC_METHOD, sync.sync_method, "synchronizer.sync_method")
    sync.ray_namespace = config.ray_namespace
    sync.explorer_world_size = config.cluster.rollout_gpu_num
    sync.explorer_sync_interval = sync.explorer_sync_interval or sync.sync_interval
    sync.trainer_sync_interval = sync.trainer_sync_interval or sync.sync_interval
    for model in (config.explorer.rollout_model, *config.explorer.auxiliary_models):
        model.sync_method = sync.sync_method
    if sync.sync_style == "fully_async" and config.buffer.explorer_input.eval_tasksets:
        issues.add(
            "buffer.explorer_input.eval_tasksets",
            "the fully_async sync style does not evaluate: remove the eval tasksets",
        )


def check_intervals(config: Config, issues: IssueCollector) -> None:
    """eval_interval becomes a multiple of the sync interval, rounded down (as Trinity-RFT)."""
    interval, sync = config.explorer.eval_interval, config.synchronizer.explorer_sync_interval
    if config.mode == "bench" or config.algorithm.algorithm_type in ("sft", "dpo") or interval % sync == 0:
        return
    rounded = max(interval // sync, 1) * sync
    issues.warn(
        "explorer.eval_interval",
        f"{interval} is not a multiple of synchronizer.sync_interval {sync}: evaluating every {rounded} steps",
    )
    config.explorer.eval_interval = rounded


def check_explorer(config: Config, issues: IssueCollector) -> None:
    explorer = config.explorer
    explorer.mode = config.mode
    if config.mode == "serve":  # the proxy forwards to the engines' endpoints (as Trinity-RFT)
        explorer.rollout_model.enable_openai_api = True
    for path, model in explorer.inference_models():
        if _explorer_runs(config) and model.engine_type != TINKER:  # refused by check_tinker
            plugin_ok(issues, Kind.ROLLOUT_ENGINE, model.engine_type, f"{path}.engine_type")
    if _explorer_runs(config):
        check_doors(explorer, issues)
    over = explorer.over_rollout
    if (over.ratio > 0 or over.return_partial_tasks) and config.synchronizer.sync_style == "fixed":
        issues.add(
            "explorer.over_rollout",
            "over_rollout does not work with sync_style fixed: use explorer_driven, trainer_driven or fully_async",
        )


def check_doors(explorer: ExplorerConfig, issues: IssueCollector) -> None:
    """An endpoint bound beyond loopback needs a key: whoever reaches its port could otherwise
    generate with the policy or, through serve mode's proxy, score and commit training data."""
    proxy_open = explorer.mode == "serve" and not is_loopback(explorer.listen_address)
    if proxy_open and not explorer.rollout_model.endpoint_key():
        issues.add(
            "explorer.listen_address",
            f"{explorer.listen_address!r} opens the serve proxy to other hosts: set explorer.rollout_model.api_key "
            "(the token agents send) or bind 127.0.0.1",
        )
    for path, model in explorer.inference_models():
        if model.enable_openai_api and not is_loopback(model.openai_api_host) and not model.endpoint_key():
            issues.add(
                f"{path}.openai_api_host",
                f"{model.openai_api_host!r} opens the OpenAI endpoint to other hosts: set {path}.api_key or bind "
                "127.0.0.1",
            )


def check_buffer(config: Config, issues: IssueCollector) -> None:
    buffer, inputs = config.buffer, config.buffer.explorer_input
    if not buffer.train_batch_size:
        reads_data = config.buffer.trainer_input.experience_buffer is not None and _data_schema(config) in (
            "sft",
            "dpo",
        )
        if config.mode == "train" or reads_data:
            issues.add(
                "buffer.train_batch_size",
                "required: the trainer reads its own data here (mode train, or SFT/DPO data), so the "
                "batch cannot be derived from batch_size x repeat_times",
            )
        buffer.train_batch_size = buffer.batch_size * config.algorithm.repeat_times
    buffer.tokenizer_path = config.model.model_path
    single = inputs.taskset is not None  # errors name the key the user wrote
    if single:
        if inputs.tasksets:
            issues.add("buffer.explorer_input.taskset", "give either taskset or tasksets, not both")
        inputs.tasksets = [inputs.taskset]
        inputs.taskset = None
    inputs.tasksets = _task_dirs_expanded(inputs.tasksets, "tasksets" if not single else None, issues)
    inputs.eval_tasksets = _task_dirs_expanded(inputs.eval_tasksets, "eval_tasksets", issues)
    if _explorer_runs(config) and config.mode not in ("bench", "serve") and not inputs.tasksets:
        issues.add("buffer.explorer_input.tasksets", f"mode '{config.mode}' explores: give a taskset")
    groups = [("tasksets", inputs.tasksets, False), ("eval_tasksets", inputs.eval_tasksets, True)]
    for group, tasksets, is_eval in groups:
        seen: dict[str, str] = {}  # names are unique within a group (a train and an eval set may share one)
        for i, taskset in enumerate(tasksets):
            path = "buffer.explorer_input.taskset" if single and not is_eval else f"buffer.explorer_input.{group}[{i}]"
            taskset.name = taskset.name or f"{'eval_' if is_eval else ''}taskset_{i}"
            if taskset.name in seen:
                issues.add(
                    f"{path}.name", f"'{taskset.name}' is also the name of {seen[taskset.name]}; names must be unique"
                )
            seen[taskset.name] = path
            _fill_taskset(config, taskset, is_eval, path, issues)
    _check_experience_buffer(config, issues)


def _task_dirs_expanded(
    tasksets: list[TasksetConfig], group: str | None, issues: IssueCollector
) -> list[TasksetConfig]:
    """Each taskset with a ``task_dir`` becomes one taskset per data file of the folder (sorted
    by name), with its settings and the name ``<name>/<file stem>`` (the stem alone unnamed)."""
    expanded = []
    for i, taskset in enumerate(tasksets):
        if taskset.task_dir is None:
            expanded.append(taskset)
            continue
        key = f"buffer.explorer_input.{group}[{i}].task_dir" if group else "buffer.explorer_input.taskset.task_dir"
        folder = Path(taskset.task_dir)
        files = sorted(f for f in folder.iterdir() if f.suffix in DATA_FILE_BUILDERS) if folder.is_dir() else []
        if taskset.path:
            issues.add(key, "give either path or task_dir, not both")
        elif not folder.is_dir():
            issues.add(key, f"{str(folder)!r} is not a folder")
        elif not files:
            issues.add(key, f"{str(folder)!r} holds no data file ({', '.join(DATA_FILE_BUILDERS)})")
        else:
            for file in files:
                name = f"{taskset.name}/{file.stem}" if taskset.name else file.stem
                expanded.append(
                    taskset.model_copy(deep=True, update={"path": str(file), "task_dir": None, "name": name})
                )
            continue
        expanded.append(taskset)  # as given: the error above is the one to fix
    return expanded


def _fill_taskset(config: Config, taskset: TasksetConfig, is_eval: bool, path: str, issues: IssueCollector) -> None:
    buffer, inputs = config.buffer, config.buffer.explorer_input
    taskset.is_eval = is_eval
    if not is_eval or taskset.repeat_times is None:
        taskset.repeat_times = 1 if is_eval else config.algorithm.repeat_times
    workflow = taskset.default_workflow_type
    if is_eval:
        workflow = taskset.default_eval_workflow_type or inputs.default_eval_workflow_type or workflow
    taskset.default_workflow_type = workflow or inputs.default_workflow_type or buffer.default_workflow_type
    taskset.default_reward_fn_type = (
        taskset.default_reward_fn_type or inputs.default_reward_fn_type or buffer.default_reward_fn_type
    )
    taskset.format.system_prompt = taskset.format.system_prompt or inputs.system_prompt
    taskset.format.reply_prefix = taskset.format.reply_prefix or inputs.reply_prefix
    taskset.format.chat_template = taskset.format.chat_template or config.model.custom_chat_template
    taskset.data_selector.seed = buffer.seed if taskset.data_selector.seed is None else taskset.data_selector.seed
    taskset.batch_size = buffer.batch_size
    taskset.total_epochs = 1 if is_eval else buffer.total_epochs
    taskset.total_steps = None if is_eval else buffer.total_steps
    taskset.ray_namespace = taskset.ray_namespace or config.ray_namespace
    taskset.tokenizer_path = config.model.model_path
    rollout = taskset.rollout_args
    for key in ("temperature", "top_p", "top_k", "logprobs"):
        if getattr(rollout, key) is None:
            setattr(rollout, key, getattr(config.model, key))
    rollout.max_tokens = rollout.max_tokens or config.model.max_response_tokens
    rollout.n = taskset.repeat_times
    plugin_ok(issues, Kind.BUFFER_STORAGE, taskset.storage_type, f"{path}.storage_type")
    selector = taskset.data_selector.selector_type
    plugin_ok(issues, Kind.TASK_SELECTOR, selector, f"{path}.data_selector.selector_type")
    if not _explorer_runs(config):
        return
    if not (taskset.path or taskset.task_dir):  # a task_dir in error is reported as such
        # Trinity-RFT's benchmark templates leave it empty for a script to fill: they check, they do not run
        issues.refuse_at_run(f"{path}.path", "required: the file, folder or dataset of the tasks (or a task_dir)")
    if taskset.default_workflow_type is None and not taskset.format.workflow_key:
        issues.add(
            f"{path}.default_workflow_type",
            f"no workflow at any level (taskset, buffer.explorer_input, buffer): name one "
            f"(installed workflows: {', '.join(get_registry().names(Kind.WORKFLOW)) or 'none'})",
        )
    elif taskset.default_workflow_type is not None:
        keys = ("default_workflow_type", "workflow_args")
        _check_named(Kind.WORKFLOW, taskset.default_workflow_type, taskset.workflow_args, path, keys, issues)
    if taskset.default_reward_fn_type is not None:
        keys = ("default_reward_fn_type", "reward_fn_args")
        _check_named(Kind.REWARD_FN, taskset.default_reward_fn_type, taskset.reward_fn_args, path, keys, issues)


def _check_named(kind: Kind, name: str, args: dict, path: str, keys: tuple[str, str], issues: IssueCollector) -> None:
    """A workflow or reward function by name (or dotted ``module.Class`` path) and its args.

    The implementation is imported only when args are given, to validate them with its ``Args``.
    """
    name_key, args_key = keys
    if plugin_ok(issues, kind, name, f"{path}.{name_key}") and args:
        target = _plugin(issues, kind, name, f"{path}.{name_key}")
        if target is not None:
            plugin_args(target, args, f"{path}.{args_key}", issues)


def _data_schema(config: Config) -> str | None:
    """What the trainer reads: ``rollout`` experiences, or ``sft`` / ``dpo`` data (the algorithm's)."""
    if config.algorithm.algorithm_type not in get_registry().names(Kind.ALGORITHM_TYPE):
        return None  # reported by check_algorithm
    return resolve(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type).data_schema


def _check_experience_buffer(config: Config, issues: IssueCollector) -> None:
    buffer, trainer_input = config.buffer, config.buffer.trainer_input
    if config.mode == "bench":
        return
    if trainer_input.experience_buffer is None:
        trainer_input.experience_buffer = ExperienceBufferConfig(name=DEFAULT_EXPERIENCE_BUFFER)
    experience = trainer_input.experience_buffer
    experience.name = experience.name or DEFAULT_EXPERIENCE_BUFFER
    if experience.storage_type == "file" and config.in_one_run:
        issues.warn(
            "buffer.trainer_input.experience_buffer.storage_type",
            f"a file cannot pass experiences within one run (mode {config.mode}): using queue",
        )
        experience.storage_type = "queue"
    if experience.storage_type == "queue" and not experience.path and not config.in_one_run:
        # Explorer and trainer run as separate processes: they meet through this file.
        experience.path = str(Path(buffer.cache_dir) / f"{experience.name}.db")
    plugin_ok(
        issues, Kind.BUFFER_STORAGE, experience.storage_type, "buffer.trainer_input.experience_buffer.storage_type"
    )
    _check_replay_buffer(experience, "buffer.trainer_input.experience_buffer", issues)
    _check_trust_pickled_rows(experience, "buffer.trainer_input.experience_buffer", issues)
    experience.batch_size = buffer.train_batch_size
    experience.total_epochs, experience.total_steps = buffer.total_epochs, buffer.total_steps
    experience.tokenizer_path = config.model.model_path
    schema = _data_schema(config)
    if experience.schema_type not in (None, schema, *(("experience", "task") if schema == "rollout" else ())):
        issues.warn(
            "buffer.trainer_input.experience_buffer.schema_type",
            f"algorithm '{config.algorithm.algorithm_type}' trains on {schema} data, not {experience.schema_type}: "
            f"using {schema}",
        )
    experience.schema_type = schema
    experience.ray_namespace = experience.ray_namespace or config.ray_namespace
    experience.durability = buffer.durability
    experience.format.chat_template = experience.format.chat_template or config.model.custom_chat_template
    if experience.format.enable_thinking is None:
        experience.format.enable_thinking = config.model.enable_thinking
    buffer.explorer_output = experience.model_dump()
    for key, aux in trainer_input.auxiliary_buffers.items():
        path = f"buffer.trainer_input.auxiliary_buffers.{key}"
        aux.name = aux.name or key
        aux.batch_size = buffer.train_batch_size
        aux.tokenizer_path = config.model.model_path
        aux.ray_namespace = aux.ray_namespace or config.ray_namespace
        aux.durability = buffer.durability
        if not aux.path:
            issues.add(f"{path}.path", "required: the data of the auxiliary buffer")
        if aux.schema_type not in (None, "sft"):
            issues.no_effect(f"{path}.schema_type", f"auxiliary buffers are read as SFT data, not {aux.schema_type}")
        plugin_ok(issues, Kind.BUFFER_STORAGE, aux.storage_type, f"{path}.storage_type")
        _check_trust_pickled_rows(aux, path, issues)
    config.data_processor.experience_pipeline.output = experience


def _check_trust_pickled_rows(storage: ExperienceBufferConfig, path: str, issues: IssueCollector) -> None:
    """Only a database (sql, or a queue kept in one) can hold an older trinity's pickled rows."""
    in_database = storage.storage_type == "sql" or (
        storage.storage_type == "queue" and storage.path and not storage.jsonl_file
    )
    if storage.trust_pickled_rows and not in_database:
        issues.no_effect(
            f"{path}.trust_pickled_rows",
            f"only a database holds pickled rows; this buffer is {storage.storage_type} "
            f"{'at ' + storage.path if storage.path else 'in memory'}",
        )


def _check_replay_buffer(experience: ExperienceBufferConfig, path: str, issues: IssueCollector) -> None:
    """The priority function is installed and its args fit its ``Args``; replay needs a queue."""
    replay, path = experience.replay_buffer, f"{path}.replay_buffer"
    if not replay.enable:
        for key in sorted(replay.model_fields_set - {"enable"}):
            issues.no_effect(f"{path}.{key}", "replay_buffer.enable is false")
        return
    if experience.storage_type != "queue":
        issues.no_effect(f"{path}.enable", f"priority replay needs storage_type queue, not {experience.storage_type}")
        return
    priority_fn = _plugin(issues, Kind.PRIORITY_FN, replay.priority_fn, f"{path}.priority_fn")
    if priority_fn is not None:
        replay.priority_fn_args = plugin_args(priority_fn, replay.priority_fn_args, f"{path}.priority_fn_args", issues)


def check_trainer(config: Config, issues: IssueCollector) -> None:
    trainer = config.trainer
    trainer.trust_remote_code = config.model.trust_remote_code
    if _trainer_runs(config) and trainer.trainer_type != TINKER:  # refused by check_tinker
        known = plugin_ok(issues, Kind.TRAINER_ENGINE, trainer.trainer_type, "trainer.trainer_type")
        engine = resolve(Kind.TRAINER_ENGINE, trainer.trainer_type) if known and trainer.grad_offload else None
        if engine is not None and not getattr(engine, "offloads_gradients", False):
            issues.add(
                "trainer.grad_offload",
                f"trainer_type '{trainer.trainer_type}' offloads no gradients of its own: use trainer.param_offload "
                "or offload_policy (they move gradients with the parameters), or trainer_type torch",
            )
        _check_expert_buffer(config, issues)
    if trainer.trainer_strategy == "megatron":
        issues.add("trainer.trainer_strategy", "megatron is not available in trinity: use fsdp or fsdp2")
    if trainer.trainer_config and trainer.trainer_config_path:
        issues.add("trainer.trainer_config_path", "give either trainer_config or trainer_config_path, not both")
    elif trainer.trainer_config_path:
        import yaml

        try:
            trainer.trainer_config = yaml.safe_load(Path(trainer.trainer_config_path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            issues.add("trainer.trainer_config_path", f"cannot read {trainer.trainer_config_path}: {exc}")
        if not isinstance(trainer.trainer_config, dict):
            issues.add("trainer.trainer_config_path", f"expected a mapping in {trainer.trainer_config_path}")
            trainer.trainer_config = None
    if trainer.total_steps is None:
        trainer.total_steps = config.buffer.total_steps
    _derive_token_budget(config, issues)


def _derive_token_budget(config: Config, issues: IssueCollector) -> None:
    """``max_token_len_per_gpu``: ceil(2 x max_model_len / sequence parallel size), as Trinity-RFT;
    with the torch engine at least ``TORCH_TOKEN_BUDGET``.

    Ulysses sequence parallelism splits each sample across its ranks, so a rank needs room for
    ``max_model_len / ulysses_sequence_parallel_size`` tokens of a full-length sample. The torch
    engine runs small models on a CPU or one GPU, where each micro-batch's fixed cost outweighs
    its memory: Trinity-RFT's budget cut the quickstart's 128 rows of 38 tokens into 64
    micro-batches and made its trainer step 5x slower.
    """
    trainer, max_len = config.trainer, config.model.max_model_len
    if max_len is None:
        return
    parallel = trainer.ulysses_sequence_parallel_size
    if trainer.max_token_len_per_gpu is None:
        budget = math.ceil(2 * max_len / parallel)
        trainer.max_token_len_per_gpu = max(budget, TORCH_TOKEN_BUDGET) if trainer.trainer_type == "torch" else budget
    elif trainer.max_token_len_per_gpu * parallel < max_len:
        issues.warn(
            "trainer.max_token_len_per_gpu",
            f"{trainer.max_token_len_per_gpu} x ulysses_sequence_parallel_size {parallel} is below "
            f"model.max_model_len {max_len}: a full-length sample will not fit a micro-batch",
        )


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
    "data_processor": DataProcessorConfig,
    "explorer": ExplorerConfig,
    "trainer": TrainerConfig,
}


def check_data_processor(config: Config, issues: IssueCollector) -> None:
    """Every experience operator is installed and its args fit its ``Args``; the task
    pipeline writes the first taskset unless it names its output, and has Data-Juicer."""
    for i, operator in enumerate(config.data_processor.experience_pipeline.operators):
        path = f"data_processor.experience_pipeline.operators[{i}]"
        target = _plugin(issues, Kind.EXPERIENCE_OPERATOR, operator.name, f"{path}.name")
        if target is not None:
            if config.service.data_juicer is not None and "service_config" in target.Args.model_fields:
                operator.args["service_config"] = config.service.data_juicer.model_dump()
            operator.args = plugin_args(target, operator.args, f"{path}.args", issues)
    tasks, service = config.data_processor.task_pipeline, config.service.data_juicer
    if tasks is None or not _explorer_runs(config):
        return
    if (service is None or service.auto_start) and importlib.util.find_spec("data_juicer") is None:
        issues.add("data_processor.task_pipeline", 'needs Data-Juicer: pip install "trinity-core[data-juicer]"')
    if tasks.output is not None:
        return
    if config.buffer.explorer_input.tasksets:
        tasks.output = config.buffer.explorer_input.tasksets[0]
    else:
        issues.add("data_processor.task_pipeline.output", "no taskset to write: set output or a taskset")


def check_stages(config: Config, issues: IssueCollector) -> None:
    names: set[str] = set()
    for i, stage in enumerate(config.stages):
        path = f"stages[{i}]"
        if not stage.stage_name:
            issues.add(f"{path}.stage_name", "required: it names the stage's checkpoint directory")
        elif stage.stage_name in names:
            issues.add(f"{path}.stage_name", f"'{stage.stage_name}' is used twice; stage names must be unique")
        names.add(stage.stage_name)
        for section, cls in _STAGE_SECTIONS.items():
            if getattr(stage, section) is not None:
                validate_section(cls, getattr(stage, section), f"{path}.{section}", issues)


CHECKS = (
    check_global,
    check_monitor,
    check_algorithm,
    check_tinker,
    check_model,
    check_cluster,
    plugin_defaults,
    check_synchronizer,
    check_intervals,
    check_explorer,
    check_lora,
    check_buffer,
    check_trainer,
    check_gpu_memory,
    check_data_processor,
    check_stages,
    plugin_checks,
)


def check_config(config: Config, issues: IssueCollector) -> Config:
    """Validate and derive in place, in the order of ``CHECKS``; returns ``config``."""
    for check in CHECKS:
        check(config, issues)
    return config
