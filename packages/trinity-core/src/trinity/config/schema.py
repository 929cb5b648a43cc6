"""The configuration schema: every section and key of a Trinity-RFT YAML file, declared once.

Each field carries its type, default, range or allowed values and a one-line description; from
them come validation, ``trinity config schema`` (JSON Schema), docs/config.md and the studio's
form. Names, defaults and meanings follow Trinity-RFT's 0.6 ``config.py`` so that its configs load
unchanged; ``None`` means "derive it" (``trinity.config.derive``). ``inert(...)`` marks a key
accepted but not acted on (it warns), ``derived(...)`` one the derivation fills (a value in the
file is replaced). Free-form mappings (``*_args``, ``trainer_config``) are checked by their owner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    StringConstraints,
    field_validator,
    model_validator,
)

from trinity.config.base import ConfigModel, derived, inert

# Why an inert key cannot act here, shared by the keys it holds for (see ``inert``).
_RUNNERS = "trinity's workflow runners are coroutines of the explorer, not actors to prepare"
_COD = (
    "read only by Trinity-RFT's Connect-the-Dots research workflows (cod_*: task packs solved with iterative "
    "hints, and the cod advantage's reward-to-go), which trinity does not ship"
)


def _choice(aliases: dict[str, str] | None = None, case: str = "lower") -> BeforeValidator:
    """Case-insensitive enum values, with older names mapped to the current ones."""

    def normalise(value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().upper() if case == "upper" else value.strip().lower()
            return (aliases or {}).get(value, value)
        return getattr(value, "value", value)  # an Enum member

    return BeforeValidator(normalise)


# --- value types -------------------------------------------------------------------------

Mode = Annotated[Literal["both", "train", "explore", "bench", "serve", "colocate"], _choice()]
PromptType = Annotated[Literal["messages", "plaintext"], _choice()]
Durability = Annotated[Literal["fast", "safe"], _choice()]
SyncStyle = Annotated[
    Literal["fixed", "trainer_driven", "explorer_driven", "fully_async"],
    _choice({"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}),
]
SyncMethodName = Annotated[str, _choice({"online": "nccl", "offline": "checkpoint"})]
"""A sync method plugin's name (``online`` and ``offline`` are Trinity-RFT's old names)."""
SaveStrategy = Annotated[Literal["single_thread", "single_process", "single_node", "unrestricted"], _choice()]
SaveHFCheckpoint = Annotated[Literal["last", "always", "never"], _choice()]
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], _choice(case="upper")]
LossAggMode = Annotated[
    Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"],
    _choice(),
]
ConcurrentMode = Annotated[Literal["sequential", "asynchronous", "multi-threading"], _choice()]
LRSchedulerType = Annotated[Literal["constant", "cosine"], _choice()]
TrainerStrategy = Annotated[Literal["fsdp", "fsdp2", "megatron"], _choice()]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


def _monitor_names(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


# --- data --------------------------------------------------------------------------------


class FormatConfig(ConfigModel):
    """How the columns of a dataset map onto prompts, responses and preference pairs."""

    prompt_type: PromptType | None = Field(
        None,
        description="messages (a list of chat messages) or plaintext (prompt/response columns); "
        "unset: messages for SFT/DPO data (as Trinity-RFT), plaintext for tasksets",
    )
    prompt_key: str = Field("prompt", description="Column of the user prompt (plaintext).")
    response_key: str = Field("response", description="Column of the assistant response (plaintext).")
    system_prompt_key: str | None = Field(None, description="Column of a per-row system prompt (plaintext).")
    system_prompt: str | None = Field(None, description="System prompt of every row; system_prompt_key wins.")
    messages_key: str = Field("message", description="Column of the message list (prompt_type messages).")
    tools_key: str = Field("tools", description="Column of the tool schemas offered to the model.")
    image_key: str | None = Field(
        None, description="Column of a row's images (a path, bytes or a list of them) for a vision-language model."
    )
    video_key: str | None = Field(
        None, description="Column of a row's videos; refused at rollout here (video processors need torchvision)."
    )
    reply_prefix: str | None = Field(None, description="Text the assistant's reply starts with (appended to prompts).")
    workflow_key: str | None = Field(None, description="Column naming a per-row workflow (overrides the taskset's).")
    reward_fn_key: str | None = Field(None, description="Column naming a per-row reward function.")
    chosen_key: str = Field("chosen", description="Column of the preferred response (DPO).")
    rejected_key: str = Field("rejected", description="Column of the rejected response (DPO).")
    enable_concatenated_multi_turn: bool = Field(
        False, description="SFT on every assistant turn of a conversation, not only the last."
    )
    chat_template: str | None = Field(None, description="Jinja chat template for this data; unset: the model's.")
    enable_thinking: bool | None = Field(
        None, description="Chat template's enable_thinking for this data (Qwen3); unset: the model's."
    )
    skip_bad_rows: bool = Field(False, description="Skip rows that do not fit the format (with a warning per row).")


class GenerationConfig(ConfigModel):
    """Sampling settings of a taskset (``rollout_args``); unset ones come from ``model``."""

    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature; 0 is greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int | None = Field(None, ge=-1, description="Top-k sampling; -1 disables it.")
    logprobs: int | None = Field(None, ge=0, description="Top log-probabilities returned per token.")
    max_tokens: int | None = Field(None, ge=1, description="Response length limit; unset: model.max_response_tokens.")
    n: int | None = derived(None, "Samples per task: algorithm.repeat_times (eval: the taskset's repeat_times).")
    stop: list[str] | None = Field(None, description="Stop strings that end a response.")


class DataSelectorConfig(ConfigModel):
    """How the next batch of tasks is picked from a taskset."""

    selector_type: str = Field("sequential", description="A task selector plugin: sequential, shuffle, random, ...")
    seed: int | None = Field(None, description="Seed of the selector's order; unset: buffer.seed.")
    feature_keys: list[str] = Field(default_factory=list, description="Columns the selector reads (difficulty).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Selector-specific arguments.")


class ReplayBufferConfig(ConfigModel):
    """Prioritised replay on a queue buffer: experiences are read by priority and may be reused."""

    enable: bool = Field(False, description="Read by priority instead of first-in-first-out.")
    priority_fn: str = Field(
        "linear_decay", description="A priority function plugin: linear_decay, decay_limit_randomization."
    )
    reuse_cooldown_time: float | None = Field(
        None, ge=0, description="Seconds before a read experience may be read again; unset: never reused."
    )
    priority_fn_args: dict[str, Any] = Field(
        default_factory=lambda: {"decay": 2.0}, description="Arguments of the priority function (its Args)."
    )


class StorageConfig(ConfigModel):
    """What tasksets and experience buffers share: where the data lives and how rows are read."""

    name: str = Field("", description="Name of this buffer (metrics, files and tables are named after it).")
    storage_type: str = Field("file", description="A buffer storage plugin: file, queue or sql.")
    path: str | None = Field(
        None,
        description="File, folder, dataset id or database URL of the data; the run's records show a URL's "
        "password as ***.",
    )
    split: str = Field("train", description="Dataset split to read.")
    subset_name: str | None = Field(None, description="Dataset subset (configuration) name.")
    format: FormatConfig = Field(default_factory=FormatConfig, description="Column mapping of the rows.")
    data_selector: DataSelectorConfig = Field(
        default_factory=DataSelectorConfig, description="How rows are picked (order, curriculum)."
    )
    max_retry_times: int = Field(
        3,
        ge=0,
        description="Attempts to connect to a database server (sql, or a queue on one) before an operation fails "
        "(0 and 1: one). An append whose connection drops is tried as often, and stored once (the writer's append "
        "count says whether the lost commit landed); other operations that fail once connected are not repeated.",
    )
    max_retry_interval: int = Field(1, gt=0, description="Seconds between those attempts.")
    enable_progress_bar: bool = Field(False, description="Show datasets' progress bars while a dataset loads.")
    ray_namespace: str | None = Field(
        None, description="Ray namespace of the buffer (another experiment's, to share it); unset: this one's."
    )
    index: int = derived(0, "Read position; restored from the checkpoint on resume.", ge=0)
    batch_size: int = derived(0, "Rows per read: buffer.batch_size (tasksets) or buffer.train_batch_size.", ge=0)
    total_epochs: int = Field(
        1, ge=1, description="Epochs over the data; tasksets and the experience buffer take buffer.total_epochs."
    )
    total_steps: int | None = Field(
        None, ge=1, description="Reads before the end; tasksets and the experience buffer take buffer.total_steps."
    )
    is_eval: bool = derived(False, "Whether this is an eval taskset.")
    tokenizer_path: str | None = derived(None, "Tokenizer of the data: model.model_path.")
    schema_type: str | None = Field(
        None,
        description="Row schema: rollout (Trinity-RFT: experience, task), sft, dpo or cpt; the experience buffer's "
        "is the algorithm's. SFT/DPO rows: a message list (or plaintext columns), tools in tools_key.",
    )

    @property
    def jsonl_file(self) -> bool:
        """``path`` names one JSON-lines file (``.jsonl``/``.json``), not a folder or a database."""
        return (self.path or "").endswith((".jsonl", ".json"))


class TasksetConfig(StorageConfig):
    """A taskset the explorer rolls out (``buffer.explorer_input.taskset(s)``, ``eval_tasksets``)."""

    repeat_times: int | None = Field(
        None, ge=1, description="Rollouts per task; train tasksets use algorithm.repeat_times, eval ones default 1."
    )
    task_dir: str | None = Field(
        None,
        description="A folder of tasksets instead of path: each data file (.jsonl, .json, .parquet, .csv, .arrow) "
        "is a taskset with these settings, named <name>/<file stem>.",
    )
    default_workflow_type: str | None = Field(None, description="Workflow of the rows (a name or module.Class).")
    default_eval_workflow_type: str | None = Field(None, description="Workflow of the rows when evaluating.")
    default_reward_fn_type: str | None = Field(None, description="Reward function of the rows.")
    workflow_args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the workflow.")
    reward_fn_args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the reward function.")
    rollout_args: GenerationConfig = Field(default_factory=GenerationConfig, description="Sampling settings.")

    renamed: ClassVar[dict[str, str]] = {"task_selector": "data_selector"}


class ExperienceBufferConfig(StorageConfig):
    """The buffer between explorer and trainer, or an auxiliary buffer the trainer reads."""

    storage_type: str = Field("queue", description="A buffer storage plugin: queue, sql or file.")
    capacity: int = Field(10000, ge=1, description="Experiences a queue holds before writers wait.")
    max_read_timeout: float = Field(1800, gt=0, description="Seconds a reader waits for a batch before giving up.")
    writer_timeout: float = Field(
        60,
        gt=0,
        description="Seconds without a writer's heartbeat after which a reader with nothing to read counts it as "
        "dead and stops (sql, file and durable queue buffers); writers beat 4 times per timeout.",
    )
    durability: Durability = derived("fast", "buffer.durability.")
    trust_pickled_rows: bool = Field(
        False,
        description="Read rows a trinity before 2026-11-27 stored with a pickled header (sql). Unpickling runs "
        "whatever code a row's writer put there: only for a database no one else can write; "
        "`trinity buffer migrate` rewrites them without pickle instead.",
    )
    replay_buffer: ReplayBufferConfig = Field(
        default_factory=ReplayBufferConfig,
        description="Prioritised replay of experiences (queue; with a path it survives restarts).",
    )

    renamed: ClassVar[dict[str, str]] = {
        "use_priority_queue": "replay_buffer.enable",
        "reuse_cooldown_time": "replay_buffer.reuse_cooldown_time",
    }


class ExplorerInput(ConfigModel):
    """The tasksets the explorer rolls out and evaluates."""

    taskset: TasksetConfig | None = Field(None, description="The one training taskset (or use tasksets).")
    tasksets: list[TasksetConfig] = Field(default_factory=list, description="Training tasksets, read in turn.")
    eval_tasksets: list[TasksetConfig] = Field(
        default_factory=list, description="Tasksets evaluated every eval_interval."
    )
    default_workflow_type: str | None = Field(None, description="Workflow of tasksets that name none.")
    default_eval_workflow_type: str | None = Field(None, description="Eval workflow of tasksets that name none.")
    default_reward_fn_type: str | None = Field(None, description="Reward function of tasksets that name none.")
    system_prompt: str | None = Field(
        None, description="Deprecated: format.system_prompt of every taskset that sets none."
    )
    reply_prefix: str | None = Field(
        None, description="Deprecated: format.reply_prefix of every taskset that sets none."
    )
    _moved_taskset: bool = PrivateAttr(False)

    def move_taskset(self) -> None:
        """Make a ``taskset`` the one item of ``tasksets``, remembering the key the file used."""
        self.tasksets, self.taskset, self._moved_taskset = [self.taskset], None, True

    def taskset_key(self, group: str, i: int) -> str:
        """The dotted key of ``group[i]`` (``tasksets`` or ``eval_tasksets``) as the file wrote it."""
        if group == "tasksets" and self._moved_taskset:
            return "buffer.explorer_input.taskset"
        return f"buffer.explorer_input.{group}[{i}]"


class TrainerInput(ConfigModel):
    """What the trainer reads."""

    experience_buffer: ExperienceBufferConfig | None = Field(
        None, description="The explorer's output (a queue by default), or the SFT/DPO dataset in mode train."
    )
    auxiliary_buffers: dict[str, ExperienceBufferConfig] = Field(
        default_factory=dict, description="More buffers by name, e.g. expert data for the mix algorithm."
    )


class BufferConfig(ConfigModel):
    """Batch sizes, epochs and the explorer's and trainer's inputs."""

    batch_size: int = Field(1, ge=1, description="Tasks per explorer step.")
    train_batch_size: int = Field(
        0, ge=0, description="Experiences per trainer step; 0: batch_size x algorithm.repeat_times."
    )
    total_epochs: int = Field(1, ge=1, description="Passes over the training tasksets (or SFT data).")
    total_steps: int | None = Field(None, ge=1, description="Steps before the run ends; unset: by epochs.")
    explorer_input: ExplorerInput = Field(default_factory=ExplorerInput, description="Tasksets of the explorer.")
    trainer_input: TrainerInput = Field(default_factory=TrainerInput, description="Buffers of the trainer.")
    default_workflow_type: str | None = Field(None, description="Deprecated: explorer_input.default_workflow_type.")
    default_reward_fn_type: str | None = Field(None, description="Deprecated: explorer_input.default_reward_fn_type.")
    seed: int = Field(42, description="Seed of data order (task selectors without a seed, SFT shuffling).")
    durability: Durability = Field(
        "fast",
        description="fast: a power loss may roll back the last steps consistently (sqlite synchronous=NORMAL); "
        "safe: every commit and metadata file is on disk when written (synchronous=FULL, fsync).",
    )
    explorer_output: dict[str, Any] | None = derived(None, "The explorer's output buffer: the experience buffer.")

    tokenizer_path: str | None = derived(None, "Tokenizer of the buffers: model.model_path.")
    cache_dir: str | None = derived(None, "Folder of the run's buffer files: <job dir>/buffer.")


# --- data processing ---------------------------------------------------------------------


class OperatorConfig(ConfigModel):
    """One operator of a pipeline: a registered name and its arguments."""

    name: str = Field("", description="The operator's registered name.")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the operator.")


class ExperiencePipelineConfig(ConfigModel):
    """Operators applied to every batch of experiences between explorer and buffer."""

    operators: list[OperatorConfig] = Field(
        default_factory=list, description="Experience operators applied in order to each batch of experiences."
    )
    save_input: bool = Field(
        True, description="Keep each batch as it came in, before the operators (only with operators)."
    )
    input_save_path: str | None = Field(
        None,
        description="Where save_input appends: a jsonl file, or sqlite (.db, .sqlite); "
        "unset: <checkpoint_job_dir>/experience_pipeline_input.jsonl.",
    )
    inputs: dict[str, ExperienceBufferConfig] = inert(
        default_factory=dict,
        description="Extra input buffers.",
        reason="Trinity-RFT builds readers of these buffers but its pipeline never reads them (it processes the "
        "explorer's experiences only), as trinity's does",
    )
    output: ExperienceBufferConfig | None = derived(None, "The pipeline's output: the trainer's experience buffer.")


class TaskPipelineConfig(ConfigModel):
    """Data-Juicer operators that turn raw data into the taskset before exploring."""

    operators: list[OperatorConfig] = Field(
        default_factory=list, description="Data-Juicer operators, in order (name: a Data-Juicer op, args: its args)."
    )
    num_process: int = Field(4, ge=1, description="Worker processes of Data-Juicer.")
    config_path: str | None = Field(
        None, description="A Data-Juicer recipe; when set, operators and num_process are ignored."
    )
    inputs: list[str] = Field(default_factory=list, description="Raw input files (jsonl, json, parquet, csv).")
    output: TasksetConfig | None = Field(
        None, description="The taskset written (a .jsonl path, or a folder for output.jsonl); unset: the first taskset."
    )
    target_fields: list[str] = Field(
        default_factory=list, description="Text fields the operators read, and the fields kept; unset: text, all."
    )
    priority_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Weights of difficulty, diversity, usage_frequency and quality in the order of the tasks.",
    )
    top_k: int = Field(-1, ge=-1, description="Tasks kept after scoring, best first; -1 keeps all.")


class DataProcessorConfig(ConfigModel):
    """Task and experience pipelines."""

    task_pipeline: TaskPipelineConfig | None = Field(
        None, description="Raw data to taskset with Data-Juicer; trinity run runs it before exploring."
    )
    experience_pipeline: ExperiencePipelineConfig = Field(
        default_factory=ExperiencePipelineConfig, description="Experiences to buffer, while exploring."
    )


class DataJuicerServiceConfig(ConfigModel):
    """A Data-Juicer server that runs the recipes of data_processor; unset: they run in the process that needs them."""

    server_url: str | None = Field(
        None, description="URL of a running trinity Data-Juicer server (python -m trinity.buffer.data_juicer)."
    )
    auto_start: bool = Field(False, description="Start a local Data-Juicer server for the run (wins over server_url).")
    port: int | None = Field(None, ge=1, le=65535, description="Port of the auto-started server; unset: a free one.")
    allow_code_ops: bool = Field(
        False,
        description="Let the auto-started server run any operator and argument, not only its allowlist's "
        "(python_lambda_mapper, custom_operator_paths, trust_remote_code: runs code); a server at server_url "
        "decides itself.",
    )
    max_request_mb: int = Field(64, ge=1, description="Largest request body the auto-started server accepts, in MiB.")
    max_rows: int = Field(100_000, ge=1, description="Most rows per request the auto-started server accepts.")


class ServiceConfig(ConfigModel):
    """Services outside the run."""

    data_juicer: DataJuicerServiceConfig | None = Field(None, description="The Data-Juicer service.")


# --- models ------------------------------------------------------------------------------


class OptimizerConfig(ConfigModel):
    """The actor's optimizer and learning-rate schedule."""

    lr: float = Field(1e-6, gt=0.0, description="Peak learning rate.")
    lr_warmup_steps: int = Field(-1, ge=-1, description="Linear warm-up steps; -1: use lr_warmup_steps_ratio.")
    lr_warmup_steps_ratio: Probability = Field(0.0, description="Warm-up as a fraction of the total steps.")
    min_lr_ratio: Probability = Field(0.01, description="Final learning rate of the cosine schedule, relative to lr.")
    lr_scheduler_type: LRSchedulerType = Field("constant", description="constant or cosine (after warm-up).")
    optimizer_type: str = Field("adam", description="Optimizer: adam(w) (verl's AdamW).")
    betas: list[float] = Field(
        default_factory=lambda: [0.9, 0.999], min_length=2, max_length=2, description="Adam betas."
    )
    weight_decay: float = Field(0.01, ge=0.0, description="Decoupled weight decay.")
    clip_grad: float = Field(1.0, ge=0.0, description="Gradient-norm clipping; same as trainer.grad_clip.")
    total_training_steps: int = Field(-1, ge=-1, description="Steps of the schedule; -1: the run's total steps.")

    renamed: ClassVar[dict[str, str]] = {"warmup_style": "lr_scheduler_type"}


