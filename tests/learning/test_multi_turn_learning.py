"""Learning tests of the multi-turn and distillation families (cells: multi_turn_cells.py).
How each was shown to fail with its mechanism broken: the cells' ``controls`` and notes."""

from __future__ import annotations

from learning_cells import run_cell
from multi_turn_cells import GIGPO, ON_POLICY_DISTILL


def test_step_wise_gigpo_learns_two_sums(workspace, learning_ray, tmp_path):
    """GiGPO over the two replies of each run (its control, the mask on the user's turns, unlearns:
    multi_turn_cells.STEP_WISE_GRPO's note)."""
    result = run_cell(GIGPO, workspace, tmp_path, steps=GIGPO.test_steps)
    assert result.learned, result.describe()


def test_on_policy_distill_student_nears_its_teacher(workspace, learning_ray, tmp_path):
    result = run_cell(ON_POLICY_DISTILL, workspace, tmp_path, steps=ON_POLICY_DISTILL.test_steps)
    assert result.learned, result.describe()
