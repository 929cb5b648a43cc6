"""Learning through a judge (judge_agent_cells.py): a reward model behind an OpenAI-compatible
API, reached as an auxiliary model with ``engine_type: external``, raises the true accuracy; with
the judge inverted (its control) it does not.
"""

from __future__ import annotations

import pytest
from judge_agent_cells import MATH_RM
from learning_cells import cases, check_learns


@pytest.mark.parametrize(("cell", "control"), cases(MATH_RM))
def test_a_reward_model_judging_through_an_api_raises_the_true_accuracy(
    cell, control, workspace, learning_ray, tmp_path
):
    check_learns(cell, control, workspace, tmp_path)