class LoRAConfig(ConfigModel):
    """A LoRA adapter of the rollout model, trained alone (peft) while the base stays frozen; only
    the adapter is synced and checkpointed (the torch trainer and transformers engine take it)."""

    name: str | None = Field(None, description="Adapter name (the rollout engine's lora_modules).")
    path: str | None = Field(None, description="A saved peft adapter to start from; unset: a fresh adapter (B = 0).")
    base_model_name: str | None = Field(None, description="Name of the base model the adapter belongs to.")
    lora_rank: int = Field(32, ge=0, description="Rank r of the adapter.")
    lora_alpha: int = Field(32, ge=0, description="Scaling alpha of the adapter (its update is scaled by alpha / r).")
    lora_dtype: Literal["auto", "float16", "bfloat16"] = Field(
        "auto",
        description="Data type of the adapter in vLLM (auto: the model's); the reference engines hold it as the model.",
    )
    target_modules: str | list[str] = Field(
        "all-linear",
        description="Modules the adapter wraps: all-linear (every linear layer but the LM head), names, or a regex.",
    )
    exclude_modules: str | list[str] | None = Field(
        None, description="Modules left without an adapter: names or a regex."
    )
    is_dummy: bool = derived(False, "Whether the adapter starts fresh (no path).")


class TinkerConfig(ConfigModel):
    """Training and sampling on the hosted Tinker service instead of local engines (Trinity-RFT's and its
    forks' keys): refused at ``trinity run``, a warning at ``trinity config check`` (no Tinker backend here)."""

    enable: bool = Field(False, description="Train and sample on the Tinker service (refused here).")
    base_model: str | None = Field(None, description="Tinker's name of the base model; unset: model.model_path.")
    rank: int = Field(16, ge=1, description="LoRA rank on Tinker.")
    seed: int | None = Field(None, description="Seed on Tinker.")
    train_mlp: bool = Field(True, description="Train the MLP layers.")
    train_attn: bool = Field(True, description="Train the attention layers.")
    train_unembed: bool = Field(True, description="Train the unembedding.")
    base_url: str | None = Field(None, description="URL of the Tinker service; unset: the client's default.")
    full_param: bool = Field(False, description="Train every weight instead of a LoRA adapter.")
    server_loss_fn: str | None = Field(
        None, description="A loss the service computes; unset: the loss is the client's."
    )
    server_loss_fn_config: dict[str, Any] | None = Field(None, description="Arguments of server_loss_fn.")
    server_loss_send_mask: bool = Field(False, description="Send the response mask with server_loss_fn's inputs.")
    forward_backward_chunk_bytes: int | None = Field(
        None, ge=1, description="Bytes per forward_backward request; unset: the whole batch in one."
    )
    forward_backward_max_inflight: int = Field(1, ge=1, description="forward_backward chunks in flight at once.")
    sdk_chunk_bytes_cap: int | None = Field(None, ge=1, description="The client's byte limit of one request.")


