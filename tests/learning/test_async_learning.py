"""Async RFT learns: weights that move without the fixed step-by-step sync (explorer_driven with
over_rollout, the explorer one version ahead) still raise the reward as the fixed run does, and
an ``openai``-client agent trains its model through serve mode and a separate trainer."""

from __future__ import annotations

from async_cells import FULLY_ASYNC, SERVE
from learning_cells import run_cell


def test_fully_async_with_over_rollout_learns_as_the_fixed_sync(workspace, learning_ray, tmp_path):
    result = run_cell(FULLY_ASYNC, workspace, tmp_path, steps=FULLY_ASYNC.test_steps)
    assert result.learned, result.describe()
    assert result.end >= FULLY_ASYNC.baseline_final - FULLY_ASYNC.baseline_margin, result.describe()
    assert result.staleness > 0, "fully_async explored nothing ahead of the trainer"


def test_an_openai_agent_learns_through_serve_mode(workspace, tmp_path):
    result = run_cell(SERVE, workspace, tmp_path, steps=SERVE.test_steps)
    assert result.learned, result.describe()
