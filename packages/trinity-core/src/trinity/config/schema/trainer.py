"""The ``trainer`` section: the trainer's engine, checkpoints and batching."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.values import SaveHFCheckpoint, SaveStrategy, TrainerStrategy


class MegatronParallelConfig(ConfigModel):
    """Megatron-Core parallelism (trainer_strategy megatron, not in trinity): values off the defaults are refused."""

    tensor_model_parallel_size: int = Field(1, ge=1, description="Tensor parallel size.")
    pipeline_model_parallel_size: int = Field(1, ge=1, description="Pipeline parallel size.")
    virtual_pipeline_model_parallel_size: int | None = Field(None, ge=1, description="Virtual pipeline stages.")
    expert_model_parallel_size: int = Field(1, ge=1, description="Expert parallel size.")
    expert_tensor_parallel_size: int | None = Field(None, ge=1, description="Expert tensor parallel size.")
    context_parallel_size: int = Field(1, ge=1, description="Context parallel size.")
    sequence_parallel: bool = Field(True, description="Sequence parallelism.")


class TrainerConfig(ConfigModel):
    """The trainer: its engine, checkpoints and batching."""

    name: str = Field("trainer", description="Name of the trainer.")
    trainer_type: str = Field("verl", description="A training engine plugin: verl, torch, ...")
    trainer_strategy: TrainerStrategy = Field("fsdp2", description="verl's strategy: fsdp or fsdp2 (megatron: no).")
    save_interval: int = Field(0, ge=0, description="Steps between checkpoints; 0: only the last.")
    enable_preview: bool = Field(
        False,
        description="Log each step's first experiences as text, a rollout_preview table in the monitors "
        "(off here by default; Trinity-RFT's default is on).",
    )
    total_steps: int | None = Field(None, ge=1, description="Trainer steps before the end; unset: buffer.total_steps.")
    save_hf_checkpoint: SaveHFCheckpoint = Field(
        "last", description="Hugging Face weights with checkpoints: last, always or never."
    )
    grad_clip: float = Field(1.0, ge=0.0, description="Gradient-norm clipping; 0 disables it.")
    use_dynamic_bsz: bool = Field(True, description="Micro-batches by token budget (max_token_len_per_gpu).")
    use_remove_padding: bool = Field(True, description="Pack sequences without padding (verl).")
    balance_batch: bool = Field(
        True,
        description="verl: give each data-parallel rank rows of about equal work (verl's seqlen-balanced "
        "partitions; metrics global_seqlen/*). One rank (the torch trainer) has nothing to balance.",
    )
    critic_warmup: int = Field(
        0,
        ge=0,
        description="The actor trains from this step on (1-based, as verl); the critic at every step (PPO).",
    )
    max_token_len_per_gpu: int | None = Field(
        None,
        ge=1,
        description="Token budget of a micro-batch; unset: ceil(2 x max_model_len / sequence parallel), "
        "at least 16384 with the torch engine.",
    )
    micro_batch_size_per_gpu: int = Field(4, ge=1, description="Rows per micro-batch without dynamic batching.")
    ulysses_sequence_parallel_size: int = Field(1, ge=1, description="Ulysses sequence parallel size.")
    fix_actor_microbatch_loss_scale: bool = Field(
        True,
        description="Weigh each actor micro-batch's token-mean loss by its share of the batch's tokens, so "
        "micro-batches add up to the whole batch; false: by its share of rows (Trinity-RFT's default, verl's "
        "original scale). trinity's default is true.",
    )
    param_offload: bool = Field(False, description="Offload parameters to CPU (FSDP).")
    optimizer_offload: bool = Field(False, description="Offload optimizer state to CPU (FSDP).")
    grad_offload: bool = Field(
        False,
        description="Keep the gradients summed over micro-batches on the CPU while the next micro-batch runs "
        "(the torch engine; verl moves gradients with param_offload / offload_policy).",
    )
    offload_policy: bool = Field(False, description="FSDP2's CPU offload policy.")
    save_strategy: SaveStrategy = Field(
        "unrestricted", description="Who may save at once: single_thread, single_process, single_node, unrestricted."
    )
    max_checkpoints_to_keep: int = Field(0, ge=0, description="Checkpoints kept (oldest removed); 0 keeps all.")
    megatron: MegatronParallelConfig = Field(
        default_factory=MegatronParallelConfig, description="Megatron parallelism (not available)."
    )
    trust_remote_code: bool = derived(False, "model.trust_remote_code.")
    trainer_config: dict[str, Any] | None = Field(None, description="The training engine's own config (veRL's keys).")
    trainer_config_path: str = Field("", description="Deprecated: a YAML file of trainer_config.")
