"""The checker: reads a derived ``Config`` and reports every problem under its dotted key.

Runs after ``trinity.config.derive`` and never writes to the config. Plugin names are checked
through the plugin registry (an unknown name gets the registry's message), and each plugin checks
the settings that name it (``trinity_check_config``): this module names no sibling's plugin. A
rule stricter than Trinity-RFT's is a warning (see docs/config.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from trinity.common.http_guard import is_loopback
from trinity.config.base import PluginArgs, changed_keys
from trinity.config.load import IssueCollector, validate_section
from trinity.config.memory import check_gpu_memory
from trinity.config.rules import (
    ALGORITHM_FNS,
    TINKER,
    explorer_gpu_problem,
    explorer_runs,
    gpu_arithmetic,
    lora_engines,
    plugin_args,
    registered,
    trainer_runs,
)
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

TINKER_REFUSAL = (
    "needs the hosted Tinker service (Thinking Machines' training API, reached with the `tinker` client): "
    "trinity has no Tinker backend and no local server speaks its protocol; train here with "
    "trainer_type verl or torch and engine_type vllm or transformers (model.lora_configs for a LoRA run)"
)

MEGATRON_REFUSAL = (
    "Megatron-Core parallelism, which trinity has no trainer for (trainer_strategy megatron is refused): leave it "
    "at its default and use FSDP (trainer_strategy fsdp or fsdp2), which shards the model over the trainer's GPUs, "
    "with trainer.ulysses_sequence_parallel_size to split long sequences"
)

ENGINE_PARALLEL_KEYS = (
    "tensor_parallel_size",
    "data_parallel_size",
    "pipeline_parallel_size",
    "enable_expert_parallel",
)
"""The inference model's keys that spread one engine over several GPUs: an engine that acts on them says
so (``takes_parallel_keys``); set for another, they are refused."""


def plugin_ok(issues: IssueCollector, kind: Kind, name: str, path: str) -> bool:
    """Whether ``name`` is registered for ``kind`` (imports nothing); if not, the issue."""
    try:
        get_registry().check(kind, name, config_key=path)
    except PluginError as exc:
        issues.add(path, str(exc).removeprefix(f"{path} "))
        return False
    return True


_IMPORTS_DOTTED_PATHS: ContextVar[bool] = ContextVar("trinity_check_imports_dotted_paths", default=False)


@contextlib.contextmanager
def importing_dotted_paths(allowed: bool = True) -> Iterator[None]:
    """Within it (a config about to run: ``trinity run`` imports them anyway), the check imports the
    dotted ``module.Class`` paths a config names, to validate their arguments. Outside it, a check
    imports nothing a config names: only registered plugins, which are installed code."""
    token = _IMPORTS_DOTTED_PATHS.set(allowed)
    try:
        yield
    finally:
        _IMPORTS_DOTTED_PATHS.reset(token)


def may_import(kind: Kind, name: str) -> bool:
    """Whether the check may import ``name``: a registered plugin, or any name within ``importing_dotted_paths``."""
    return _IMPORTS_DOTTED_PATHS.get() or name in get_registry().names(kind)


def resolved_plugin(issues: IssueCollector, kind: Kind, name: str, path: str) -> Any:
    """The implementation of ``name`` (imported), or None with the issue recorded; None with a
    warning for a dotted path that the check may not import (``may_import``)."""
    if not plugin_ok(issues, kind, name, path):
        return None
    if not may_import(kind, name):
        issues.warn(path, f"'{name}' is a dotted path: not imported by the check; trinity run imports and checks it")
        return None
    try:
        return resolve(kind, name)
    except PluginError as exc:
        issues.add(path, str(exc))
        return None


# --- the checks ---------------------------------------------------------------------------


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
        model = getattr(resolved_plugin(issues, Kind.MONITOR, name, "monitor.monitor_type"), "Args", None)
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
    """The algorithm type and its functions are installed; a group-comparing one has groups."""
    algo_cfg = config.algorithm
    algorithm = resolved_plugin(issues, Kind.ALGORITHM_TYPE, algo_cfg.algorithm_type, "algorithm.algorithm_type")
    if algorithm is None:  # the functions named explicitly are still checked: all errors at once
        for field_name, kind in ALGORITHM_FNS.items():
            if getattr(algo_cfg, field_name):
                plugin_ok(issues, kind, getattr(algo_cfg, field_name), f"algorithm.{field_name}")
        return
    compares_group = algorithm.requires_repeat_times_gt_1 and algo_cfg.advantage_fn in (None, algorithm.advantage_fn)
    if compares_group and algo_cfg.repeat_times < 2 and config.mode in ("both", "explore", "colocate"):
        issues.add(  # Trinity-RFT runs it, training on nothing: every advantage is 0
            "algorithm.repeat_times",
            f"algorithm '{algorithm.name}' compares several rollouts of a task, and repeat_times is "
            f"{algo_cfg.repeat_times}: every advantage would be 0; set algorithm.repeat_times to 2 or more",
        )
    for field_name, kind in ALGORITHM_FNS.items():
        resolved_plugin(issues, kind, getattr(algo_cfg, field_name), f"algorithm.{field_name}")
    check_rollout_correction(config, issues)
    check_router_replay(config, issues)


def check_router_replay(config: Config, issues: IssueCollector) -> None:
    """Router replay (R3) needs a rollout engine that records the MoE routing and a trainer that
    replays it (``records_routing`` / ``replays_routing``); an unknown engine is reported elsewhere."""
    if not config.algorithm.enable_router_replay:
        return
    engines = []
    if explorer_runs(config):
        engine = config.explorer.rollout_model.engine_type
        engines.append((Kind.ROLLOUT_ENGINE, engine, "explorer.rollout_model.engine_type", "records", "transformers"))
    if trainer_runs(config):
        engines.append((Kind.TRAINER_ENGINE, config.trainer.trainer_type, "trainer.trainer_type", "replays", "torch"))
    lacking = [
        f"{key} '{name}' {verb} no MoE routing (use '{works}')"
        for kind, name, key, verb, works in engines
        if (engine := registered(kind, name)) is not None and not getattr(engine, f"{verb}_routing", False)
    ]
    if lacking:
        issues.add(
            "algorithm.enable_router_replay",
            f"router replay (R3): {'; '.join(lacking)}; docs/algorithms.md says why. Or set it to false",
        )


def check_rollout_correction(config: Config, issues: IssueCollector) -> None:
    """``algorithm.rollout_correction`` against verl's rules."""
    algo = config.algorithm
    rc = algo.rollout_correction
    if rc is None:
        return
    path = "algorithm.rollout_correction"
    if rc.rollout_rs is not None:
        if rc.rollout_rs_threshold is None:
            issues.add(f"{path}.rollout_rs_threshold", f"rollout_rs {rc.rollout_rs!r} needs a threshold")
        else:
            try:
                parse_rs_thresholds(parse_rs_options(rc.rollout_rs), rc.rollout_rs_threshold)
            except ValueError as exc:
                issues.add(f"{path}.rollout_rs_threshold", str(exc))
    if rc.bypass_mode and rc.loss_type == "ppo_clip" and rc.rollout_is is not None:
        issues.warn(
            f"{path}.rollout_is",
            "in bypass mode with loss_type ppo_clip the importance weights are only logged (as in verl: the PPO "
            "ratio to the rollout policy corrects already); set loss_type: reinforce, or bypass_mode: false to "
            "recompute the old logprobs and weight the loss",
        )


