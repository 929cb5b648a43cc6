"""The ``buffer`` section: tasksets, the experience buffer, data formats and sampling."""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.values import Durability, PromptType


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
