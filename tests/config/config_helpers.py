"""The small valid config the config tests start from, and how they read its errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from trinity.config import ConfigError, load_config

BASE = """
project: demo
name: run
checkpoint_root_dir: {root}
algorithm: {{algorithm_type: grpo, repeat_times: 4}}
model: {{model_path: /models/tiny, max_prompt_tokens: 64, max_response_tokens: 32}}
cluster: {{node_num: 1, gpu_per_node: 0}}
explorer: {{rollout_model: {{engine_type: transformers}}}}
trainer: {{trainer_type: torch}}
buffer:
  batch_size: 4
  explorer_input:
    taskset: {{path: /data/tasks.jsonl, default_workflow_type: math_workflow}}
"""


def write(tmp_path: Path, extra: str = "", base: str = BASE) -> Path:
    """The base config (checkpoints under ``tmp_path``) plus ``extra`` YAML, as a file."""
    path = tmp_path / "config.yaml"
    path.write_text(base.format(root=tmp_path / "ckpt") + textwrap.dedent(extra))
    return path


def issues_of(path: Path, overrides: list[str] | None = None, strict: bool = False) -> dict[str, str]:
    """``{dotted key: message}`` of the errors loading ``path`` must raise."""
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides, strict=strict)
    return {issue.path: issue.message for issue in err.value.issues}