class ExternalModelConfig(ConfigModel):
    """A model served by an OpenAI-compatible API (bench mode)."""

    enable: bool = Field(False, description="Evaluate the external model instead of a local one (bench mode).")
    base_url_env: str = Field("OPENAI_BASE_URL", description="Environment variable holding the API's base URL.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    model_name: str | None = Field(None, description="Model name sent to the API.")


class ModelConfig(ConfigModel):
    """The model trained, and the defaults of its rollouts."""

    model_path: str = Field("", description="Path or hub id of the model to train.")
    trust_remote_code: bool = Field(False, description="Allow the model's own code when loading it.")
    critic_model_path: str = Field("", description="Path of the critic (PPO); unset: model_path.")
    custom_chat_template: str | None = Field(None, description="Jinja chat template replacing the tokenizer's.")
    chat_template_path: str | None = Field(
        None, description="File of a chat template, read when custom_chat_template is unset."
    )
    temperature: float = Field(1.0, ge=0.0, description="Rollout temperature; 0 is greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Rollout nucleus mass.")
    top_k: int = Field(-1, ge=-1, description="Rollout top-k; -1 disables it.")
    logprobs: int = Field(0, ge=0, description="Top log-probabilities returned per token.")
    max_model_len: int | None = Field(None, ge=1, description="Prompt + response token limit.")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Prompt token limit.")
    max_response_tokens: int | None = Field(None, ge=1, description="Response token limit.")
    min_response_tokens: int = Field(0, ge=0, description="Tokens generated before end-of-sequence is allowed.")
    enable_prompt_truncation: bool = Field(True, description="Cut prompts to max_prompt_tokens (left side).")
    repetition_penalty: float = Field(1.0, gt=0.0, description="Penalty of repeated tokens; 1 is none.")
    enable_thinking: bool | None = Field(
        None, description="Chat template's enable_thinking (Qwen3); unset: the template's default."
    )
    lora_configs: list[LoRAConfig] | None = Field(
        None, description="LoRA adapter trained instead of the full model (one, as in Trinity-RFT)."
    )
    fully_sharded_loras: bool = Field(
        False, description="vLLM: shard the adapter across tensor-parallel ranks (vLLM's fully_sharded_loras)."
    )
    max_cpu_loras: int | None = Field(
        None, ge=1, description="vLLM: adapters kept in CPU memory (vLLM's max_cpu_loras; unset: max_loras)."
    )
    rope_scaling: dict[str, Any] | None = Field(
        None, description="RoPE scaling over the checkpoint's (rope_type, factor, ...); the verl trainer refuses it."
    )
    rope_theta: float | None = Field(
        None, gt=0, description="RoPE base over the checkpoint's; the verl trainer refuses it."
    )
    tinker: TinkerConfig = Field(default_factory=TinkerConfig, description="Tinker service settings.")
    external_model: ExternalModelConfig = Field(
        default_factory=ExternalModelConfig, description="An API model to evaluate (bench mode)."
    )

    def chat_template_settings(
        self, chat_template: str | None = None, enable_thinking: bool | None = None
    ) -> tuple[str | None, bool | None]:
        """The template and ``enable_thinking`` of this model, a model section or a dataset format.

        The template: its own, else ``custom_chat_template``, else the file at ``chat_template_path``
        (OSError if unreadable), else None (the tokenizer's). ``enable_thinking``: its own, else the
        model's (None: the template's own default). Derivation and tokenizers both apply it.
        """
        template = chat_template or self.custom_chat_template
        if template is None and self.chat_template_path is not None:
            template = Path(self.chat_template_path).read_text()
        return template, self.enable_thinking if enable_thinking is None else enable_thinking


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

    renamed: ClassVar[dict[str, str]] = {"engine_args": "extra_engine_args"}

    def endpoint_key(self) -> str | None:
        """The token the endpoints require, None for none: Trinity-RFT's default ``EMPTY`` (what
        OpenAI clients send when a server takes no key) and an empty string mean no key."""
        return None if self.api_key in ("", "EMPTY") else self.api_key

    def ranks_per_engine(self) -> int:
        """The processes (one GPU each) one engine spreads over: tensor x data x pipeline parallel size."""
        return self.tensor_parallel_size * self.data_parallel_size * self.pipeline_parallel_size


# --- algorithm ---------------------------------------------------------------------------

ROLLOUT_RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)  # fmt: skip
"""verl 0.9's rejection-sampling criteria: ``token`` / ``seq_sum`` / ``seq_mean`` / ``seq_max`` of
the per-token ``k1 = -log r``, ``k2 = (log r)^2 / 2`` or ``k3 = r - 1 - log r``."""