def check_tinker(config: Config, issues: IssueCollector) -> None:
    """Tinker, Trinity-RFT's hosted backend: any of it (the switch, a ``model.tinker`` key, a
    ``tinker`` engine or trainer type) is refused at ``trinity run``, a warning at ``config check``."""
    tinker = config.model.tinker
    if tinker.enable:
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
    if model.external_model.enable and config.mode != "bench":
        issues.add("model.external_model.enable", f"an external model is evaluated in mode bench, not {config.mode}")
    if not model.model_path and not model.external_model.enable:
        issues.add("model.model_path", "required: the path (or hub id) of the model to train")
    check_token_limits(model, "model", issues)
    for path, inference in config.explorer.inference_models():
        if not inference.model_path:
            issues.add(f"{path}.model_path", "required for an auxiliary model")
        if inference is not config.explorer.rollout_model:
            # Trinity-RFT checks no auxiliary model's limits: its templates may leave them inconsistent
            check_token_limits(inference, path, issues, over_the_limit=issues.refuse_at_run)
        if not inference.use_v1:
            issues.refuse_at_run(f"{path}.use_v1", "vLLM removed its V0 engine in 0.11: trinity runs V1 (use_v1: true)")


def check_token_limits(
    model: Any, path: str, issues: IssueCollector, over_the_limit: Callable[[str, str], None] | None = None
) -> None:
    """Prompt and response within max_model_len (reported with ``over_the_limit``, default an
    error), and room for min_response_tokens. A limit the derivation could not fill was reported there."""
    total, prompt, response = model.max_model_len, model.max_prompt_tokens, model.max_response_tokens
    if total is None or prompt is None or response is None:
        return
    if prompt + response > total:
        (over_the_limit or issues.add)(
            f"{path}.max_model_len",
            f"max_prompt_tokens {prompt} + max_response_tokens {response} = {prompt + response} "
            f"exceeds max_model_len {total}",
        )
        return
    minimum = model.min_response_tokens
    if minimum is not None and minimum > response:  # Trinity-RFT lowers it; more than the maximum is a mistake
        issues.add(
            f"{path}.min_response_tokens",
            f"{minimum} is more than max_response_tokens {response}: lower {path}.min_response_tokens "
            f"or raise {path}.max_response_tokens",
        )


