"""Plugins of the single-turn cells (tests/learning/single_turn_cells.py).

``negated``: the advantages of another advantage fn (``of``) with the wrong sign, the control that
shows an RL cell fails when the advantage points away from the reward. ``greedy_baseline_workflow``: the e2e algorithm
runs' workflow (tests/e2e/algorithm_plugins, shared rather than copied) that scores one greedy
response per task as each sample's ``info["reward_baseline"]``, the baseline ReMax needs.
"""

import sys
from pathlib import Path

from pydantic import Field

from trinity.algorithm.base import AdvantageFn
from trinity.config.base import PluginArgs
from trinity.plugins import Kind, hookimpl, resolve

E2E_PLUGINS = Path(__file__).resolve().parents[2] / "e2e" / "algorithm_plugins"
if str(E2E_PLUGINS) not in sys.path:
    sys.path.append(str(E2E_PLUGINS))


class NegatedAdvantage(AdvantageFn):
    """The advantages of ``of`` (with its default args) times -1, its returns kept: a broken
    mechanism, which must not learn."""

    class Args(PluginArgs):
        of: str = Field("grpo", description="the advantage fn whose sign is flipped")

    def __init__(self, **args):
        super().__init__(**args)
        inner = resolve(Kind.ADVANTAGE_FN, self.args.of)
        self.inner = inner(**inner.default_args())

    def __call__(self, batch):
        batch, metrics = self.inner(batch)
        return batch.with_fields(advantages=-batch.advantages), metrics


@hookimpl
def trinity_register_advantage_fns(register):
    register("negated", "single_turn_plugins:NegatedAdvantage")


@hookimpl
def trinity_register_workflows(register):
    register("greedy_baseline_workflow", "algorithm_test_plugins:GreedyBaselineWorkflow")
