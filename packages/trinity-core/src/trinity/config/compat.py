"""Trinity-RFT's configs as trinity reads them: older names rewritten, keys without effect set aside.

A config written for Trinity-RFT loads unchanged. Before a section is validated, ``rewrite`` moves
each older key to its current place, maps each older value to its current name, and takes out each
key trinity accepts but does not act on (``NO_EFFECT_KEYS``), and says what it did: a warning per
rewrite naming the old and the new, and per key without effect set off its default, why it cannot
act here (an error under ``trinity config check --strict``). The sections in
``trinity.config.schema`` then declare only keys that act; docs/config.md lists both tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity.config.base import inert_message

RENAMED_KEYS: dict[str, dict[str, str]] = {
    "TasksetConfig": {"task_selector": "data_selector"},
    "ExperienceBufferConfig": {
        "use_priority_queue": "replay_buffer.enable",
        "reuse_cooldown_time": "replay_buffer.reuse_cooldown_time",
    },
    "OptimizerConfig": {"warmup_style": "lr_scheduler_type"},
    "InferenceModelConfig": {"engine_args": "extra_engine_args"},
    "ExplorerConfig": {"runner_num": "runner_per_model"},
    "TrainerConfig": {"ppo_max_token_len_per_gpu": "max_token_len_per_gpu"},
}
"""Section model (by class name, as docs/config.md heads it) -> {older key: its current, dotted, place}."""

RENAMED_VALUES: dict[str, dict[str, dict[str, str]]] = {
    "SynchronizerConfig": {
        "sync_style": {"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"},
        "sync_method": {"online": "nccl", "offline": "checkpoint"},
    },
}
"""Section model -> {key: {older value: its current name}} (compared case-insensitively)."""

# Why a key without effect cannot act here, one constant per cause.
RUNNERS_ARE_COROUTINES = "trinity's workflow runners are coroutines of the explorer, not actors to prepare"
PIPELINE_INPUTS_UNREAD = (
    "Trinity-RFT builds readers of these buffers but its pipeline never reads them (it processes the "
    "explorer's experiences only), as trinity's does"
)
WAIT_FOR_CHECKPOINT_UNUSED = (
    "Trinity-RFT declares it unused ('TODO: to be used'); the explorer's waits follow sync_style, "
    "sync_offset and sync_timeout"
)
COD_NOT_SHIPPED = (
    "read only by Trinity-RFT's Connect-the-Dots research workflows (cod_*: task packs solved with iterative "
    "hints, and the cod advantage's reward-to-go), which trinity does not ship"
)


@dataclass(frozen=True)
class NoEffect:
    """A key Trinity-RFT reads and trinity accepts without acting on it: its default there (the value
    its examples write, which says nothing) and why it cannot act here."""

    default: Any
    reason: str


NO_EFFECT_KEYS: dict[str, dict[str, NoEffect]] = {
    "Config": {
        "cod.task_pack_size": NoEffect(4, COD_NOT_SHIPPED),
        "cod.eval_task_pack_size": NoEffect(None, COD_NOT_SHIPPED),
        "cod.packing_strategy": NoEffect("cod", COD_NOT_SHIPPED),
        "cod.cod_workflow_args": NoEffect({}, COD_NOT_SHIPPED),
    },
    "ExplorerConfig": {
        "runner_prepare_concurrency": NoEffect(8, RUNNERS_ARE_COROUTINES),
        "runner_prepare_max_retries": NoEffect(2, RUNNERS_ARE_COROUTINES),
    },
    "SynchronizerConfig": {"wait_for_checkpoint": NoEffect(False, WAIT_FOR_CHECKPOINT_UNUSED)},
    "ExperiencePipelineConfig": {"inputs": NoEffect({}, PIPELINE_INPUTS_UNREAD)},
}
"""Section model -> {key (dotted within the section): its default and why it has no effect}."""


def renamed_keys(model: type) -> dict[str, str]:
    """The older keys of a section model, its bases' included: ``{older key: current dotted place}``."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        found.update(RENAMED_KEYS.get(cls.__name__, {}))
    return found


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _take(data: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    """Remove the key at ``dotted`` from ``data`` (and a parent mapping it leaves empty); whether it was there, its value."""
    parent, *rest = dotted.split(".", 1)
    if parent not in data:
        return False, None
    if not rest:
        return True, data.pop(parent)
    inner = data[parent]
    if inner is None:  # ``cod:`` written empty says nothing
        del data[parent]
        return False, None
    if not isinstance(inner, dict):
        return False, None
    inner = data[parent] = dict(inner)
    found, value = _take(inner, rest[0])
    if not inner:
        del data[parent]
    return found, value


def rewrite(
    model: type, data: dict[str, Any], path: str
) -> tuple[dict[str, Any], list[tuple[str, str]], list[tuple[str, str]]]:
    """``data`` (one section's mapping, at dotted ``path``) in current names and without the keys
    that have no effect; what was rewritten, ``(dotted key, message)`` per older key moved or older
    value renamed; and ``(dotted key, message)`` per key without effect set off its default. Nested
    sections are the caller's."""
    data, rewrites, no_effect = dict(data), [], []
    for old, new in renamed_keys(model).items():
        if old not in data:
            continue
        value = data.pop(old)
        *parents, leaf = new.split(".")
        target = data
        for part in parents:
            target[part] = dict(target.get(part) or {})
            target = target[part]
        if leaf in target:
            rewrites.append((_key(path, old), f"deprecated and {_key(path, new)} is also set: using {new}"))
        else:
            rewrites.append((_key(path, old), f"deprecated: use {_key(path, new)}"))
            target[leaf] = value
    for key, names in RENAMED_VALUES.get(model.__name__, {}).items():
        value = data.get(key)
        current = names.get(value.strip().lower()) if isinstance(value, str) else None
        if current is not None:
            rewrites.append((_key(path, key), f"{value!r} is deprecated: using {current!r}"))
            data[key] = current
    for key, inert in NO_EFFECT_KEYS.get(model.__name__, {}).items():
        found, value = _take(data, key)
        if found and value != inert.default:
            no_effect.append((_key(path, key), inert_message(inert.reason)))
    return data, rewrites, no_effect
