"""Learning tests of the multi-turn and distillation families (cells: multi_turn_cells.py).
How each was shown to fail with its mechanism broken: the cells' ``controls`` and notes."""

from __future__ import annotations

from learning_cells import run_cell
from multi_turn_cells import MULTI_TURN, ON_POLICY_DISTILL, STEP_WISE_GRPO, TOOL_USE


def test_multi_turn_learns_two_sums(workspace, learning_ray, tmp_path):
    """GRPO on the whole two-turn conversation as one experience, masked to the model's replies
    (its control, the mask on the user's turns: MULTI_TURN's note)."""
    result = run_cell(MULTI_TURN, workspace, tmp_path, steps=MULTI_TURN.test_steps)
    assert result.learned, result.describe()


def test_step_wise_multi_step_grpo_learns_two_sums(workspace, learning_ray, tmp_path):
    """An experience per reply, each with its run's GRPO advantage, one trainer step per
    explorer step (the control, the mask on the user's turns, and the runs: STEP_WISE_GRPO's
    note). GiGPO on the same task: GIGPO's note."""
    result = run_cell(STEP_WISE_GRPO, workspace, tmp_path, steps=STEP_WISE_GRPO.test_steps)
    assert result.learned, result.describe()


def test_tool_use_learns_to_call_for_the_secret(workspace, learning_ray, tmp_path):
    """tool_call_workflow: the answer is a digit only the tool's result holds, so the reward
    needs the call, its result in the context and the answer that copies it (two turns, one
    experience masked to the model's turns). From a warm-up that calls in about half of the
    samples, GRPO makes it call nearly always. The controls (TOOL_USE's note): the tool returning
    a wrong digit, and the mask on the tool's turns, do not learn."""
    result = run_cell(TOOL_USE, workspace, tmp_path, steps=TOOL_USE.test_steps)
    assert result.learned, result.describe()


def test_on_policy_distill_student_nears_its_teacher(workspace, learning_ray, tmp_path):
    result = run_cell(ON_POLICY_DISTILL, workspace, tmp_path, steps=ON_POLICY_DISTILL.test_steps)
    assert result.learned, result.describe()
