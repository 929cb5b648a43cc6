"""The rules the derivation and the check share: which roles a mode runs, a plugin by name,
plugin arguments, and the GPU arithmetic of Trinity-RFT's cluster split.

``trinity.config.derive`` fills values with them and ``trinity.config.check`` reports with
them; the rest of trinity asks them through here (never the checker), e.g. ``engine_gpus``.
"""

from __future__ import annotations

from typing import Any

from trinity.config.base import PluginArgs
from trinity.config.load import IssueCollector, report_effects, validate_section
from trinity.config.schema import Config, InferenceModelConfig
from trinity.plugins import Kind, PluginError, get_registry, resolve

ALGORITHM_FNS = {
    "advantage_fn": Kind.ADVANTAGE_FN,
    "policy_loss_fn": Kind.POLICY_LOSS_FN,
    "kl_penalty_fn": Kind.KL_FN,
    "kl_loss_fn": Kind.KL_FN,
    "entropy_loss_fn": Kind.ENTROPY_LOSS_FN,
    "sample_strategy": Kind.SAMPLE_STRATEGY,
}
"""The algorithm's functions: config field -> plugin kind."""

TINKER = "tinker"
"""Trinity-RFT's engine and trainer type backed by the hosted Tinker service: refused here."""


def explorer_runs(config: Config) -> bool:
    return config.mode in ("both", "explore", "bench", "serve", "colocate")


def trainer_runs(config: Config) -> bool:
    return config.mode in ("both", "train", "colocate")


def registered(kind: Kind, name: str | None) -> Any:
    """The implementation of ``name`` if it is installed and imports, else None (reports nothing)."""
    if name not in get_registry().names(kind):
        return None
    try:
        return resolve(kind, name)
    except PluginError:
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


def engine_gpus(model: InferenceModelConfig) -> int:
    """GPUs of one engine: tensor x data x pipeline parallel size (none for an external server)."""
    if model.engine_type == "external":
        return 0
    return model.ranks_per_engine()


def trainer_gpu_num(config: Config) -> int:
    """GPUs left to the trainer: all of them in train mode, the rest after the explorer in both."""
    total = config.cluster.node_num * config.cluster.gpu_per_node
    if config.mode == "train":
        return total
    models = (config.explorer.rollout_model, *config.explorer.auxiliary_models)
    return max(total - sum(m.engine_num * engine_gpus(m) for m in models), 0)


def model_gpus(model: InferenceModelConfig) -> int:
    """GPUs of all the engines of a model."""
    return model.engine_num * model.gpu_per_engine


def gpu_arithmetic(config: Config) -> str:
    """The explorer's GPUs against the cluster's, spelt out for a message that asks to change them."""
    cluster, explorer = config.cluster, config.explorer
    aux = [model_gpus(m) for m in explorer.auxiliary_models]
    return (
        f"rollout_model {explorer.rollout_model.engine_num} engines x {explorer.rollout_model.gpu_per_engine} GPUs "
        + (f"+ auxiliary_models {' + '.join(map(str, aux))} " if aux else "")
        + f"= {cluster.explorer_gpu_num} GPUs for the explorer, of node_num {cluster.node_num} x gpu_per_node "
        f"{cluster.gpu_per_node} = {cluster.node_num * cluster.gpu_per_node}"
    )


def explorer_gpu_problem(config: Config) -> tuple[str, str] | None:
    """``(key, message)`` when the explorer's GPUs (derived) leave the trainer none, else None.

    A cluster of 0 GPUs (a CPU machine, or not detected yet: ``trinity run`` fills it in) has no split.
    """
    cluster = config.cluster
    total = cluster.node_num * cluster.gpu_per_node
    if total == 0:
        return None
    change = (
        "lower explorer.rollout_model.engine_num or tensor_parallel_size"
        + (" (or explorer.auxiliary_models' engine_num)" if config.explorer.auxiliary_models else "")
        + ", or raise cluster.node_num or cluster.gpu_per_node"
    )
    if config.mode == "both" and cluster.explorer_gpu_num >= total:
        hint = "; or mode: colocate, which shares one GPU between explorer and trainer" if total == 1 else ""
        return (
            "explorer.rollout_model.engine_num",
            f"no GPU left for the trainer: {gpu_arithmetic(config)}: {change}{hint}",
        )
    if config.mode in ("explore", "bench", "serve") and cluster.explorer_gpu_num > total:
        return "explorer.rollout_model.engine_num", f"not enough GPUs: {gpu_arithmetic(config)}: {change}"
    if config.mode == "colocate" and total != 1:
        return "mode", f"colocate shares one GPU between explorer and trainer; the cluster has {total}"
    return None


def lora_engines(config: Config) -> tuple[list[tuple[Kind, str, str, str]], list[tuple[Kind, str, str, str]]]:
    """The installed engines of the run (kind, name, key, an engine of that kind that takes an adapter)
    and those of them that take no LoRA adapter."""
    engines = []
    if trainer_runs(config):
        engines.append((Kind.TRAINER_ENGINE, config.trainer.trainer_type, "trainer.trainer_type", "torch"))
    if explorer_runs(config):
        rollout = config.explorer.rollout_model.engine_type
        engines.append((Kind.ROLLOUT_ENGINE, rollout, "explorer.rollout_model.engine_type", "transformers"))
    # an unknown name is reported by check_explorer / check_trainer
    known = [e for e in engines if e[1] in get_registry().names(e[0])]
    lacking = [e for e in known if not getattr(resolve(e[0], e[1]), "takes_lora", False)]
    return known, lacking
