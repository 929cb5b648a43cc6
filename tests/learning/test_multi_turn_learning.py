"""Learning tests of the multi-turn and distillation families (cells: multi_turn_cells.py).
How each was shown to fail with its mechanism broken: the cells' ``controls`` and notes."""

from __future__ import annotations

from learning_cells import run_cell
from multi_turn_cells import ON_POLICY_DISTILL, STEP_WISE_GRPO


def test_step_wise_multi_step_grpo_learns_two_sums(workspace, learning_ray, tmp_path):
    result = run_cell(STEP_WISE_GRPO, workspace, tmp_path, steps=STEP_WISE_GRPO.test_steps)
    assert result.learned, result.describe()


def test_on_policy_distill_student_nears_its_teacher(workspace, learning_ray, tmp_path):
    result = run_cell(ON_POLICY_DISTILL, workspace, tmp_path, steps=ON_POLICY_DISTILL.test_steps)
    assert result.learned, result.describe()
