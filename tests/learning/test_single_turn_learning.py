"""Single-turn RL learns: GRPO on the quickstart's arithmetic raises the rollout reward."""

from __future__ import annotations

from learning_cells import run_cell
from single_turn_cells import GRPO


def test_grpo_learns_arithmetic(workspace, learning_ray, tmp_path):
    result = run_cell(GRPO, workspace, tmp_path, steps=GRPO.test_steps)
    assert result.learned, result.describe()
