"""Learning tests of the multi-turn and distillation families (cells: multi_turn_cells.py).
How each was shown to fail with its mechanism broken: the cells' ``controls`` and notes."""

from __future__ import annotations

from learning_cells import run_cell
from multi_turn_cells import MULTI_TURN, ON_POLICY_DISTILL


def test_multi_turn_learns_two_sums(workspace, learning_ray, tmp_path):
    """GRPO on the whole two-turn conversation as one experience, masked to the model's replies
    (its control, the mask on the user's turns: MULTI_TURN's note). The step-wise cells of the
    same task (multi_step_grpo, GiGPO) learn in the matrix but vary too much run to run for CI:
    their notes."""
    result = run_cell(MULTI_TURN, workspace, tmp_path, steps=MULTI_TURN.test_steps)
    assert result.learned, result.describe()


def test_on_policy_distill_student_nears_its_teacher(workspace, learning_ray, tmp_path):
    result = run_cell(ON_POLICY_DISTILL, workspace, tmp_path, steps=ON_POLICY_DISTILL.test_steps)
    assert result.learned, result.describe()
