"""The configuration schema: every section and key of a Trinity-RFT YAML file, declared once,
one module per section (``buffer``, ``explorer``, ...; ``experiment`` holds the whole ``Config``).

Each field carries its type, default, range or allowed values and a one-line description; from
them come validation, ``trinity config schema`` (JSON Schema), docs/config.md and the studio's
form. Names, defaults and meanings follow Trinity-RFT's 0.6 ``config.py`` so that its configs load
unchanged; ``None`` means "derive it" (``trinity.config.derive``). Keys accepted but not acted on
are not declared here: ``trinity.config.compat`` takes them out before validation (with a warning).
``derived(...)`` marks a key the derivation fills (a value in the file is replaced). Free-form
mappings (``*_args``, ``trainer_config``) are checked by their owner.
"""

from trinity.config.schema.algorithm import (
    ROLLOUT_CORRECTION_PRESETS,
    ROLLOUT_RS_OPTIONS,
    AlgorithmConfig,
    OptimizerConfig,
    RolloutCorrectionConfig,
    RolloutCorrectionPreset,
    parse_is_threshold,
    parse_rs_options,
    parse_rs_thresholds,
)
from trinity.config.schema.buffer import (
    BufferConfig,
    DataSelectorConfig,
    ExperienceBufferConfig,
    ExplorerInput,
    FormatConfig,
    GenerationConfig,
    ReplayBufferConfig,
    StorageConfig,
    TasksetConfig,
    TrainerInput,
)
from trinity.config.schema.cluster import ClusterConfig
from trinity.config.schema.data_processor import (
    DataProcessorConfig,
    ExperiencePipelineConfig,
    OperatorConfig,
    TaskPipelineConfig,
)
from trinity.config.schema.experiment import Config, StageConfig
from trinity.config.schema.explorer import DynamicTimeoutConfig, ExplorerConfig, InferenceModelConfig, OverRolloutConfig
from trinity.config.schema.model import ExternalModelConfig, LoRAConfig, ModelConfig, TinkerConfig
from trinity.config.schema.monitor import LogConfig, MonitorConfig
from trinity.config.schema.service import DataJuicerServiceConfig, ServiceConfig
from trinity.config.schema.synchronizer import SynchronizerConfig
from trinity.config.schema.trainer import MegatronParallelConfig, TrainerConfig
from trinity.config.schema.values import (
    ConcurrentMode,
    Durability,
    LogLevel,
    LossAggMode,
    LRSchedulerType,
    Mode,
    Probability,
    PromptType,
    SaveHFCheckpoint,
    SaveStrategy,
    SyncMethodName,
    SyncStyle,
    TrainerStrategy,
)

__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "ConcurrentMode",
    "Config",
    "DataJuicerServiceConfig",
    "DataProcessorConfig",
    "DataSelectorConfig",
    "Durability",
    "DynamicTimeoutConfig",
    "ExperienceBufferConfig",
    "ExperiencePipelineConfig",
    "ExplorerConfig",
    "ExplorerInput",
    "ExternalModelConfig",
    "FormatConfig",
    "GenerationConfig",
    "InferenceModelConfig",
    "LRSchedulerType",
    "LoRAConfig",
    "LogConfig",
    "LogLevel",
    "LossAggMode",
    "MegatronParallelConfig",
    "Mode",
    "ModelConfig",
    "MonitorConfig",
    "OperatorConfig",
    "OptimizerConfig",
    "OverRolloutConfig",
    "Probability",
    "PromptType",
    "ROLLOUT_CORRECTION_PRESETS",
    "ROLLOUT_RS_OPTIONS",
    "ReplayBufferConfig",
    "RolloutCorrectionConfig",
    "RolloutCorrectionPreset",
    "SaveHFCheckpoint",
    "SaveStrategy",
    "ServiceConfig",
    "StageConfig",
    "StorageConfig",
    "SyncMethodName",
    "SyncStyle",
    "SynchronizerConfig",
    "TaskPipelineConfig",
    "TasksetConfig",
    "TinkerConfig",
    "TrainerConfig",
    "TrainerInput",
    "TrainerStrategy",
    "parse_is_threshold",
    "parse_rs_options",
    "parse_rs_thresholds",
]
