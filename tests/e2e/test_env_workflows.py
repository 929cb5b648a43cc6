"""Environment workflows train end to end: the FrozenLake example as shipped, and sudoku."""

from __future__ import annotations

import json
import subprocess
import sys

from e2e_helpers import REPO, trinity_run
from omegaconf import OmegaConf

from trinity.monitor.console import read_jsonl
from trinity_workflows.envs.sudoku import SudokuGame

FROZEN_LAKE = REPO / "examples" / "frozen_lake"


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"


def test_the_frozen_lake_example_trains_a_tiny_agent(tmp_path, tiny_model_dir, monkeypatch):
    """The example's config and data script as shipped (what run.sh runs), for 2 steps."""
    subprocess.run([sys.executable, str(FROZEN_LAKE / "make_data.py"), str(tmp_path / "data")], check=True)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("FROZEN_LAKE_TASKS", str(tmp_path / "data" / "tasks.jsonl"))
    assert_ok(trinity_run(FROZEN_LAKE / "frozen_lake.yaml", "buffer.total_steps=2"))
    job = tmp_path / "ckpt" / "frozen_lake" / "tiny_agent"
    explorer, trainer = read_jsonl(job / "monitor" / "explorer.jsonl"), read_jsonl(job / "monitor" / "trainer.jsonl")
    assert [r["step"] for r in trainer] == [1, 2] and all(r["experience_count"] == 8 for r in trainer)
    for record in explorer:  # 2 maps x 4 episodes, each a whole episode of up to 3 moves
        assert record["rollout/experience_count"] == 8 and record["rollout/failed_runs"] == 0
        assert 1 <= record["rollout/env_steps/mean"] <= 3 and 0 <= record["rollout/env_reward/mean"] <= 1
    assert (job / "global_step_2" / "actor" / "huggingface").is_dir()


def test_sudoku_trains_on_its_step_experiences(tmp_path, tiny_model_dir):
    rows = []
    for seed in range(2):
        game = SudokuGame.generate(4, seed, holes=3)
        rows.append({"puzzle": game.board, "solution": game.solution})
    tasks = tmp_path / "sudoku.jsonl"
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = OmegaConf.load(FROZEN_LAKE / "frozen_lake.yaml")
    config.merge_with_dotlist(
        [
            f"checkpoint_root_dir={tmp_path / 'ckpt'}",
            f"model.model_path={tiny_model_dir}",
            "model.max_prompt_tokens=256",
            "project=sudoku",
            f"buffer.explorer_input.taskset.path={tasks}",
            "buffer.explorer_input.default_workflow_type=sudoku_workflow",
            "buffer.total_steps=1",
        ]
    )
    config.buffer.explorer_input.taskset.workflow_args = {"max_steps": 3, "max_moves_per_step": 2}
    OmegaConf.save(config, tmp_path / "sudoku.yaml")
    assert_ok(trinity_run(tmp_path / "sudoku.yaml"))
    job = tmp_path / "ckpt" / "sudoku" / "tiny_agent"
    (explored,) = read_jsonl(job / "monitor" / "explorer.jsonl")
    (trained,) = read_jsonl(job / "monitor" / "trainer.jsonl")
    # the tiny model writes no moves: each episode is one step, rewarded -1
    assert explored["rollout/experience_count"] == trained["experience_count"] == 8
    assert explored["rollout/reward/mean"] == -1.0 and explored["rollout/sudoku_step/max"] == 0
