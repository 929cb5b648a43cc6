"""Async RFT learns: weights that move without the fixed step-by-step sync (explorer_driven with
over_rollout, the explorer one version ahead) still raise the reward as the fixed run does, and
an ``openai``-client agent trains its model through serve mode and a separate trainer."""

from __future__ import annotations

from async_cells import EXPLORER_DRIVEN, FIXED_FINAL_AT_TEST_BUDGET, SERVE
from learning_cells import run_cell


def test_explorer_driven_with_over_rollout_learns_as_the_fixed_sync(workspace, learning_ray, tmp_path):
    result = run_cell(EXPLORER_DRIVEN, workspace, tmp_path, steps=EXPLORER_DRIVEN.test_steps)
    assert result.learned, result.describe()
    assert result.end >= FIXED_FINAL_AT_TEST_BUDGET - EXPLORER_DRIVEN.baseline_margin, result.describe()
    assert 0 < result.staleness <= 1, f"staleness {result.staleness}: not one step ahead of the trainer"


def test_an_openai_agent_learns_through_serve_mode(workspace, tmp_path):
    result = run_cell(SERVE, workspace, tmp_path, steps=SERVE.test_steps)
    assert result.learned, result.describe()
