"""Single-turn learning: RL with a critic (PPO), SFT from random weights and DPO's preferences,
each move their measure by their margin in the test budget; each with its first control (the
cells' ``controls``: PPO's advantages negated, SFT's answers shuffled among the questions, DPO's
chosen and rejected swapped) does not, on its short ``control_steps``. RL with a group baseline
(GRPO) learns in test_multinode_learning.py, on one node and on two; its control runs here.
"""

from __future__ import annotations

import pytest
from learning_cells import cases, check_learns
from single_turn_cells import DPO, GRPO, PPO, SFT


@pytest.mark.parametrize(("cell", "control"), cases(PPO, SFT, DPO))
def test_single_turn_cell_learns(cell, control, workspace, learning_ray, tmp_path):
    check_learns(cell, control, workspace, tmp_path)


def test_grpo_with_its_rewards_shuffled_does_not_learn(workspace, learning_ray, tmp_path):
    check_learns(GRPO, next(iter(GRPO.controls)), workspace, tmp_path)
