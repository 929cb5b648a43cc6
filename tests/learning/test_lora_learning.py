"""LoRA learns: GRPO on the quickstart's arithmetic with only a rank-16 adapter trained (torch
trainer) and synced to the transformers engine raises the policy's eval accuracy by the margin;
with the ``dropped_memory`` sync method (the trainer's adapter versions reach the explorer without
their weights) it does not.
"""

from __future__ import annotations

import pytest
from learning_cells import cases, check_learns
from single_turn_cells import LORA


@pytest.mark.parametrize(("cell", "control"), cases(LORA))
def test_lora_grpo_learns_with_only_the_adapter_synced(cell, control, workspace, learning_ray, tmp_path):
    check_learns(cell, control, workspace, tmp_path)
