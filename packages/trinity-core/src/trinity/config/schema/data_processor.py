"""The ``data_processor`` section: the task and experience pipelines."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.buffer import ExperienceBufferConfig, TasksetConfig


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
