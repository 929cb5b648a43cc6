"""Learning through a judge (judge_agent_cells.py): a reward model behind an OpenAI-compatible
API, reached as an auxiliary model with ``engine_type: external``, raises the true accuracy.

Shown to fail when broken (30 steps, seed 0): with the judge inverted the true accuracy fell
0.20 -> 0.00 (the model learned to answer wrong), with a random judge 0.32 -> 0.01 (40 steps);
the correct judge: 0.53 -> 0.79 (three runs alike; 0.89 after 40 steps).
"""

from __future__ import annotations

from judge_agent_cells import MATH_RM
from learning_cells import run_cell


def test_a_reward_model_judging_through_an_api_raises_the_true_accuracy(workspace, learning_ray, tmp_path):
    result = run_cell(MATH_RM, workspace, tmp_path, steps=MATH_RM.test_steps)
    assert result.learned, result.describe()