def check_lora(config: Config, issues: IssueCollector) -> None:
    """One adapter, each trainable and its folder a peft adapter; both engines must take it."""
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
    rollout = config.explorer.rollout_model
    if not rollout.engine_type.startswith("vllm"):  # vLLM's own LoRA settings; other engines hold the adapter
        vllm_only = {
            "model.fully_sharded_loras": model.fully_sharded_loras,
            "model.max_cpu_loras": model.max_cpu_loras is not None,
            **{f"{path}[{i}].lora_dtype": c.lora_dtype != "auto" for i, c in enumerate(model.lora_configs)},
        }
        for key in (key for key, set_ in vllm_only.items() if set_):
            issues.no_effect(
                key, f"read by the vLLM engine only (explorer.rollout_model.engine_type is '{rollout.engine_type}')"
            )
    known, lacking = lora_engines(config)
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


def check_runtime_lora(config: Config, issues: IssueCollector) -> None:
    """``enable_runtime_lora_updating`` serves the rollout model's adapter on vLLM's OpenAI endpoint:
    set where there is no adapter, no such engine or no endpoint, it warns."""
    for path, model in config.explorer.inference_models():
        if not model.enable_runtime_lora_updating:
            continue
        key = f"{path}.enable_runtime_lora_updating"
        if path != "explorer.rollout_model":
            issues.no_effect(key, "the LoRA adapter (model.lora_configs) is the rollout model's only")
        elif not model.enable_lora:
            issues.no_effect(key, "it serves the LoRA adapter of model.lora_configs, and the rollout model holds none")
        elif not model.engine_type.startswith("vllm"):
            issues.no_effect(key, f"read by the vLLM engine only ({path}.engine_type is '{model.engine_type}')")
        elif not model.enable_openai_api:
            issues.no_effect(key, f"it serves the LoRA adapter on the OpenAI endpoint: set {path}.enable_openai_api")


def check_cluster(config: Config, issues: IssueCollector) -> None:
    """The GPU split of Trinity-RFT: explorer engines first, the rest (whole nodes) to the trainer."""
    cluster = config.cluster
    if cluster.single_process:
        _check_single_process(config, issues)
    if config.model.tinker.enable or not cluster.node_num * cluster.gpu_per_node:  # no local GPU to split
        return
    problem = explorer_gpu_problem(config)
    if problem:
        issues.add(*problem)
    elif cluster.trainer_gpu_num > cluster.gpu_per_node and cluster.trainer_gpu_num % cluster.gpu_per_node:
        issues.add(
            "cluster",
            f"the trainer must get whole nodes: {gpu_arithmetic(config)} leaves {cluster.trainer_gpu_num}, "
            f"not a multiple of gpu_per_node {cluster.gpu_per_node}",
        )


