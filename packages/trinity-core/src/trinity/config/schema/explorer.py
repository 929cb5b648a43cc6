"""The ``explorer`` section: the explorer, its rollout and auxiliary models."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.model import ExternalModelConfig
from trinity.config.schema.values import ConcurrentMode


class InferenceModelConfig(ConfigModel):
    """A rollout model (``explorer.rollout_model``) or an auxiliary model (judges, reward models)."""

    model_path: str | None = Field(None, description="Path of the model; the rollout model's is model.model_path.")
    name: str | None = Field(None, description="Name a workflow finds an auxiliary model by.")
    trust_remote_code: bool = Field(False, description="Allow the model's own code when loading it.")
    engine_type: str = Field("vllm", description="A rollout engine plugin: vllm, transformers, ...")
    engine_num: int = Field(1, ge=1, description="Engines (replicas) of this model.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per engine for tensor parallelism.")
    data_parallel_size: int = Field(
        1, ge=1, description="Data-parallel ranks inside one engine (vLLM's; other engines refuse more than 1)."
    )
    pipeline_parallel_size: int = Field(
        1, ge=1, description="Pipeline stages of one engine (vLLM's; other engines refuse more than 1)."
    )
    enable_expert_parallel: bool = Field(
        False, description="Spread a MoE model's experts over the engine's GPUs (vLLM's; other engines refuse it)."
    )
    gpu_per_engine: int = derived(0, "tensor x data x pipeline parallel size.", ge=0)
    extra_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Engine-specific arguments passed through (e.g. vLLM's)."
    )
    use_v1: bool = Field(True, description="vLLM's V1 engine, the only one since vLLM 0.11: false is refused at run.")
    enforce_eager: bool = Field(False, description="No CUDA graphs (vLLM).")
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prefixes (vLLM).")
    enable_chunked_prefill: bool = Field(True, description="Chunked prefill (vLLM).")
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0, description="GPU memory the engine may take.")
    dtype: str = Field("bfloat16", description="Weights' data type: bfloat16, float16, float32 or auto.")
    seed: int = Field(42, description="Seed of the engine's sampling.")
    temperature: float | None = derived(None, "Rollout temperature: model.temperature.", ge=0.0)
    top_p: float | None = derived(None, "Rollout nucleus mass: model.top_p.", gt=0.0, le=1.0)
    top_k: int | None = derived(None, "Rollout top-k: model.top_k.", ge=-1)
    logprobs: int | None = derived(None, "Log-probabilities returned: model.logprobs.", ge=0)
    max_model_len: int | None = Field(None, ge=1, description="Token limit; unset: model.max_model_len.")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Prompt limit; unset: model.max_prompt_tokens.")
    max_response_tokens: int | None = Field(None, ge=1, description="Response limit; unset: model.max_response_tokens.")
    min_response_tokens: int | None = Field(
        None, ge=0, description="Minimum response; unset: model.min_response_tokens."
    )
    enable_prompt_truncation: bool | None = Field(
        None, description="Cut long prompts; unset: model.enable_prompt_truncation."
    )
    repetition_penalty: float | None = Field(
        None, gt=0.0, description="Repetition penalty; unset: model.repetition_penalty."
    )
    ignore_eos: bool = Field(False, description="Generate past end-of-sequence up to the token limit (length tests).")
    enable_multimodal: bool = Field(
        False, description="Require a vision tower (a VLM takes images whether set or not; a text model refuses it)."
    )
    chat_template: str | None = Field(
        None, description="Chat template of this model; unset: model.custom_chat_template."
    )
    enable_thinking: bool | None = Field(
        None, description="enable_thinking of this model; unset: model.enable_thinking."
    )
    enable_history: bool = Field(False, description="Record every call's prompt, response and log-probs.")
    enable_openai_api: bool = Field(False, description="Serve an OpenAI-compatible endpoint for workflows (vLLM).")
    enable_log_requests: bool = Field(False, description="Log every request of the OpenAI endpoint (at INFO).")
    base_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Port of engine 0's OpenAI endpoint, engine i's is base_port + i; unset: free ports.",
    )
    api_key: str = Field(
        "EMPTY",
        description="Bearer token the OpenAI endpoints (and serve mode's proxy) require; EMPTY or empty: none, as in "
        "Trinity-RFT. Needed to bind them beyond loopback; the run's records show <hidden>.",
    )
    openai_api_host: str = Field(
        "127.0.0.1", description="Address the OpenAI endpoint binds to; beyond loopback, api_key is required."
    )
    enable_auto_tool_choice: bool = Field(False, description="Let the model call tools on its own (OpenAI endpoint).")
    tool_call_parser: str | None = Field(
        None,
        description="Parser of tool calls in responses (vLLM's names; the transformers engine's endpoint: hermes).",
    )
    reasoning_parser: str | None = Field(None, description="Parser of reasoning text in responses (vLLM's names).")
    external_model_config: ExternalModelConfig = Field(
        default_factory=ExternalModelConfig,
        description="The server of engine_type external; the rollout model's is model.external_model.",
    )
    nnodes: int = derived(1, "Nodes one engine spans.", ge=1)
    node_rank: int = derived(
        0, "Node of the engine: 0, an engine runs on one node here (set per engine by Trinity-RFT's launcher).", ge=0
    )
    enable_return_routed_experts: bool = derived(
        False, "Record each token's MoE experts with the completion (vLLM's name): algorithm.enable_router_replay."
    )
    weight_sync_buffer_size: int = Field(
        1024,
        ge=1,
        description="MB per broadcast of the NCCL weight sync: tensors of one dtype travel together up to it.",
    )
    bundle_indices: str = derived(
        "", "Placement-group bundles: none, Ray places each engine here (set per engine by Trinity-RFT's launcher)."
    )
    engine_id: int = derived(
        0, "Index of the engine among engine_num; each engine gets its own (offsets base_port).", ge=0
    )
    ray_namespace: str | None = derived(None, "The experiment's Ray namespace.")
    ray_actor_name: str | None = derived(
        None, "Name of the engine's actor: none, engines are unnamed here (set per engine by Trinity-RFT's launcher)."
    )
    sync_method: str | None = derived(None, "synchronizer.sync_method.")
    checkpoint_job_dir: str | None = derived(None, "The job folder.")
    cuda_visible_devices: str | None = derived(
        None, "GPUs of the engine: none, Ray assigns them here (set per engine by Trinity-RFT's launcher)."
    )
    enable_lora: bool = derived(False, "Whether model.lora_configs is set (the rollout model only).")
    enable_runtime_lora_updating: bool = Field(
        False,
        description="Serve the trained LoRA adapter on the vLLM engine's OpenAI endpoint as model "
        "model.lora_configs[0].name (unset: lora; listed first), each synced version swapped in without a restart; "
        "the base model keeps its own name. Needs enable_openai_api and model.lora_configs.",
    )
    lora_modules: list[dict[str, Any]] | None = derived(None, "The adapters of model.lora_configs, for the engine.")
    lora_kwargs: dict[str, Any] = derived(
        default_factory=dict, description="max_loras and max_lora_rank, from model.lora_configs."
    )
    rope_scaling: dict[str, Any] | None = derived(None, "model.rope_scaling.")
    rope_theta: float | None = derived(None, "model.rope_theta.")

    def endpoint_key(self) -> str | None:
        """The token the endpoints require, None for none: Trinity-RFT's default ``EMPTY`` (what
        OpenAI clients send when a server takes no key) and an empty string mean no key."""
        return None if self.api_key in ("", "EMPTY") else self.api_key

    def ranks_per_engine(self) -> int:
        """The processes (one GPU each) one engine spreads over: tensor x data x pipeline parallel size."""
        return self.tensor_parallel_size * self.data_parallel_size * self.pipeline_parallel_size


class OverRolloutConfig(ConfigModel):
    """Start more tasks than a step needs and keep the first ones that finish."""

    ratio: float = Field(0.0, ge=0.0, lt=1.0, description="Fraction of a step's tasks the explorer does not wait for.")
    wait_after_min: float = Field(30.0, ge=0.0, description="Seconds to wait once the minimum of tasks finished.")
    return_partial_tasks: bool = Field(False, description="Keep the finished runs of a task cut short.")


class DynamicTimeoutConfig(ConfigModel):
    """A per-task timeout from the durations of recent tasks."""

    enable: bool = Field(False, description="Derive the task timeout from recent run durations.")
    warmup_min_steps: int = Field(1, ge=0, description="Batches fully observed before the timeout adapts.")
    ratio: float = Field(3.0, gt=0.0, description="Timeout = mean recent run time x ratio (at most max_timeout).")


class ExplorerConfig(ConfigModel):
    """The explorer: workflow runners, the rollout and auxiliary models, evaluation."""

    name: str = Field("explorer", description="Name of this explorer (several may feed one trainer).")
    mode: str = derived("both", "The experiment's mode.")
    runner_per_model: int = Field(8, ge=1, description="Workflows run at once per rollout engine.")
    max_timeout: int = Field(1800, gt=0, description="Seconds a task may take before it fails.")
    max_retry_times: int = Field(2, ge=0, description="Retries of a failed task.")
    env_vars: dict[str, str] = Field(default_factory=dict, description="Environment variables of the workflows.")
    concurrent_mode: ConcurrentMode = Field(
        "sequential", description="How one runner runs a task's repeats: sequential, asynchronous or multi-threading."
    )
    max_repeat_times_per_runner: int | None = Field(
        None, ge=1, description="Repeats of a task one runner job takes at most; unset: all of them."
    )
    rollout_model: InferenceModelConfig = Field(
        default_factory=InferenceModelConfig, description="The policy's engines."
    )
    auxiliary_models: list[InferenceModelConfig] = Field(
        default_factory=list, description="More models for workflows (judges, reward models)."
    )
    eval_interval: int = Field(100, ge=1, description="Explorer steps between evaluations.")
    eval_on_startup: bool = Field(True, description="Evaluate before the first step.")
    bench_on_latest_checkpoint: bool = Field(False, description="Bench mode: evaluate only the latest checkpoint.")
    proxy_port: int = Field(8010, ge=1, le=65535, description="Port of the serve-mode proxy.")
    listen_address: str = Field(
        "127.0.0.1",
        description="Address the serve-mode proxy binds to. Trinity-RFT's 0.0.0.0 let any host that reaches the "
        "port score and commit training data; beyond loopback, explorer.rollout_model.api_key is required.",
    )
    service_status_check_interval: int = Field(
        60,
        gt=0,
        description="Serve mode: the proxy looks for the trainer's newer weights every half of it (seconds).",
    )
    min_running_model_num: int = Field(
        1,
        ge=1,
        description="Serve mode: engines kept serving while the others load newer weights (in waves); with no "
        "more engines than this, all load at once between their requests.",
    )
    db_url: str | None = Field(
        None,
        description="Serve mode: a database (SQLAlchemy URL or sqlite file) where the proxy records each answered "
        "chat completion and its feedback (table proxy_history); unset: none (Trinity-RFT's default is a sqlite "
        "file in the buffer's cache_dir, where its proxy keeps the responses awaiting feedback; trinity keeps them "
        "in memory).",
    )
    proxy_max_memory_mb: float = Field(
        1024,
        gt=0,
        description="Serve mode: MiB the proxy holds at most, counted in bytes: the responses waiting for feedback "
        "(their messages without unknown fields, tokens and logprobs) and the scored experiences waiting for /commit. "
        "Beyond, the oldest unscored responses expire; a chat is a 409 while scored ones fill it (trinity only: "
        "Trinity-RFT's proxy keeps them in its database).",
    )
    over_rollout: OverRolloutConfig = Field(default_factory=OverRolloutConfig, description="Straggler control.")
    dynamic_timeout: DynamicTimeoutConfig = Field(
        default_factory=DynamicTimeoutConfig, description="Adaptive task timeout."
    )
    runner_state_report_interval: int = Field(
        0, ge=0, description="Seconds between log lines of a running batch's progress and busy runners; 0: none."
    )
    max_inflight_batches: int = Field(2, ge=1, description="Batches in flight at once with sync_style fully_async.")

    def inference_models(self) -> list[tuple[str, InferenceModelConfig]]:
        """The rollout model and the auxiliary models, each with its config key (for messages)."""
        models = [("explorer.rollout_model", self.rollout_model)]
        models += [(f"explorer.auxiliary_models[{i}]", m) for i, m in enumerate(self.auxiliary_models)]
        return models
