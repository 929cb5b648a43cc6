"""Single-turn learning: RL with a critic (PPO), SFT from random weights and DPO's preferences,
each move their measure by their margin in the test budget. RL with a group baseline (GRPO) does
in test_multinode_learning.py, on one node and on two.

Each was shown to fail with its mechanism broken (the cells' ``controls``, run once on a shared,
heavily loaded machine): GRPO 0.53 -> 0.89 in 40 steps, its advantages negated 0.20 -> 0.00
(reward 0.00 from step 5); PPO 0.52 -> 0.90 in 40 steps, its GAE advantages negated 0.70 -> 0.00
by step 4, still 0.00 at step 16 (where it was stopped); SFT eval accuracy 0.00 -> 0.69 in 60
steps, answers shuffled among the questions 0.00 -> 0.19 (margin 0.3); DPO's held-out preference
accuracy 0.50 -> 0.81 in 10 steps, chosen and rejected swapped 0.50 -> 0.15 (margin 0.2).
"""

from __future__ import annotations

import pytest
from learning_cells import run_cell
from single_turn_cells import DPO, PPO, SFT


@pytest.mark.parametrize("cell", [PPO, SFT, DPO], ids=lambda cell: cell.name.split(": ")[-1])
def test_single_turn_cell_learns(cell, workspace, learning_ray, tmp_path):
    result = run_cell(cell, workspace, tmp_path, steps=cell.test_steps)
    assert result.learned, result.describe()