def _rc(rollout_is: str | None, rollout_rs: str | None = None, rs: Any = None, **extra: Any) -> dict[str, Any]:
    values = {"rollout_is": rollout_is, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False}
    values.update(rollout_rs=rollout_rs, rollout_rs_threshold=rs, bypass_mode=False, loss_type="ppo_clip")
    return {**values, **extra}


_BYPASS_PG = {"bypass_mode": True, "loss_type": "reinforce"}
_GEO = ("seq_mean_k1", "0.999_1.001")
_K3 = ("seq_mean_k3", 0.01)
ROLLOUT_CORRECTION_PRESETS: dict[str, dict[str, Any]] = {
    "decoupled_token_is": _rc("token"),
    "decoupled_seq_is": _rc("sequence"),
    "decoupled_token_icepop": _rc("token", rollout_is_threshold="0.5_5.0"),
    "decoupled_seq_is_rs": _rc("sequence", "seq_sum_k1", "0.5_2.0"),
    "decoupled_geo_rs": _rc(None, *_GEO),
    "decoupled_geo_rs_seq_tis": _rc("sequence", *_GEO),
    "decoupled_geo_rs_token_tis": _rc("token", *_GEO),
    "decoupled_k3_rs": _rc(None, *_K3),
    "decoupled_k3_rs_seq_tis": _rc("sequence", *_K3),
    "decoupled_k3_rs_token_tis": _rc("token", *_K3),
    "bypass_ppo_clip": _rc(None, bypass_mode=True),
    "bypass_ppo_clip_geo_rs": _rc(None, *_GEO, bypass_mode=True),
    "bypass_ppo_clip_k3_rs": _rc(None, *_K3, bypass_mode=True),
    "bypass_pg_is": _rc("sequence", **_BYPASS_PG),
    "bypass_pg_token_icepop": _rc("token", rollout_is_threshold="0.5_5.0", **_BYPASS_PG),
    "bypass_pg_geo_rs": _rc(None, *_GEO, **_BYPASS_PG),
    "bypass_pg_geo_rs_seq_tis": _rc("sequence", *_GEO, **_BYPASS_PG),
    "bypass_pg_geo_rs_token_tis": _rc("token", *_GEO, **_BYPASS_PG),
    "disabled": _rc(None),
}
"""verl 0.9.1's ``RolloutCorrectionConfig`` factory methods with their default arguments
(``RolloutCorrectionConfig.<name>()``), as the keys they set."""
RolloutCorrectionPreset = Literal[tuple(ROLLOUT_CORRECTION_PRESETS)]  # type: ignore[valid-type]


