"""The porting guide's workflow-plugin example (examples/agent_workflow) trains as shipped."""

from __future__ import annotations

import subprocess
import sys

from e2e_helpers import QUICKSTART, REPO
from test_env_workflows import assert_ok

from trinity.monitor.console import read_jsonl

EXAMPLE = REPO / "examples" / "agent_workflow"


def test_a_plain_openai_agent_trains_as_a_workflow_plugin(tmp_path, tiny_model_dir, monkeypatch):
    subprocess.run([sys.executable, str(QUICKSTART / "make_data.py"), str(tmp_path / "data")], check=True)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("AGENT_TASKS", str(tmp_path / "data" / "tasks.jsonl"))
    command = [sys.executable, "-m", "trinity.cli", "--plugin-dir", str(EXAMPLE), "run"]
    command += ["--config", str(EXAMPLE / "agent.yaml"), "buffer.total_steps=2"]
    assert_ok(subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path))
    job = tmp_path / "ckpt" / "agent_workflow" / "calculator_agent"
    explorer, trainer = read_jsonl(job / "monitor" / "explorer.jsonl"), read_jsonl(job / "monitor" / "trainer.jsonl")
    # 2 tasks x 4 agent runs a step, at least one recorded call each
    assert all(r["rollout/experience_count"] >= 8 and r["rollout/failed_runs"] == 0 for r in explorer)
    assert [r["step"] for r in trainer] == [1, 2]
