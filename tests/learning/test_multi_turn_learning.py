"""Learning tests of the multi-turn and distillation families (cells: multi_turn_cells.py), each
with its first control on a short budget:

- ``multi_turn``: GRPO on the whole two-turn conversation as one experience, masked to the
  model's replies; control: the mask one turn off (on the user's turns).
- ``step_wise + multi_step_grpo``: an experience per reply, each with its run's GRPO advantage,
  one trainer step per explorer step; control: the mask one turn off.
- ``tool_call``: the answer is a digit only the tool's result holds, so the reward needs the call,
  its result in the context and the answer that copies it; control: the tool returns a wrong digit.
- ``on_policy_distill``: the student nears its teacher; control: the student as its own teacher.
"""

from __future__ import annotations

import pytest
from learning_cells import cases, check_learns
from multi_turn_cells import MULTI_TURN, ON_POLICY_DISTILL, STEP_WISE_GRPO, TOOL_USE

CASES = cases(MULTI_TURN, STEP_WISE_GRPO, TOOL_USE, ON_POLICY_DISTILL)


@pytest.mark.parametrize(("cell", "control"), CASES)
def test_multi_turn_cell_learns(cell, control, workspace, learning_ray, tmp_path):
    check_learns(cell, control, workspace, tmp_path)
