"""The whole experiment (``Config``): its top-level keys, sections and stages."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.algorithm import AlgorithmConfig
from trinity.config.schema.buffer import BufferConfig
from trinity.config.schema.cluster import ClusterConfig
from trinity.config.schema.data_processor import DataProcessorConfig
from trinity.config.schema.explorer import ExplorerConfig
from trinity.config.schema.model import ModelConfig
from trinity.config.schema.monitor import LogConfig, MonitorConfig
from trinity.config.schema.service import ServiceConfig
from trinity.config.schema.synchronizer import SynchronizerConfig
from trinity.config.schema.trainer import TrainerConfig
from trinity.config.schema.values import Mode


class StageConfig(ConfigModel):
    """One stage of ``stages``: its mode and the sections it overrides (merged over the global ones)."""

    stage_name: str = Field("", description="Name of the stage (its job folder is <name>/<stage_name>).")
    mode: Mode | None = Field(None, description="Mode of this stage; unset: the global mode.")
    algorithm: dict[str, Any] | None = Field(None, description="algorithm keys of this stage.")
    buffer: dict[str, Any] | None = Field(None, description="buffer keys of this stage.")
    data_processor: dict[str, Any] | None = Field(None, description="data_processor keys of this stage.")
    explorer: dict[str, Any] | None = Field(None, description="explorer keys of this stage.")
    trainer: dict[str, Any] | None = Field(None, description="trainer keys of this stage.")


class Config(ConfigModel):
    """A whole experiment."""

    mode: Mode = Field("both", description="both, train, explore, bench, serve or colocate.")
    project: str = Field("Trinity-RFT", description="Project name (job folder and trackers).")
    group: str = Field("", description="Group of experiments (a folder level between project and name).")
    name: str = Field("rft", description="Experiment name.")
    checkpoint_root_dir: str = Field(
        "./checkpoints",
        description='Root of job folders; relative to the working directory ("": the working directory itself, '
        "Trinity-RFT's default).",
    )
    checkpoint_job_dir: str = derived("", "<checkpoint_root_dir>/<project>/<group>/<name>, absolute.")
    ray_namespace: str = Field("", description="Ray namespace of the run; unset: <project>/<group>/<name>.")
    continue_from_checkpoint: bool = Field(True, description="Resume from the job folder's last checkpoint.")
    ignore_validator_suggestions: bool = Field(
        False,
        description="Skip the trainer's GPU memory estimate (with a CUDA device, trinity run refuses a trainer "
        "estimated above 80% of a GPU, naming what lowers it).",
    )
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="The RL algorithm.")
    data_processor: DataProcessorConfig = Field(default_factory=DataProcessorConfig, description="Data pipelines.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The model trained.")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Machines.")
    buffer: BufferConfig = Field(default_factory=BufferConfig, description="Data and batch sizes.")
    explorer: ExplorerConfig = Field(default_factory=ExplorerConfig, description="The explorer.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The trainer.")
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description="Metrics trackers.")
    synchronizer: SynchronizerConfig = Field(default_factory=SynchronizerConfig, description="Weight sync.")
    service: ServiceConfig = Field(default_factory=ServiceConfig, description="Outside services.")
    log: LogConfig = Field(default_factory=LogConfig, description="Logs.")
    stages: list[StageConfig] = Field(default_factory=list, description="Stages run in order.")

    @property
    def in_one_run(self) -> bool:
        """Explorer and trainer run in one ``trinity run`` (mode both, or colocate on one GPU)."""
        return self.mode in ("both", "colocate")