def _check_single_process(config: Config, issues: IssueCollector) -> None:
    """A single-process run has no Ray: one machine's CPU, and roles whose engines compute in the role's own process."""
    cluster, why = config.cluster, []
    if cluster.ray_address != "auto":
        why.append(f"it joins no Ray cluster (cluster.ray_address is {cluster.ray_address!r}: leave it at auto)")
    if cluster.node_num > 1 or cluster.gpu_per_node:
        why.append("it runs on this machine's CPU (set cluster.node_num 1 and gpu_per_node 0)")
    if config.mode not in ("both", "train", "explore"):
        why.append(f"it runs modes both, train and explore, not {config.mode!r}")
    if config.monitor.enable_ray_timeline:
        why.append("it has no Ray timeline (monitor.enable_ray_timeline)")
    if explorer_runs(config):
        for path, model in config.explorer.inference_models():
            engine = registered(Kind.ROLLOUT_ENGINE, model.engine_type)
            if engine is not None and not engine.in_explorer_process:
                why.append(f"{path}.engine_type {model.engine_type!r} starts Ray actors of its own (use transformers)")
    trainer = registered(Kind.TRAINER_ENGINE, config.trainer.trainer_type) if trainer_runs(config) else None
    if trainer is not None and not trainer.in_trainer_process:
        why.append(f"trainer.trainer_type {config.trainer.trainer_type!r} starts Ray actors of its own (use torch)")
    if why:
        issues.add(
            "cluster.single_process",
            "a single-process run has no Ray, so " + "; ".join(why) + "; or set single_process false",
        )


def plugin_checks(config: Config, issues: IssueCollector) -> None:
    """Each plugin checks the settings that name it, on the derived config."""
    plugin_hooks().trinity_check_config(config=config, issues=issues)


def check_synchronizer(config: Config, issues: IssueCollector) -> None:
    sync = config.synchronizer
    plugin_ok(issues, Kind.SYNC_METHOD, sync.sync_method, "synchronizer.sync_method")
    if sync.partial_rollout:
        _check_partial_rollout(config, issues)
    if sync.sync_style == "fully_async" and config.buffer.explorer_input.eval_tasksets:
        issues.add(
            "buffer.explorer_input.eval_tasksets",
            "the fully_async sync style does not evaluate: remove the eval tasksets",
        )


def _check_partial_rollout(config: Config, issues: IssueCollector) -> None:
    """Partial rollout acts where weights load while generations run (fully_async's loads before
    each batch, the batches before it still sampling), on an engine that can pause them."""
    style = config.synchronizer.sync_style
    if style != "fully_async":
        issues.add(
            "synchronizer.partial_rollout",
            f"sync_style {style!r} loads weights only when no generation is in flight, so nothing would be "
            "paused: use sync_style fully_async, or leave partial_rollout off",
        )
    engine_type = config.explorer.rollout_model.engine_type
    engine = registered(Kind.ROLLOUT_ENGINE, engine_type)
    if explorer_runs(config) and engine is not None and not engine.takes_partial_rollout:
        issues.add(
            "synchronizer.partial_rollout",
            f"explorer.rollout_model.engine_type {engine_type!r} cannot pause its generations for new weights: "
            "use engine_type transformers or vllm (trinity-vllm), or leave partial_rollout off",
        )


def check_explorer(config: Config, issues: IssueCollector) -> None:
    explorer = config.explorer
    for path, model in explorer.inference_models():
        if explorer_runs(config) and model.engine_type != TINKER:  # refused by check_tinker
            plugin_ok(issues, Kind.ROLLOUT_ENGINE, model.engine_type, f"{path}.engine_type")
            _check_engine_parallelism(model, path, issues)
    if explorer_runs(config):
        check_doors(explorer, issues)
    over = explorer.over_rollout
    if (over.ratio > 0 or over.return_partial_tasks) and config.synchronizer.sync_style == "fixed":
        issues.add(
            "explorer.over_rollout",
            "over_rollout does not work with sync_style fixed: use explorer_driven, trainer_driven or fully_async",
        )