def parse_is_threshold(spec: float | str) -> tuple[float, float | None]:
    """``rollout_is_threshold`` as ``(upper, lower)``: a number is TIS's upper bound (lower None),
    ``"lower_upper"`` IcePop's bounds (verl's rules: positive, lower <= upper)."""
    if isinstance(spec, bool):
        raise ValueError("a number or 'lower_upper', not a boolean")
    text = str(spec).strip()
    try:
        lower, upper = (float(v) for v in text.split("_", 1)) if "_" in text else (None, float(text))
    except ValueError:
        raise ValueError(f"{spec!r} is neither a number nor 'lower_upper' (e.g. 2.0 or '0.5_5.0')") from None
    if upper <= 0 or (lower is not None and lower <= 0):
        raise ValueError(f"the bounds of {spec!r} must be positive")
    if lower is not None and lower > upper:
        raise ValueError(f"the lower bound of {spec!r} is above the upper one")
    return upper, lower


def parse_rs_options(spec: str) -> list[str]:
    """``rollout_rs``: comma-separated criteria, duplicates dropped, each one of verl's."""
    options: list[str] = []
    for option in (part.strip() for part in spec.split(",")):
        if option and option not in options:
            if option not in ROLLOUT_RS_OPTIONS:
                raise ValueError(f"unknown criterion {option!r}; choose from {', '.join(ROLLOUT_RS_OPTIONS)}")
            options.append(option)
    if not options:
        raise ValueError("names no criterion")
    return options


