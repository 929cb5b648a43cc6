"""Async RFT learns: weights that move without the fixed step-by-step sync (explorer_driven with
over_rollout, the explorer one version ahead) still raise the reward as the fixed run does, and
an ``openai``-client agent trains its model through serve mode and a separate trainer. Each with
its weights never synced (its control, on a short budget) does not learn."""

from __future__ import annotations

import pytest
from async_cells import EXPLORER_DRIVEN, FIXED_FINAL_AT_TEST_BUDGET, SERVE
from learning_cells import cases, check_learns


@pytest.mark.parametrize(("cell", "control"), cases(EXPLORER_DRIVEN))
def test_explorer_driven_with_over_rollout_learns_as_the_fixed_sync(cell, control, workspace, learning_ray, tmp_path):
    result = check_learns(cell, control, workspace, tmp_path)  # over_rollout dropped tasks: drops_tasks
    if not control:
        assert result.end >= FIXED_FINAL_AT_TEST_BUDGET - cell.baseline_margin, result.describe()
        assert 0 < result.staleness <= 1, f"staleness {result.staleness}: not one step ahead of the trainer"


@pytest.mark.parametrize(("cell", "control"), cases(SERVE))
def test_an_openai_agent_learns_through_serve_mode(cell, control, workspace, tmp_path):
    check_learns(cell, control, workspace, tmp_path)
