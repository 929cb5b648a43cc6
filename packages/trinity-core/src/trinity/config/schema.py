"""The configuration schema: one dataclass per section of a Trinity-RFT YAML file.

Field names and defaults follow the Trinity-RFT configuration guide so its configs load
unchanged. ``None`` means "derive it" (see ``trinity.config.check``). Free-form dicts
(``*_args``, ``trainer_config``, ``env_vars``) are passed on without key checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FormatConfig:
    """How the columns of a dataset map onto prompts, responses and preference pairs."""

    prompt_type: str = "plaintext"  # plaintext | messages
    prompt_key: str = "prompt"
    response_key: str = "response"
    system_prompt_key: str | None = None
    system_prompt: str | None = None
    messages_key: str = "messages"
    tools_key: str = "tools"
    chosen_key: str = "chosen"
    rejected_key: str = "rejected"
    workflow_key: str | None = None
    reward_fn_key: str | None = None
    enable_concatenated_multi_turn: bool = False
    chat_template: str | None = None
    skip_bad_rows: bool = False


@dataclass
class GenerationConfig:
    """Sampling settings of a taskset (``rollout_args``); unset ones come from ``model``."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    logprobs: int | None = None
    max_tokens: int | None = None
    n: int | None = None
    stop: list[str] | None = None


@dataclass
class TaskSelectorConfig:
    selector_type: str = "sequential"
    feature_keys: list[str] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class StorageConfig:
    """A taskset, an eval taskset, the experience buffer or an auxiliary buffer."""

    name: str = ""
    storage_type: str = "file"  # file | queue | sql (or a plugin's)
    path: str | None = None
    subset_name: str | None = None
    split: str = "train"
    repeat_times: int | None = None
    format: FormatConfig = field(default_factory=FormatConfig)
    rollout_args: GenerationConfig = field(default_factory=GenerationConfig)
    default_workflow_type: str | None = None
    default_eval_workflow_type: str | None = None
    default_reward_fn_type: str | None = None
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    task_selector: TaskSelectorConfig = field(default_factory=TaskSelectorConfig)
    index: int = 0
    # queue storage
    capacity: int = 10000
    max_read_timeout: float = 1800
    use_priority_queue: bool = False
    reuse_cooldown_time: float | None = None
    replay_buffer_kwargs: dict[str, Any] = field(default_factory=dict)
    # filled by the config pass from buffer / algorithm
    batch_size: int | None = None
    total_epochs: int | None = None
    total_steps: int | None = None
    is_eval: bool = False


@dataclass
class ExplorerInput:
    taskset: StorageConfig | None = None
    tasksets: list[StorageConfig] = field(default_factory=list)
    eval_tasksets: list[StorageConfig] = field(default_factory=list)
    default_workflow_type: str | None = None
    default_eval_workflow_type: str | None = None
    default_reward_fn_type: str | None = None
    system_prompt: str | None = None
    reply_prefix: str | None = None


@dataclass
class TrainerInput:
    experience_buffer: StorageConfig | None = None
    auxiliary_buffers: dict[str, StorageConfig] = field(default_factory=dict)


@dataclass
class BufferConfig:
    batch_size: int = 1
    train_batch_size: int = 0
    total_epochs: int = 1
    total_steps: int | None = None
    explorer_input: ExplorerInput = field(default_factory=ExplorerInput)
    trainer_input: TrainerInput = field(default_factory=TrainerInput)
    default_workflow_type: str | None = None
    default_reward_fn_type: str | None = None
    seed: int = 42


@dataclass
class OptimizerConfig:
    lr: float = 1e-6
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    min_lr_ratio: float = 0.0
    warmup_style: str = "constant"  # constant | cosine
    optimizer_type: str = "adamw"
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.01
    total_training_steps: int = -1


@dataclass
class AlgorithmConfig:
    """The RL algorithm; unset function names and args come from ``algorithm_type``."""

    algorithm_type: str = "ppo"
    repeat_times: int = 1
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    sample_strategy: str | None = None
    sample_strategy_args: dict[str, Any] | None = None
    advantage_fn: str | None = None
    advantage_fn_args: dict[str, Any] | None = None
    kl_penalty_fn: str | None = None
    kl_penalty_fn_args: dict[str, Any] | None = None
    kl_loss_fn: str | None = None
    kl_loss_fn_args: dict[str, Any] | None = None
    policy_loss_fn: str | None = None
    policy_loss_fn_args: dict[str, Any] | None = None
    entropy_loss_fn: str | None = None
    entropy_loss_fn_args: dict[str, Any] | None = None
    loss_agg_mode: str = "token-mean"


@dataclass
class ModelConfig:
    model_path: str = ""
    critic_model_path: str = ""
    custom_chat_template: str | None = None
    chat_template_path: str | None = None
    max_model_len: int | None = None
    max_prompt_tokens: int | None = None
    max_response_tokens: int | None = None
    min_response_tokens: int = 1
    enable_prompt_truncation: bool = True
    enable_thinking: bool | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    logprobs: int = 0
    repetition_penalty: float = 1.0