def parse_rs_thresholds(options: list[str], spec: float | str) -> dict[str, tuple[float | None, float]]:
    """``rollout_rs_threshold`` per criterion as ``(lower, upper)``: one value for all or one per
    criterion (comma-separated); ``k1`` criteria take ratio bounds ``lower_upper`` (a single upper
    bound implies ``1 / upper`` below), the others one positive upper bound (verl's rules)."""
    specs = [str(spec)] if isinstance(spec, (int, float)) else [p.strip() for p in str(spec).split(",") if p.strip()]
    if len(specs) not in (1, len(options)):
        raise ValueError(f"give one threshold for all criteria or one per criterion ({len(options)})")
    specs = specs * len(options) if len(specs) == 1 else specs
    bounds: dict[str, tuple[float | None, float]] = {}
    for option, text in zip(options, specs, strict=True):
        try:
            if option.endswith("k1"):
                lower_text, upper_text = text.split("_", 1) if "_" in text else (None, text)
                upper = float(upper_text)
                lower = float(lower_text) if lower_text is not None else 1.0 / upper
            elif "_" in text:
                raise ValueError(f"{option} takes one upper bound, not {text!r}")
            else:
                lower, upper = None, float(text)
        except (ValueError, ZeroDivisionError) as exc:
            raise ValueError(f"bad threshold {text!r} for {option}: {exc}") from None
        if upper <= 0 or (lower is not None and lower <= 0):
            raise ValueError(f"the threshold {text!r} of {option} must be positive")
        if lower is not None and lower > upper:
            raise ValueError(f"the lower bound of {text!r} ({option}) is above the upper one")
        bounds[option] = (lower, upper)
    return bounds


