"""The derivation: fills a loaded ``Config``'s unset and derived values, before it is checked.

Runs in a fixed order (job, algorithm, models, cluster, plugin defaults, synchronizer, explorer,
buffer, trainer) because later steps read what earlier ones filled, following Trinity-RFT's
config validators. It reports what stops a value from being derived (an unreadable file, two
sources of one value, plugin args that do not parse) and warns of every value it changes, such
as a job renamed because its folder is not empty; ``trinity.config.check`` reports the rest
(both read the shared rules of ``trinity.config.rules``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from trinity.common.files import DATA_FILE_BUILDERS
from trinity.config.load import IssueCollector
from trinity.config.rules import (
    ALGORITHM_FNS,
    TINKER,
    engine_gpus,
    explorer_gpu_problem,
    explorer_runs,
    lora_engines,
    model_gpus,
    plugin_args,
    registered,
)
from trinity.config.schema import Config, ExperienceBufferConfig, TasksetConfig
from trinity.plugins import Kind
from trinity.plugins.manager import plugin_hooks

DEFAULT_EXPERIENCE_BUFFER = "experience_buffer"
TORCH_TOKEN_BUDGET = 16384
"""The torch engine's least default ``trainer.max_token_len_per_gpu`` (verl's own ``ppo_max_token_len_per_gpu`` default)."""


def derive_job(config: Config, issues: IssueCollector) -> None:
    """The job folder ``<root>/<project>/<group>/<name>`` (absolute) and the Ray namespace.

    A job folder that is not empty is never reused silently: bench mode evaluates its
    checkpoints, any other mode starts a job renamed with a timestamp, and both say so.
    """
    root = Path(config.checkpoint_root_dir or ".").expanduser()
    job_dir = (root / config.project / config.group / config.name).absolute()
    if not config.continue_from_checkpoint and _non_empty(job_dir):
        if config.mode == "bench":
            issues.warn("continue_from_checkpoint", "bench mode evaluates the existing checkpoints: set to true")
            config.continue_from_checkpoint = True
        else:
            old, config.name = config.name, _renamed(job_dir)
            issues.warn(
                "name",
                f"renamed '{old}' -> '{config.name}': {job_dir} is not empty and continue_from_checkpoint is false "
                "(set it to true to resume there)",
            )
            job_dir = job_dir.with_name(config.name)
    config.checkpoint_job_dir = str(job_dir)
    config.log.save_dir = str(job_dir / "log")
    config.monitor.cache_dir = str(job_dir / "monitor")
    config.buffer.cache_dir = str(job_dir / "buffer")
    if not config.ray_namespace:
        config.ray_namespace = "/".join(part for part in (config.project, config.group, config.name) if part)


_RENAMES: dict[Path, str] = {}


def _renamed(job_dir: Path) -> str:
    """``<name>_<timestamp>`` for a job folder that is not empty; the same name again while
    that folder has not been made (the launcher derives a config twice when it reads the
    cluster's GPUs: the run must use the name the first pass logged)."""
    name = _RENAMES.get(job_dir)
    if name is None or _non_empty(job_dir.with_name(name)):
        name = _RENAMES[job_dir] = f"{job_dir.name}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
    return name


def _non_empty(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def derive_algorithm(config: Config, issues: IssueCollector) -> None:
    """The algorithm type's repeat_times and functions where the config names none; their args
    parsed by each function's ``Args`` (defaults filled)."""
    algo_cfg = config.algorithm
    algorithm = registered(Kind.ALGORITHM_TYPE, algo_cfg.algorithm_type)
    if algorithm is None:  # reported by check_algorithm
        return
    if algorithm.repeat_times is not None:
        algo_cfg.repeat_times = algorithm.repeat_times
    for field_name, kind in ALGORITHM_FNS.items():
        name = getattr(algo_cfg, field_name) or getattr(algorithm, field_name)
        setattr(algo_cfg, field_name, name)
        fn = registered(kind, name)
        if fn is None:
            continue
        args_field = f"{field_name}_args"
        given = getattr(algo_cfg, args_field) or {}
        args = plugin_args(fn, given, f"algorithm.{args_field}", issues)
        if "loss_agg_mode" in args and "loss_agg_mode" not in given:  # the global mode unless the fn sets its own
            args["loss_agg_mode"] = algo_cfg.loss_agg_mode
        setattr(algo_cfg, args_field, args)
    _derive_bypass(config, issues)


def _derive_bypass(config: Config, issues: IssueCollector) -> None:
    """``rollout_correction.bypass_mode`` and ``algorithm.bypass_old_logprobs`` made one (the trainer reads the latter)."""
    algo, rc = config.algorithm, config.algorithm.rollout_correction
    if rc is None:
        return
    if rc.bypass_mode is not None and "bypass_old_logprobs" in algo.model_fields_set:
        if rc.bypass_mode != algo.bypass_old_logprobs:
            issues.add(
                "algorithm.rollout_correction.bypass_mode",
                f"is {str(rc.bypass_mode).lower()} and algorithm.bypass_old_logprobs is "
                f"{str(algo.bypass_old_logprobs).lower()}: both say whether the trainer recomputes the old logprobs; "
                "set one of them",
            )
    bypass = algo.bypass_old_logprobs if rc.bypass_mode is None else rc.bypass_mode
    algo.bypass_old_logprobs = rc.bypass_mode = bypass


def derive_tinker(config: Config, issues: IssueCollector) -> None:
    """``model.tinker.enable`` makes the trainer and every engine ``tinker``, as in Trinity-RFT."""
    if config.model.tinker.enable:
        config.trainer.trainer_type = TINKER
        for _, inference in config.explorer.inference_models():
            inference.engine_type = TINKER


_INHERITED = (
    "temperature",
    "top_p",
    "top_k",
    "logprobs",
    "repetition_penalty",
    "enable_thinking",
    "max_model_len",
    "max_prompt_tokens",
    "max_response_tokens",
    "min_response_tokens",
    "enable_prompt_truncation",
    "rope_scaling",
    "rope_theta",
)
"""What an inference model takes from ``model`` when it sets none."""


def derive_model(config: Config, issues: IssueCollector) -> None:
    """The model's template and token limits; each inference model's path, sampling defaults,
    limits and engine settings from it."""
    model = config.model
    if model.external_model.enable:  # as Trinity-RFT: the rollout model is the external server's
        config.explorer.rollout_model.engine_type = "external"
        config.explorer.rollout_model.external_model_config = model.external_model.model_copy()
    model.critic_model_path = model.critic_model_path or model.model_path
    try:
        model.custom_chat_template, _ = model.chat_template_settings()
    except OSError as exc:
        issues.add("model.chat_template_path", f"cannot read the chat template: {exc}")
    _derive_token_limits(model, "model", issues)
    for path, inference in config.explorer.inference_models():
        is_rollout = inference is config.explorer.rollout_model
        inference.model_path = inference.model_path or (model.model_path if is_rollout else "")
        for key in _INHERITED:
            if getattr(inference, key) is None:
                setattr(inference, key, getattr(model, key))
        if is_rollout:
            inference.trust_remote_code = inference.trust_remote_code or model.trust_remote_code
            inference.chat_template = _chat_template(inference.chat_template, config)
        else:
            _derive_token_limits(inference, path, issues)
        # the rollout model's routing is replayed; auxiliary models (judges, teachers) may be dense
        inference.enable_return_routed_experts = is_rollout and config.algorithm.enable_router_replay
        # Trinity-RFT's launcher sets these per engine; here one config serves engine_num engines the
        # explorer starts (engine_id per engine), Ray places and names none of them.
        inference.engine_id, inference.node_rank, inference.bundle_indices = 0, 0, ""
        inference.ray_actor_name = inference.cuda_visible_devices = None
        inference.ray_namespace = config.ray_namespace
        inference.checkpoint_job_dir = config.checkpoint_job_dir
        inference.gpu_per_engine = engine_gpus(inference)


def _chat_template(own: str | None, config: Config) -> str | None:
    """A section's template by ``ModelConfig.chat_template_settings``; an unreadable template
    file was reported by ``derive_model``."""
    with contextlib.suppress(OSError):
        return config.model.chat_template_settings(own)[0]
    return own


def _derive_token_limits(model: Any, path: str, issues: IssueCollector) -> None:
    """Fill max_model_len / max_prompt_tokens / max_response_tokens as Trinity-RFT does.

    Given two, the third follows; given only max_model_len, prompt and response get half each;
    a min_response_tokens that leaves no room is lowered (with a warning). Three given that do
    not add up are left for ``check_token_limits``.
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
    elif prompt is None and response is None:
        prompt = total // 2
        response = total - prompt
    elif prompt is None:
        response = min(response, total - 1)
        prompt = total - response
    elif response is None:
        prompt = min(prompt, total - 1)
        response = total - prompt
    elif prompt + response > total:
        return
    if prompt < 1 or response < 1:
        issues.add(f"{path}.max_model_len", f"{total} leaves no room for a prompt and a response")
        return
    model.max_model_len, model.max_prompt_tokens, model.max_response_tokens = total, prompt, response
    if model.min_response_tokens == response:  # Trinity-RFT lowers it
        model.min_response_tokens = response - 1
        issues.warn(
            f"{path}.min_response_tokens",
            f"{response} leaves no room below max_response_tokens {response}: set to {response - 1}",
        )


def derive_lora(config: Config, issues: IssueCollector) -> None:
    """``model.lora_configs`` as Trinity-RFT derives it: the rollout model's ``enable_lora`` /
    ``lora_modules`` / ``lora_kwargs`` (none when no engine of the run takes an adapter)."""
    model = config.model
    if not model.lora_configs or model.tinker.enable:
        return
    for lora in model.lora_configs:
        lora.is_dummy = lora.path is None
    known, lacking = lora_engines(config)
    if lacking and len(lacking) == len(known):  # the full model trains (check_lora warns)
        return
    rollout = config.explorer.rollout_model
    rollout.enable_lora = True
    rollout.lora_modules = [
        {"lora_int_id": i + 1, "lora_name": c.name, "lora_path": c.path, "base_model_name": c.base_model_name}
        for i, c in enumerate(model.lora_configs)
    ]
    rollout.lora_kwargs = {
        "max_loras": len(model.lora_configs),
        "max_lora_rank": max(c.lora_rank for c in model.lora_configs),
    }


def derive_cluster(config: Config, issues: IssueCollector) -> None:
    """The GPU split of Trinity-RFT: explorer engines first, the rest to the trainer.

    ``node_num`` / ``gpu_per_node`` of 0 are detected from the Ray cluster when the run starts
    (``trinity run`` fills them in); until then the trainer's share is not derived.
    """
    cluster = config.cluster
    total = cluster.node_num * cluster.gpu_per_node
    cluster.total_gpu_num = total
    if config.model.tinker.enable:  # the Tinker service trains and samples: no local GPU to split
        return
    explorer = config.explorer
    if explorer_runs(config):
        cluster.rollout_gpu_num = model_gpus(explorer.rollout_model)
        cluster.auxiliary_model_gpu_num = sum(model_gpus(m) for m in explorer.auxiliary_models)
    cluster.explorer_gpu_num = cluster.rollout_gpu_num + cluster.auxiliary_model_gpu_num
    if total == 0 or explorer_gpu_problem(config):  # a CPU machine, or a split check_cluster refuses
        return
    cluster.trainer_gpu_num = total - cluster.explorer_gpu_num if config.mode != "colocate" else 1
    if cluster.trainer_gpu_num <= cluster.gpu_per_node:
        cluster.trainer_node_num, cluster.trainer_gpu_num_per_node = 1, cluster.trainer_gpu_num
    elif cluster.trainer_gpu_num % cluster.gpu_per_node == 0:  # else refused by check_cluster
        cluster.trainer_node_num = cluster.trainer_gpu_num // cluster.gpu_per_node
        cluster.trainer_gpu_num_per_node = cluster.gpu_per_node


def plugin_defaults(config: Config, issues: IssueCollector) -> None:
    """Each plugin fills the unset values it owns."""
    plugin_hooks().trinity_config_defaults(config=config, issues=issues)


def derive_synchronizer(config: Config, issues: IssueCollector) -> None:
    """The sync method (memory in one run, else checkpoint: the only one across runs) and intervals."""
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
    sync.ray_namespace = config.ray_namespace
    sync.explorer_world_size = config.cluster.rollout_gpu_num
    sync.explorer_sync_interval = sync.explorer_sync_interval or sync.sync_interval
    sync.trainer_sync_interval = sync.trainer_sync_interval or sync.sync_interval
    for model in (config.explorer.rollout_model, *config.explorer.auxiliary_models):
        model.sync_method = sync.sync_method


def derive_intervals(config: Config, issues: IssueCollector) -> None:
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


def derive_explorer(config: Config, issues: IssueCollector) -> None:
    explorer = config.explorer
    explorer.mode = config.mode
    if config.mode == "serve":  # the proxy forwards to the engines' endpoints (as Trinity-RFT)
        explorer.rollout_model.enable_openai_api = True


def derive_buffer(config: Config, issues: IssueCollector) -> None:
    """The train batch, the tasksets (one per file of a ``task_dir``, each filled from the
    levels above it) and the experience buffer."""
    buffer, inputs = config.buffer, config.buffer.explorer_input
    if not buffer.train_batch_size:
        reads_data = buffer.trainer_input.experience_buffer is not None and _data_schema(config) in ("sft", "dpo")
        if config.mode == "train" or reads_data:
            issues.add(
                "buffer.train_batch_size",
                "required: the trainer reads its own data here (mode train, or SFT/DPO data), so the "
                "batch cannot be derived from batch_size x repeat_times",
            )
        buffer.train_batch_size = buffer.batch_size * config.algorithm.repeat_times
    buffer.tokenizer_path = config.model.model_path
    if inputs.taskset is not None:
        if inputs.tasksets:
            issues.add("buffer.explorer_input.taskset", "give either taskset or tasksets, not both")
        inputs.move_taskset()
    inputs.tasksets = _task_dirs_expanded(config, "tasksets", issues)
    inputs.eval_tasksets = _task_dirs_expanded(config, "eval_tasksets", issues)
    for tasksets, is_eval in ((inputs.tasksets, False), (inputs.eval_tasksets, True)):
        for i, taskset in enumerate(tasksets):
            taskset.name = taskset.name or f"{'eval_' if is_eval else ''}taskset_{i}"
            _fill_taskset(config, taskset, is_eval)
    _derive_experience_buffer(config, issues)


def _task_dirs_expanded(config: Config, group: str, issues: IssueCollector) -> list[TasksetConfig]:
    """Each taskset of ``group`` with a ``task_dir`` becomes one taskset per data file of the folder
    (sorted by name), with its settings and the name ``<name>/<file stem>`` (the stem alone unnamed)."""
    inputs = config.buffer.explorer_input
    expanded = []
    for i, taskset in enumerate(getattr(inputs, group)):
        if taskset.task_dir is None:
            expanded.append(taskset)
            continue
        key = f"{inputs.taskset_key(group, i)}.task_dir"
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


def _fill_taskset(config: Config, taskset: TasksetConfig, is_eval: bool) -> None:
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
    taskset.format.chat_template = _chat_template(taskset.format.chat_template, config)
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


def _data_schema(config: Config) -> str | None:
    """What the trainer reads: ``rollout`` experiences, or ``sft`` / ``dpo`` data (the algorithm's)."""
    algorithm = registered(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type)
    return None if algorithm is None else algorithm.data_schema  # None: reported by check_algorithm


def _derive_experience_buffer(config: Config, issues: IssueCollector) -> None:
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
    separate = experience.storage_type == "queue" and not config.in_one_run
    if not experience.path and (separate or experience.storage_type == "sql"):
        # A sqlite file in the job's buffer folder, as Trinity-RFT's default storage path; a
        # queue's when explorer and trainer run as separate processes: they meet through it.
        experience.path = str(Path(buffer.cache_dir) / f"{experience.name}.db")
    replay = experience.replay_buffer
    priority_fn = registered(Kind.PRIORITY_FN, replay.priority_fn) if replay.enable else None
    if experience.storage_type == "queue" and priority_fn is not None:  # else check_replay_buffer says why
        path = "buffer.trainer_input.experience_buffer.replay_buffer.priority_fn_args"
        replay.priority_fn_args = plugin_args(priority_fn, replay.priority_fn_args, path, issues)
    _fill_storage(config, experience)
    experience.total_epochs, experience.total_steps = buffer.total_epochs, buffer.total_steps
    schema = _data_schema(config)
    if experience.schema_type not in (None, schema, *(("experience", "task") if schema == "rollout" else ())):
        issues.warn(
            "buffer.trainer_input.experience_buffer.schema_type",
            f"algorithm '{config.algorithm.algorithm_type}' trains on {schema} data, not {experience.schema_type}: "
            f"using {schema}",
        )
    experience.schema_type = schema
    experience.format.chat_template = _chat_template(experience.format.chat_template, config)
    if experience.format.enable_thinking is None:
        experience.format.enable_thinking = config.model.enable_thinking
    buffer.explorer_output = experience.model_dump()
    for key, aux in trainer_input.auxiliary_buffers.items():
        aux.name = aux.name or key
        _fill_storage(config, aux)
    config.data_processor.experience_pipeline.output = experience


def _fill_storage(config: Config, storage: ExperienceBufferConfig) -> None:
    """What the trainer's buffers take from the config: batch, tokenizer, namespace, durability."""
    storage.batch_size = config.buffer.train_batch_size
    storage.tokenizer_path = config.model.model_path
    storage.ray_namespace = storage.ray_namespace or config.ray_namespace
    storage.durability = config.buffer.durability


def derive_trainer(config: Config, issues: IssueCollector) -> None:
    """The trainer's remote-code switch, its ``trainer_config`` from a file, steps and token budget."""
    trainer = config.trainer
    trainer.trust_remote_code = config.model.trust_remote_code
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
    _derive_token_budget(config)


def _derive_token_budget(config: Config) -> None:
    """``max_token_len_per_gpu``: ceil(2 x max_model_len / sequence parallel size), as Trinity-RFT;
    with the torch engine at least ``TORCH_TOKEN_BUDGET``.

    Ulysses sequence parallelism splits each sample across its ranks, so a rank needs room for
    ``max_model_len / ulysses_sequence_parallel_size`` tokens of a full-length sample. The torch
    engine runs small models on a CPU or one GPU, where each micro-batch's fixed cost outweighs
    its memory: Trinity-RFT's budget alone would cut a batch of short rows into many small
    micro-batches.
    """
    trainer, max_len = config.trainer, config.model.max_model_len
    if max_len is None or trainer.max_token_len_per_gpu is not None:
        return
    budget = math.ceil(2 * max_len / trainer.ulysses_sequence_parallel_size)
    trainer.max_token_len_per_gpu = max(budget, TORCH_TOKEN_BUDGET) if trainer.trainer_type == "torch" else budget


def derive_data_processor(config: Config, issues: IssueCollector) -> None:
    """Each experience operator's args parsed by its ``Args`` (with the Data-Juicer service where it
    takes one); the task pipeline writes the first taskset unless it names its output."""
    for i, operator in enumerate(config.data_processor.experience_pipeline.operators):
        target = registered(Kind.EXPERIENCE_OPERATOR, operator.name)
        if target is None:  # reported by check_data_processor
            continue
        if config.service.data_juicer is not None and "service_config" in target.Args.model_fields:
            operator.args["service_config"] = config.service.data_juicer.model_dump()
        operator.args = plugin_args(
            target, operator.args, f"data_processor.experience_pipeline.operators[{i}].args", issues
        )
    tasks = config.data_processor.task_pipeline
    if tasks is None or not explorer_runs(config) or tasks.output is not None:
        return
    if config.buffer.explorer_input.tasksets:
        tasks.output = config.buffer.explorer_input.tasksets[0]
    else:
        issues.add("data_processor.task_pipeline.output", "no taskset to write: set output or a taskset")


DERIVATIONS: tuple[Callable[[Config, IssueCollector], None], ...] = (
    derive_job,
    derive_algorithm,
    derive_tinker,
    derive_model,
    derive_cluster,
    plugin_defaults,
    derive_synchronizer,
    derive_intervals,
    derive_explorer,
    derive_lora,
    derive_buffer,
    derive_trainer,
    derive_data_processor,
)


def derive_config(config: Config, issues: IssueCollector) -> None:
    """Fill the derived values in place, in the order of ``DERIVATIONS``."""
    for derive in DERIVATIONS:
        derive(config, issues)
