"""LoRA learns: GRPO on the quickstart's arithmetic with only a rank-16 adapter trained (torch
trainer) and synced to the transformers engine raises the policy's eval accuracy by the margin.

Shown to fail with its mechanism broken: the ``dropped_memory`` sync method (the trainer's
adapter versions reach the explorer without their weights) keeps the accuracy where it started.
"""

from __future__ import annotations

import pytest
from learning_cells import run_cell
from single_turn_cells import LORA


@pytest.mark.parametrize("control", [None, "adapter not synced"])
def test_lora_grpo_learns_with_only_the_adapter_synced(control, workspace, learning_ray, tmp_path):
    extra = LORA.controls[control](workspace) if control else []
    result = run_cell(LORA, workspace, tmp_path, steps=LORA.test_steps, extra=extra)
    assert result.learned != bool(control), f"{result.describe()} [{control or 'adapter synced'}]"