def _check_engine_parallelism(model: InferenceModelConfig, path: str, issues: IssueCollector) -> None:
    """Tensor, data, pipeline or expert parallelism needs an engine that spreads over GPUs (an unknown or
    dotted engine is reported, or checked at run, elsewhere)."""
    changed = changed_keys(model, ENGINE_PARALLEL_KEYS)
    engine = registered(Kind.ROLLOUT_ENGINE, model.engine_type) if changed else None
    if engine is None or getattr(engine, "takes_parallel_keys", False):
        return
    for key in changed:
        issues.add(
            f"{path}.{key}",
            f"engine_type '{model.engine_type}' does not spread one engine over several GPUs: leave it at its "
            "default and add engines with engine_num, or use engine_type vllm, which takes it",
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
    """Tasksets: present when exploring, uniquely named, their plugins installed; then the experience buffer."""
    inputs = config.buffer.explorer_input
    if explorer_runs(config) and config.mode not in ("bench", "serve") and not inputs.tasksets:
        issues.add("buffer.explorer_input.tasksets", f"mode '{config.mode}' explores: give a taskset")
    for group, tasksets in (("tasksets", inputs.tasksets), ("eval_tasksets", inputs.eval_tasksets)):
        seen: dict[str, str] = {}  # names are unique within a group (a train and an eval set may share one)
        for i, taskset in enumerate(tasksets):
            path = inputs.taskset_key(group, i)
            if taskset.name in seen:
                issues.add(
                    f"{path}.name", f"'{taskset.name}' is also the name of {seen[taskset.name]}; names must be unique"
                )
            seen[taskset.name] = path
            _check_taskset(config, taskset, path, issues)
    _check_experience_buffer(config, issues)


def _check_taskset(config: Config, taskset: TasksetConfig, path: str, issues: IssueCollector) -> None:
    plugin_ok(issues, Kind.BUFFER_STORAGE, taskset.storage_type, f"{path}.storage_type")
    selector = taskset.data_selector.selector_type
    plugin_ok(issues, Kind.TASK_SELECTOR, selector, f"{path}.data_selector.selector_type")
    if not explorer_runs(config):
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
        target = resolved_plugin(issues, kind, name, f"{path}.{name_key}")
        if target is not None:
            plugin_args(target, args, f"{path}.{args_key}", issues)


def _check_experience_buffer(config: Config, issues: IssueCollector) -> None:
    trainer_input = config.buffer.trainer_input
    if config.mode == "bench":
        return
    experience = trainer_input.experience_buffer
    path = "buffer.trainer_input.experience_buffer"
    plugin_ok(issues, Kind.BUFFER_STORAGE, experience.storage_type, f"{path}.storage_type")
    _check_replay_buffer(experience, path, issues)
    _check_trust_pickled_rows(experience, path, issues)
    for key, aux in trainer_input.auxiliary_buffers.items():
        path = f"buffer.trainer_input.auxiliary_buffers.{key}"
        if not aux.path:
            issues.add(f"{path}.path", "required: the data of the auxiliary buffer")
        if aux.schema_type not in (None, "sft"):
            issues.no_effect(f"{path}.schema_type", f"auxiliary buffers are read as SFT data, not {aux.schema_type}")
        plugin_ok(issues, Kind.BUFFER_STORAGE, aux.storage_type, f"{path}.storage_type")
        _check_trust_pickled_rows(aux, path, issues)


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
    """The priority function is installed; replay needs a queue."""
    replay, path = experience.replay_buffer, f"{path}.replay_buffer"
    if not replay.enable:
        for key in sorted(replay.model_fields_set - {"enable"}):
            issues.no_effect(f"{path}.{key}", "replay_buffer.enable is false")
        return
    if experience.storage_type != "queue":
        issues.no_effect(f"{path}.enable", f"priority replay needs storage_type queue, not {experience.storage_type}")
        return
    resolved_plugin(issues, Kind.PRIORITY_FN, replay.priority_fn, f"{path}.priority_fn")


def check_trainer(config: Config, issues: IssueCollector) -> None:
    trainer = config.trainer
    if trainer_runs(config) and trainer.trainer_type != TINKER:  # refused by check_tinker
        known = plugin_ok(issues, Kind.TRAINER_ENGINE, trainer.trainer_type, "trainer.trainer_type")
        importable = known and may_import(Kind.TRAINER_ENGINE, trainer.trainer_type)
        engine = resolve(Kind.TRAINER_ENGINE, trainer.trainer_type) if importable and trainer.grad_offload else None
        if engine is not None and not getattr(engine, "offloads_gradients", False):
            issues.add(
                "trainer.grad_offload",
                f"trainer_type '{trainer.trainer_type}' offloads no gradients of its own: use trainer.param_offload "
                "or offload_policy (they move gradients with the parameters), or trainer_type torch",
            )
        _check_expert_buffer(config, issues)
    algorithm = registered(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type)
    if trainer.critic_warmup and algorithm is not None and not algorithm.use_critic:
        issues.warn(
            "trainer.critic_warmup",
            f"algorithm_type '{config.algorithm.algorithm_type}' has no critic to warm up: the actor trains "
            "from the first step",
        )
    if trainer.trainer_strategy == "megatron":
        issues.add("trainer.trainer_strategy", "megatron is not available in trinity: use fsdp or fsdp2")
    for key in changed_keys(trainer.megatron):
        issues.add(f"trainer.megatron.{key}", MEGATRON_REFUSAL)
    max_len, parallel = config.model.max_model_len, trainer.ulysses_sequence_parallel_size
    if max_len is not None and trainer.max_token_len_per_gpu * parallel < max_len:
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
    if reads and explorer_runs(config) and trainer_runs(config):
        _check_rollouts_per_step(config, reads[1], issues)


def _check_rollouts_per_step(config: Config, expert_rows: int, issues: IssueCollector) -> None:
    """With expert rows in each train batch, the trainer reads fewer rollouts a step than the
    explorer writes unless ``train_batch_size`` makes room for both: then every step trains on
    rollouts older than the last (staleness grows by one every few steps) and learning stalls."""
    buffer = config.buffer
    written, read = buffer.batch_size * config.algorithm.repeat_times, buffer.train_batch_size - expert_rows
    if 0 < read < written:
        matching = math.ceil(written / (read / buffer.train_batch_size))
        issues.warn(
            "buffer.train_batch_size",
            f"{buffer.train_batch_size} rows a step, {expert_rows} of them expert data, read {read} of the "
            f"{written} rollouts the explorer writes a step (batch_size x repeat_times): the rollouts pile up "
            f"and each step trains on staler ones; {matching} reads them all",
        )


_STAGE_SECTIONS = {
    "algorithm": AlgorithmConfig,
    "buffer": BufferConfig,
    "data_processor": DataProcessorConfig,
    "explorer": ExplorerConfig,
    "trainer": TrainerConfig,
}


def check_data_processor(config: Config, issues: IssueCollector) -> None:
    """Every experience operator is installed; the task pipeline has Data-Juicer."""
    for i, operator in enumerate(config.data_processor.experience_pipeline.operators):
        path = f"data_processor.experience_pipeline.operators[{i}]"
        resolved_plugin(issues, Kind.EXPERIENCE_OPERATOR, operator.name, f"{path}.name")
    tasks, service = config.data_processor.task_pipeline, config.service.data_juicer
    if tasks is None or not explorer_runs(config):
        return
    if (service is None or service.auto_start) and importlib.util.find_spec("data_juicer") is None:
        issues.add("data_processor.task_pipeline", 'needs Data-Juicer: pip install "trinity-core[data-juicer]"')


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
    check_monitor,
    check_algorithm,
    check_tinker,
    check_model,
    check_cluster,
    check_synchronizer,
    check_explorer,
    check_lora,
    check_runtime_lora,
    check_buffer,
    check_trainer,
    check_gpu_memory,
    check_data_processor,
    check_stages,
    plugin_checks,
)


def check_config(config: Config, issues: IssueCollector) -> None:
    """Report every problem of a derived config, in the order of ``CHECKS``; writes nothing."""
    for check in CHECKS:
        check(config, issues)
