"""The verl config of a trinity experiment (``trainer.trainer_type: verl``).

Three layers, later ones winning: verl 0.9.1's own defaults (read from the installed verl without
importing it), ``trainer.trainer_config`` (verl's own sections, so veRL users keep their knobs), then
the trinity fields the veRL alignment guide maps (``trinity_fields``). An unknown ``trainer_config``
key is an error naming its dotted path and the nearest valid key; keys verl renamed are moved
(``RENAMED``). ``trinity_fields`` is pure Python, so the mapping is checked without verl installed.
Details: the package README ("Configuration").
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trinity.plugin_api import Config, IssueCollector, trainer_gpu_num

PREFIX = "trainer.trainer_config"
DEFAULTS_FILE = Path("trainer") / "config" / "_generated_ppo_trainer.yaml"
RENAMED = {"critic.model.fsdp_config": "critic.fsdp"}
SOFT = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.model.use_remove_padding",
    "critic.model.use_remove_padding",
    "actor_rollout_ref.actor.fsdp_config.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    "actor_rollout_ref.actor.fsdp_config.offload_policy",
    "critic.fsdp.param_offload",
    "critic.fsdp.optimizer_offload",
    "trainer.balance_batch",
    "trainer.critic_warmup",
)
"""Mapped keys outside the guide's tables (and all of ``critic.optim``): defaults from trinity
fields that ``trainer_config`` may set."""
OPTIMIZERS = {"adamw": "AdamW", "adam": "AdamW", "sgd": "SGD"}
"""``algorithm.optimizer.optimizer_type`` -> the ``torch.optim`` class verl builds."""
"""Keys of older verl configs (the guide's PPO example) -> their place in verl 0.9.1."""
ENGINE_SECTIONS = ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.fsdp")
TOKEN_BUDGETS = (
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    "critic.ppo_max_token_len_per_gpu",
    "critic.forward_max_token_len_per_gpu",
)
"""Token budgets of dynamic batching: each must hold one sample of ``model.max_model_len``."""


def _fn_arg(args: dict[str, Any] | None, key: str, default: Any = None) -> Any:
    return (args or {}).get(key, default)


def _enabled(name: str | None) -> bool:
    return name not in (None, "", "none")


def trinity_fields(config: Config) -> dict[str, Any]:
    """The verl keys (dotted) that trinity fields set, per the veRL alignment guide's tables."""
    algo, model, buffer, trainer = config.algorithm, config.model, config.buffer, config.trainer
    rollout = config.explorer.rollout_model
    n = max(algo.repeat_times, 1)
    train_batch = buffer.train_batch_size or buffer.batch_size * n
    actor = "actor_rollout_ref.actor"
    clip = _clip(trainer.grad_clip)
    fields: dict[str, Any] = {
        # algorithm
        "algorithm.adv_estimator": {"ppo": "gae"}.get(algo.advantage_fn, algo.advantage_fn),
        "algorithm.gamma": _fn_arg(algo.advantage_fn_args, "gamma", 1.0),
        "algorithm.lam": _fn_arg(algo.advantage_fn_args, "lam", 1.0),
        "algorithm.use_kl_in_reward": _enabled(algo.kl_penalty_fn),
        "algorithm.kl_ctrl.kl_coef": _fn_arg(algo.kl_penalty_fn_args, "kl_coef", 0.001),
        # data
        "data.train_batch_size": buffer.batch_size * config.synchronizer.sync_interval,
        "data.max_prompt_length": model.max_prompt_tokens,
        "data.max_response_length": model.max_response_tokens,
        "data.filter_overlong_prompts": model.enable_prompt_truncation,
        # actor, rollout, critic
        "actor_rollout_ref.model.path": model.model_path,
        "actor_rollout_ref.model.trust_remote_code": model.trust_remote_code,
        "actor_rollout_ref.model.use_remove_padding": trainer.use_remove_padding,
        f"{actor}.strategy": trainer.trainer_strategy,
        **{f"{section}.strategy": trainer.trainer_strategy for section in ENGINE_SECTIONS},
        "actor_rollout_ref.ref.strategy": trainer.trainer_strategy,
        f"{actor}.fsdp_config.param_offload": trainer.param_offload,
        f"{actor}.fsdp_config.optimizer_offload": trainer.optimizer_offload,
        f"{actor}.fsdp_config.offload_policy": trainer.offload_policy,
        **_optimizer(f"{actor}.optim", config, clip),
        f"{actor}.grad_clip": clip,
        "actor_rollout_ref.rollout.n": n,
        # ppo_mini_batch_size x rollout.n experiences make one optimizer step: the whole train batch
        f"{actor}.ppo_mini_batch_size": max(train_batch // n, 1),
        f"{actor}.ppo_micro_batch_size_per_gpu": trainer.micro_batch_size_per_gpu,
        f"{actor}.use_dynamic_bsz": trainer.use_dynamic_bsz,
        f"{actor}.ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
        f"{actor}.fsdp_config.ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
        f"{actor}.use_kl_loss": _enabled(algo.kl_loss_fn),
        f"{actor}.loss_agg_mode": algo.loss_agg_mode,
        f"{actor}.entropy_coeff": _fn_arg(algo.entropy_loss_fn_args, "entropy_coef", 0.0),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": trainer.micro_batch_size_per_gpu,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": trainer.micro_batch_size_per_gpu,
        "actor_rollout_ref.rollout.temperature": model.temperature,
        "actor_rollout_ref.rollout.top_p": model.top_p,
        "actor_rollout_ref.rollout.top_k": model.top_k,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rollout.tensor_parallel_size,
        "actor_rollout_ref.rollout.gpu_memory_utilization": rollout.gpu_memory_utilization,
        "critic.model.path": model.critic_model_path or model.model_path,
        "critic.model.use_remove_padding": trainer.use_remove_padding,
        "critic.strategy": trainer.trainer_strategy,
        "critic.fsdp.param_offload": trainer.param_offload,
        "critic.fsdp.optimizer_offload": trainer.optimizer_offload,
        "critic.ppo_mini_batch_size": max(train_batch // n, 1),
        "critic.ppo_micro_batch_size_per_gpu": trainer.micro_batch_size_per_gpu,
        "critic.use_dynamic_bsz": trainer.use_dynamic_bsz,
        "critic.ulysses_sequence_parallel_size": trainer.ulysses_sequence_parallel_size,
        "critic.grad_clip": clip,
        **_optimizer("critic.optim", config, clip),  # as the torch engine; trainer_config's critic.optim wins
        # trainer
        "trainer.project_name": config.project,
        "trainer.experiment_name": config.name,
        "trainer.default_local_dir": config.checkpoint_job_dir or config.checkpoint_root_dir,
        "trainer.logger": ["console", *_monitor_types(config.monitor.monitor_type)],
        "trainer.nnodes": config.cluster.node_num,
        "trainer.n_gpus_per_node": config.cluster.gpu_per_node,
        "trainer.save_freq": trainer.save_interval,
        "trainer.test_freq": config.explorer.eval_interval,
        "trainer.total_epochs": buffer.total_epochs,
        "trainer.total_training_steps": trainer.total_steps,
        "trainer.val_before_train": config.explorer.eval_on_startup,
        "trainer.resume_mode": "auto" if config.continue_from_checkpoint else "disable",
        "trainer.balance_batch": trainer.balance_batch,
        "trainer.critic_warmup": trainer.critic_warmup,
    }
    if _enabled(algo.kl_loss_fn):
        fields[f"{actor}.kl_loss_type"] = algo.kl_loss_fn
        fields[f"{actor}.kl_loss_coef"] = _fn_arg(algo.kl_loss_fn_args, "kl_coef", 0.001)
    if _enabled(algo.kl_penalty_fn):
        fields["algorithm.kl_penalty"] = algo.kl_penalty_fn
    for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        if _fn_arg(algo.policy_loss_fn_args, key) is not None:
            fields[f"{actor}.{key}"] = algo.policy_loss_fn_args[key]
    if algo.rollout_correction is not None:  # verl's keys, the preset expanded (the losses apply it: trinity's)
        for key, value in algo.rollout_correction.model_dump(exclude={"preset"}).items():
            fields[f"algorithm.rollout_correction.{key}"] = value
    if model.lora_configs:  # one adapter (check_lora); verl's FSDP engine wraps the model with peft
        lora = model.lora_configs[0]
        fields.update(
            {
                "actor_rollout_ref.model.lora_rank": lora.lora_rank,
                "actor_rollout_ref.model.lora_alpha": lora.lora_alpha,
                "actor_rollout_ref.model.target_modules": lora.target_modules,
                "actor_rollout_ref.model.exclude_modules": lora.exclude_modules,
                "actor_rollout_ref.model.lora_adapter_path": lora.path,
            }
        )
    if trainer.max_token_len_per_gpu is not None:
        for budget in (f"{actor}.ppo_max_token_len_per_gpu", "critic.ppo_max_token_len_per_gpu"):
            fields[budget] = trainer.max_token_len_per_gpu
    return fields


def _optimizer(prefix: str, config: Config, clip: float) -> dict[str, Any]:
    opt = config.algorithm.optimizer
    total = opt.total_training_steps if opt.total_training_steps > 0 else (config.trainer.total_steps or -1)
    return {
        f"{prefix}.lr": opt.lr,
        f"{prefix}.lr_warmup_steps": opt.lr_warmup_steps,
        f"{prefix}.lr_warmup_steps_ratio": opt.lr_warmup_steps_ratio,
        f"{prefix}.min_lr_ratio": opt.min_lr_ratio,
        f"{prefix}.lr_scheduler_type": opt.lr_scheduler_type,
        f"{prefix}.optimizer": OPTIMIZERS.get(opt.optimizer_type.lower(), opt.optimizer_type),
        f"{prefix}.betas": list(opt.betas),
        f"{prefix}.weight_decay": opt.weight_decay,
        f"{prefix}.total_training_steps": total,
        f"{prefix}.clip_grad": _clip(opt.clip_grad),
    }


def _clip(norm: float) -> float:
    return norm if norm > 0 else float("inf")  # 0: no clipping


def _monitor_types(monitor_type: Any) -> list[str]:
    names = monitor_type if isinstance(monitor_type, list) else [monitor_type]
    return [name for name in names if name and name != "console"]


def cpu_fields(defaults: DictConfig) -> dict[str, Any]:
    """What verl needs to train on a CPU: FSDP2 (FSDP1 needs an accelerator), fp32, sdpa, no compile."""
    fields: dict[str, Any] = {"trainer.device": "cpu"}
    for section in ENGINE_SECTIONS:
        fields[f"{section}.strategy"] = "fsdp2"
        fields[f"{section}.mixed_precision"] = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
        fields[f"{section}.use_torch_compile"] = False
    for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        fields[f"{role}.strategy"] = "fsdp2"
    fields["actor_rollout_ref.actor.use_torch_compile"] = False
    # A forward-only engine gets FSDP2's CPUOffloadPolicy(pin_memory=True), and pinning needs an
    # accelerator: the reference is built as a trainable engine that never steps (AdamW makes no
    # state before its first step).
    fields["actor_rollout_ref.ref.fsdp_config.forward_only"] = False
    fields["actor_rollout_ref.ref.optim"] = OmegaConf.select(defaults, "actor_rollout_ref.actor.optim")
    for model in ("actor_rollout_ref.model", "critic.model"):
        fields[f"{model}.override_config.attn_implementation"] = "sdpa"
    return {k: v for k, v in fields.items() if OmegaConf.select(defaults, k.rsplit(".", 1)[0]) is not None}


def _soft(key: str) -> bool:
    return key in SOFT or key.startswith("critic.optim.")


def verl_defaults() -> DictConfig:
    """verl's default PPO trainer config, from the installed verl (not imported)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("verl is not installed: pip install 'trinity-verl[engine]' (verl 0.9.1)")
    return OmegaConf.load(Path(next(iter(spec.submodule_search_locations))) / DEFAULTS_FILE)


def _unknown_keys(node: Any, schema: Any, path: str, issues: IssueCollector) -> None:
    """Report keys of ``node`` that ``schema`` lacks (free dicts of verl, e.g. ``override_config``, excepted)."""
    if not isinstance(node, dict) or not isinstance(schema, DictConfig) or len(schema) == 0:
        return
    for key, value in node.items():
        if key not in schema:
            close = difflib.get_close_matches(str(key), [str(k) for k in schema], n=1, cutoff=0.5)
            hint = f"; did you mean '{PREFIX}.{path}{close[0]}'?" if close else ""
            issues.add(f"{PREFIX}.{path}{key}", f"unknown verl key{hint}")
        else:
            _unknown_keys(value, schema._get_node(key), f"{path}{key}.", issues)  # noqa: SLF001 (no resolving)


def _moved(user: dict[str, Any]) -> dict[str, Any]:
    """``user`` with the keys of ``RENAMED`` moved to their verl 0.9.1 place."""
    tree = OmegaConf.create(user)
    for old, new in RENAMED.items():
        value = OmegaConf.select(tree, old)
        if value is not None:
            parent, leaf = old.rsplit(".", 1)
            OmegaConf.select(tree, parent).pop(leaf)
            OmegaConf.update(tree, new, value, merge=True)
    return OmegaConf.to_container(tree)


def build_verl_config(config: Config, issues: IssueCollector, device: str | None = None) -> DictConfig:
    """verl's defaults <- ``trainer.trainer_config`` <- the mapped trinity fields (<- CPU settings
    when ``device`` is ``cpu``); problems go to ``issues`` with their dotted paths."""
    defaults = verl_defaults()
    user = _moved(config.trainer.trainer_config or {})
    _unknown_keys(user, defaults, "", issues)
    merged = OmegaConf.merge(defaults, user)
    user_tree = OmegaConf.create(user)
    mapped = {k: v for k, v in trinity_fields(config).items() if not _soft(k) or OmegaConf.select(user_tree, k) is None}
    device = device or OmegaConf.select(merged, "trainer.device")
    if device == "cpu":
        mapped.update(cpu_fields(defaults))
    for key, value in mapped.items():
        OmegaConf.update(merged, key, value, merge=True, force_add=True)
    _check_budgets(config, merged, issues)
    gpus, sp = trainer_gpu_num(config), config.trainer.ulysses_sequence_parallel_size
    if gpus and gpus % sp:
        issues.add("trainer.ulysses_sequence_parallel_size", f"{sp} does not divide the trainer's {gpus} GPUs")
    return merged


def _check_budgets(config: Config, merged: DictConfig, issues: IssueCollector) -> None:
    """verl gives each micro-batch ``budget x ulysses_sequence_parallel_size`` tokens; a budget that
    cannot hold a full-length sample fails the step that meets one (a warning: shorter runs pass)."""
    max_len, parallel = config.model.max_model_len, config.trainer.ulysses_sequence_parallel_size
    if max_len is None or not config.trainer.use_dynamic_bsz:
        return
    for key in TOKEN_BUDGETS:
        budget = OmegaConf.select(merged, key)
        if budget is not None and budget * parallel < max_len:
            issues.warn(
                f"{PREFIX}.{key}",
                f"{budget} x ulysses_sequence_parallel_size {parallel} is below model.max_model_len {max_len}: "
                "a full-length sample would not fit (raise it or trainer.max_token_len_per_gpu)",
            )


def verl_config(config: Config, device: str | None = None) -> DictConfig:
    """``build_verl_config`` raising ``ConfigError`` with every problem found."""
    issues = IssueCollector()
    merged = build_verl_config(config, issues, device)
    issues.raise_if_any(PREFIX)
    issues.emit_warnings()
    return merged