class RolloutCorrectionConfig(ConfigModel):
    """verl 0.9's rollout correction (``algorithm.rollout_correction``, the keys of verl's
    ``RolloutCorrectionConfig``): importance weights and rejection sampling against the mismatch
    between the rollout engine's logprobs and the trainer's (precision, staleness)."""

    preset: RolloutCorrectionPreset | None = Field(
        None,
        description="One of verl's RolloutCorrectionConfig presets (decoupled_token_is, bypass_pg_is, ...); "
        "the keys set next to it win",
    )
    rollout_is: Literal["token", "sequence"] | None = Field(
        None, description="Importance weights per token or per sequence (their product); null: none (metrics only)"
    )
    rollout_is_threshold: float | str = Field(
        2.0, description="A number: truncate weights above it (TIS); 'lower_upper': zero weights outside (IcePop)"
    )
    rollout_is_batch_normalize: bool = Field(False, description="Scale the weights to mean 1 over the batch.")
    rollout_rs: str | None = Field(
        None, description="Rejection sampling: comma-separated criteria (token_k1, seq_mean_k3, ...); null: none"
    )
    rollout_rs_threshold: float | str | None = Field(
        None, description="Bound per criterion: k1 'lower_upper' ratio bounds, k2/k3 an upper bound"
    )
    bypass_mode: bool | None = Field(
        None,
        description="true: the rollout logprobs are the old ones (2 policies); false: recomputed (decoupled, "
        "3 policies); unset: algorithm.bypass_old_logprobs",
    )
    loss_type: Literal["ppo_clip", "reinforce"] = Field(
        "ppo_clip",
        description="Bypass mode's loss: ppo_clip (the policy loss, ratio to the rollout) or reinforce (-w A log p)",
    )

    @field_validator("rollout_is_threshold")
    @classmethod
    def _is_threshold(cls, value: float | str) -> float | str:
        parse_is_threshold(value)
        return value

    @field_validator("rollout_rs")
    @classmethod
    def _rs_options(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rs_options(value)
        return value

    @model_validator(mode="after")
    def _expand_preset(self) -> RolloutCorrectionConfig:
        """The preset's values for every key the file does not set."""
        if self.preset is not None:
            given = set(self.model_fields_set)
            for key, value in ROLLOUT_CORRECTION_PRESETS[self.preset].items():
                if key not in given:
                    setattr(self, key, value)
        return self


class AlgorithmConfig(ConfigModel):
    """The RL algorithm; unset functions and args come from ``algorithm_type``'s preset."""

    algorithm_type: str = Field("ppo", description="An algorithm type plugin: ppo, grpo, dpo, sft, ...")
    repeat_times: int = Field(1, ge=1, description="Rollouts per task (the group size of GRPO-like algorithms).")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and schedule.")
    sample_strategy: str | None = Field(None, description="How the trainer turns buffer reads into a batch.")
    sample_strategy_args: dict[str, Any] | None = Field(None, description="Arguments of the sample strategy.")
    advantage_fn: str | None = Field(None, description="Advantage function; unset: the algorithm's.")
    advantage_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the advantage function.")
    kl_penalty_fn: str | None = Field(None, description="KL subtracted from rewards; none disables it.")
    kl_penalty_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the KL penalty.")
    kl_loss_fn: str | None = Field(None, description="KL added to the loss; none disables it.")
    kl_loss_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the KL loss.")
    policy_loss_fn: str | None = Field(None, description="Policy loss; unset: the algorithm's.")
    policy_loss_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the policy loss.")
    entropy_loss_fn: str | None = Field(None, description="Entropy term of the loss; none disables it.")
    entropy_loss_fn_args: dict[str, Any] | None = Field(None, description="Arguments of the entropy loss.")
    loss_agg_mode: LossAggMode = Field("token-mean", description="How token losses are averaged.")
    enable_router_replay: bool = Field(
        False,
        description="Replay the rollout's MoE routing in training (R3): the rollout engine records each token's "
        "experts, the trainer's forward uses them. Engines: transformers rollout, torch trainer (vLLM and verl "
        "refused: docs/algorithms.md).",
    )
    bypass_old_logprobs: bool = Field(
        True,
        description="true: the rollout engine's logprobs are the old policy's (no recomputation); false: the "
        "trainer recomputes them with the actor (rollout_correction's decoupled mode)",
    )
    rollout_correction: RolloutCorrectionConfig | None = Field(
        None,
        description="verl 0.9's rollout correction of the rollout/trainer logprob mismatch (importance weights, "
        "rejection sampling); unset: none",
    )


# --- roles -------------------------------------------------------------------------------


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

    renamed: ClassVar[dict[str, str]] = {"runner_num": "runner_per_model"}

    name: str = Field("explorer", description="Name of this explorer (several may feed one trainer).")
    mode: str = derived("both", "The experiment's mode.")
    runner_per_model: int = Field(8, ge=1, description="Workflows run at once per rollout engine.")
    runner_prepare_concurrency: int = inert(
        8,
        "Runners being prepared at once.",
        ge=1,
        reason=_RUNNERS,
    )
    runner_prepare_max_retries: int = inert(
        2,
        "Retries of a runner that failed to start.",
        ge=0,
        reason=_RUNNERS,
    )
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

    renamed: ClassVar[dict[str, str]] = {"ppo_max_token_len_per_gpu": "max_token_len_per_gpu"}

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
    wait_for_checkpoint: bool = inert(
        False,
        "Wait for the latest checkpoint before syncing.",
        reason="Trinity-RFT declares it unused ('TODO: to be used'); the explorer's waits follow sync_style, "
        "sync_offset and sync_timeout",
    )
    explorer_world_size: int | None = derived(None, "Ranks of the rollout engines.", ge=0)
    ray_namespace: str = derived("", "The experiment's Ray namespace.")


class MonitorConfig(ConfigModel):
    """Where metrics go."""

    monitor_type: Annotated[list[str], BeforeValidator(_monitor_names)] = Field(
        default_factory=lambda: ["tensorboard"],
        description="A monitor plugin or a list: tensorboard, wandb, mlflow, console.",
    )
    monitor_args: dict[str, Any] | None = Field(None, description="Arguments of the monitors.")
    detailed_stats: bool = Field(
        False, description="Evaluation also reports std@k, worst@k and the spread of the task means over the tasks."
    )
    enable_ray_timeline: bool = Field(
        False, description="Write Ray's timeline of each stage to <job dir>/monitor/timeline.json (Chrome trace)."
    )
    cache_dir: str = derived("", "Folder of the monitors' files: <job dir>/monitor.")
    console_interval: Annotated[int, Field(ge=1)] | Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)?s$")] = (
        Field(
            "30s",
            description="How often `trinity run` prints a role's progress line: every N steps (10) or seconds ('30s').",
        )
    )


