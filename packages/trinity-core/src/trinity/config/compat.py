"""Trinity-RFT's configs as trinity reads them: older names rewritten, keys without effect explained.

A config written for Trinity-RFT loads unchanged. Before a section is validated, ``rewrite`` moves
each older key to its current place and maps each older value to its current name, and says what
it rewrote (a warning per rewrite, naming the old and the new). Keys trinity accepts but does not
act on stay declared in their section with ``inert(reason=...)``, so that they are typed and
documented where they are written; their reasons are the constants below, and the loader warns of
each one set off its default (an error under ``trinity config check --strict``).
"""

from __future__ import annotations

from typing import Any

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

# Why an inert key cannot act here (``inert(reason=...)``), one constant per cause.
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


def renamed_keys(model: type) -> dict[str, str]:
    """The older keys of a section model, its bases' included: ``{older key: current dotted place}``."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        found.update(RENAMED_KEYS.get(cls.__name__, {}))
    return found


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def rewrite(model: type, data: dict[str, Any], path: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``data`` (one section's mapping, at dotted ``path``) in current names, and what was rewritten:
    ``(dotted key, message)`` per older key moved or older value renamed. Nested sections are the caller's."""
    data, rewrites = dict(data), []
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
    return data, rewrites
