"""The ``synchronizer`` section: when and how weights travel from trainer to explorer."""

from __future__ import annotations

from pydantic import Field

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.values import SyncMethodName, SyncStyle


class SynchronizerConfig(ConfigModel):
    """How and when the trainer's weights reach the explorer."""

    sync_method: SyncMethodName | None = Field(
        None, description="nccl, memory or checkpoint; unset: the best the mode and engines allow."
    )
    sync_style: SyncStyle = Field(
        "fixed", description="fixed, trainer_driven, explorer_driven or fully_async (when weights move)."
    )
    sync_interval: int = Field(1, ge=1, description="Steps between weight syncs.")
    explorer_sync_interval: int | None = derived(None, "sync_interval, as the explorer counts it.", ge=1)
    trainer_sync_interval: int | None = derived(None, "sync_interval, as the trainer counts it.", ge=1)
    sync_offset: int = Field(
        0, ge=0, description="Steps the explorer may run ahead of the trainer (fully_async and trainer_driven too)."
    )
    sync_timeout: int = Field(3600, gt=0, description="Seconds a sync may wait before it fails.")
    partial_rollout: bool = Field(
        False,
        description="fully_async: a weight sync pauses the generations in flight, loads the new weights and "
        "resumes them, each token's version recorded (verl's async_training.partial_rollout).",
    )
    group_name: str = Field(
        "rollout_weight_sync",
        min_length=1,
        description="Name of the NCCL weight-sync group (its keys in the group's store).",
    )
    explorer_world_size: int | None = derived(None, "Ranks of the rollout engines.", ge=0)
    ray_namespace: str = derived("", "The experiment's Ray namespace.")