class ClusterConfig(ConfigModel):
    """The machines of the run."""

    ray_address: str = Field(
        "auto", description="Ray cluster to join: auto (a running one, else a new local one), local, or an address."
    )
    node_num: int = Field(0, ge=0, description="Nodes; 0: detected from the Ray cluster.")
    gpu_per_node: int = Field(0, ge=0, description="GPUs per node; 0: detected (0 on a CPU machine).")
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="Torch threads per role; unset: all cores when the roles take turns, a share when they overlap.",
    )
    total_gpu_num: int = derived(0, "node_num x gpu_per_node.", ge=0)
    rollout_gpu_num: int = derived(0, "GPUs of the rollout engines.", ge=0)
    auxiliary_model_gpu_num: int = derived(0, "GPUs of the auxiliary models.", ge=0)
    explorer_gpu_num: int = derived(0, "GPUs of the explorer.", ge=0)
    trainer_gpu_num: int = derived(0, "GPUs of the trainer.", ge=0)
    trainer_node_num: int = derived(0, "Nodes of the trainer.", ge=0)
    trainer_gpu_num_per_node: int = derived(0, "GPUs per node of the trainer.", ge=0)


class LogConfig(ConfigModel):
    """Log files of the run."""

    level: LogLevel = Field("INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL.")
    group_by_node: bool = Field(False, description="One log folder per node IP.")
    save_dir: str = derived("", "Folder of the logs: <job dir>/log.")


class CoDConfig(ConfigModel):
    """Chain-of-draft task packing (a Trinity-RFT research feature)."""

    task_pack_size: int = inert(4, "Tasks packed into one.", ge=1, reason=_COD)
    eval_task_pack_size: int | None = inert(None, "Tasks packed into one when evaluating.", ge=1, reason=_COD)
    packing_strategy: str = inert("cod", "How tasks are packed.", reason=_COD)
    cod_workflow_args: dict[str, Any] = inert(
        default_factory=dict, description="Arguments of the packing workflow.", reason=_COD
    )


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
    cod: CoDConfig = Field(default_factory=CoDConfig, description="Chain-of-draft packing (research).")
    stages: list[StageConfig] = Field(default_factory=list, description="Stages run in order.")

    @property
    def in_one_run(self) -> bool:
        """Explorer and trainer run in one ``trinity run`` (mode both, or colocate on one GPU)."""
        return self.mode in ("both", "colocate")
