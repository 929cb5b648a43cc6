"""``storage_type: env_service``: known, and refused with what it needs.

In Trinity-RFT's ecosystem an "env service" is AgentEvolver's Environment Service: an HTTP server
that hosts environments (AppWorld, BFCL, ...) in their own runtimes and serves their task ids and
episodes (``get_env_profile``, ``create_instance``, ``step``, ``evaluate``, ``release_instance``)
at an ``env_url``. Trinity-RFT's own buffer readers (file, queue, sql, task_dir) hold no client for
it, and no such server or environment can run here, so a config naming it checks with a warning
and fails at ``trinity run`` with this message instead of as an unknown storage.
"""

from __future__ import annotations

from typing import Any

REFUSAL = (
    "env_service names an Environment Service (AgentEvolver's HTTP server hosting environments such as "
    "AppWorld and BFCL at an env_url); trinity has no client for it and cannot host those environments: "
    "write the service's task ids to a file taskset (storage_type: file) for a workflow that drives the "
    "environment itself"
)


class EnvServiceStorage:
    """The storage ``env_service`` resolves to: opening it raises ``REFUSAL``."""

    def __init__(self, storage: Any, namespace: str | None = None):
        raise RuntimeError(f"{storage.name}: {REFUSAL}")


def refuse_env_service(config: Any, issues: Any) -> None:
    """Every buffer of the derived ``config`` (a single ``taskset`` is ``tasksets[0]`` by now) naming
    ``env_service``, refused at run (a warning at check)."""
    inputs, trainer_input = config.buffer.explorer_input, config.buffer.trainer_input
    named = {f"buffer.explorer_input.tasksets[{i}]": t for i, t in enumerate(inputs.tasksets)}  # taskset: [0]
    named |= {f"buffer.explorer_input.eval_tasksets[{i}]": t for i, t in enumerate(inputs.eval_tasksets)}
    named["buffer.trainer_input.experience_buffer"] = trainer_input.experience_buffer
    named |= {f"buffer.trainer_input.auxiliary_buffers.{k}": b for k, b in trainer_input.auxiliary_buffers.items()}
    for path, storage in named.items():
        if storage is not None and storage.storage_type == "env_service":
            issues.refuse_at_run(f"{path}.storage_type", REFUSAL)