@dataclass
class InferenceModelConfig:
    """A rollout model (``explorer.rollout_model``) or an auxiliary model."""

    model_path: str = ""
    name: str | None = None
    engine_type: str = "vllm"
    engine_num: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    dtype: str = "bfloat16"
    seed: int = 42
    enforce_eager: bool = False
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = False
    use_v1: bool = True
    chat_template: str | None = None
    enable_thinking: bool | None = None  # None: the chat template's own default
    enable_history: bool = False
    enable_openai_api: bool = False
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    openai_api_host: str = "127.0.0.1"
    max_model_len: int | None = None
    max_prompt_tokens: int | None = None
    max_response_tokens: int | None = None
    min_response_tokens: int | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExplorerConfig:
    name: str = "explorer"
    runner_per_model: int = 8
    max_timeout: int = 1800
    max_retry_times: int = 2
    env_vars: dict[str, str] = field(default_factory=dict)
    rollout_model: InferenceModelConfig = field(default_factory=InferenceModelConfig)
    auxiliary_models: list[InferenceModelConfig] = field(default_factory=list)
    eval_interval: int = 100
    eval_on_startup: bool = True
    bench_on_latest_checkpoint: bool = False

    def inference_models(self) -> list[tuple[str, InferenceModelConfig]]:
        """The rollout model and the auxiliary models, each with its config key (for messages)."""
        models = [("explorer.rollout_model", self.rollout_model)]
        models += [(f"explorer.auxiliary_models[{i}]", m) for i, m in enumerate(self.auxiliary_models)]
        return models


@dataclass
class TrainerConfig:
    name: str = "trainer"
    trainer_type: str = "verl"
    save_interval: int = 0
    total_steps: int | None = None
    save_strategy: str = "unrestricted"  # single_thread | single_process | single_node | unrestricted
    save_hf_checkpoint: str = "last"  # last | always | never
    grad_clip: float = 1.0
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int | None = None
    micro_batch_size_per_gpu: int = 4
    ulysses_sequence_parallel_size: int = 1
    trainer_config: dict[str, Any] | None = None
    trainer_config_path: str = ""


@dataclass
class SynchronizerConfig:
    sync_method: str | None = None  # derived per mode when unset
    sync_style: str = "fixed"  # fixed | dynamic_by_explorer | dynamic_by_trainer
    sync_interval: int = 1
    sync_offset: int = 0
    sync_timeout: int = 3600


@dataclass
class MonitorConfig:
    monitor_type: Any = "tensorboard"  # one name or a list of names
    monitor_args: dict[str, Any] = field(default_factory=dict)
    enable_ray_timeline: bool = False


@dataclass
class ClusterConfig:
    node_num: int = 1
    gpu_per_node: int = 8
    ray_address: str = ""
    cpu_threads: int | None = None
    """Torch threads per explorer/trainer actor; default: all cores when they take turns
    (sync_offset 0, fixed style), an even share when they overlap."""


@dataclass
class DataJuicerServiceConfig:
    server_url: str | None = None
    auto_start: bool = False
    port: int = 5005


@dataclass
class ServiceConfig:
    data_juicer: DataJuicerServiceConfig | None = None


@dataclass
class OperatorConfig:
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskPipelineConfig:
    num_process: int = 1
    operators: list[OperatorConfig] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    target_fields: list[str] = field(default_factory=list)


@dataclass
class ExperiencePipelineConfig:
    operators: list[OperatorConfig] = field(default_factory=list)
    save_input: bool = False


@dataclass
class DataProcessorConfig:
    task_pipeline: TaskPipelineConfig | None = None
    experience_pipeline: ExperiencePipelineConfig | None = None


@dataclass
class LogConfig:
    level: str = "INFO"
    group_by_node: bool = False


@dataclass
class StageConfig:
    """One stage of ``stages``: overrides of the global sections for this stage only."""

    stage_name: str = ""
    mode: str | None = None
    algorithm: dict[str, Any] | None = None
    buffer: dict[str, Any] | None = None
    explorer: dict[str, Any] | None = None
    trainer: dict[str, Any] | None = None


@dataclass
class Config:
    """A whole experiment."""

    project: str = "Trinity-RFT"
    name: str = "rft"
    mode: str = "both"  # both | train | explore | bench
    checkpoint_root_dir: str = "./checkpoints"
    continue_from_checkpoint: bool = True
    ray_namespace: str = ""
    checkpoint_job_dir: str = ""
    """Derived: ``<checkpoint_root_dir>/<project>/<name>`` made absolute."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    synchronizer: SynchronizerConfig = field(default_factory=SynchronizerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    data_processor: DataProcessorConfig = field(default_factory=DataProcessorConfig)
    log: LogConfig = field(default_factory=LogConfig)
    stages: list[StageConfig] = field(default_factory=list)
