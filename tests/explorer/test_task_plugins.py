"""A taskset's workflow or reward function that cannot be imported ends the explorer before any
engine starts, naming it: not one failed task after another while the trainer waits (seen on a
GPU machine without math_verify: the quickstart hung at step 1 of 200 until killed)."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from trinity.config import load_config
from trinity.explorer.explorer import Explorer
from trinity.plugins import PluginError


def test_a_reward_function_whose_module_cannot_be_imported_stops_the_explorer_at_once(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_reward.py").write_text("import a_checker_that_is_not_installed\n\nclass Reward: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1=", "answer": "2"}\n')
    config = tmp_path / "run.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            mode: both
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model: {{model_path: {tiny_model_dir}, max_prompt_tokens: 8, max_response_tokens: 4}}
            explorer: {{rollout_model: {{engine_type: transformers}}}}
            trainer: {{trainer_type: torch}}
            buffer:
              batch_size: 1
              explorer_input:
                taskset: {{name: t, storage_type: file, path: {tasks}, format: {{prompt_key: question}},
                           default_workflow_type: math_workflow, default_reward_fn_type: broken_reward.Reward}}
            """
        )
    )
    started = time.monotonic()
    with pytest.raises(PluginError) as raised:
        Explorer(load_config(config))
    assert "'broken_reward.Reward'" in str(raised.value)
    assert "No module named 'a_checker_that_is_not_installed'" in str(raised.value)
    assert time.monotonic() - started < 30
    sys.modules.pop("broken_reward", None)
