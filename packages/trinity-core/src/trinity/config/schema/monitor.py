"""The ``monitor`` and ``log`` sections: metrics trackers and logs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints

from trinity.config.base import ConfigModel, derived
from trinity.config.schema.values import LogLevel


def _monitor_names(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


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


class LogConfig(ConfigModel):
    """Log files of the run."""

    level: LogLevel = Field("INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL.")
    group_by_node: bool = Field(False, description="One log folder per node IP.")
    save_dir: str = derived("", "Folder of the logs: <job dir>/log.")
