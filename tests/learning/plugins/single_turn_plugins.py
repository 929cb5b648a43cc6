"""Plugins of the single-turn cells (tests/learning/single_turn_cells.py).

``negated``: the advantages of another advantage fn (``of``) with the wrong sign, the control that
shows an RL cell fails when the advantage points away from the reward. ``shuffled_rewards``: that fn
on the step's rewards shuffled among its samples, the control that shows it learns from which
sample earned the reward (the reward's mean and spread kept, its link to the answer cut).
``greedy_baseline_workflow``: the e2e algorithm
runs' workflow (tests/e2e/algorithm_plugins, shared rather than copied) that scores one greedy
response per task as each sample's ``info["reward_baseline"]``, the baseline ReMax needs.
"""

import sys
from pathlib import Path

import torch
from pydantic import Field

from trinity.algorithm.base import AdvantageFn
from trinity.config.base import PluginArgs
from trinity.plugins import Kind, hookimpl, resolve

E2E_PLUGINS = Path(__file__).resolve().parents[2] / "e2e" / "algorithm_plugins"
if str(E2E_PLUGINS) not in sys.path:
    sys.path.append(str(E2E_PLUGINS))


class BrokenAdvantage(AdvantageFn):
    """Another advantage fn (``of``, with its default args) with one thing broken."""

    class Args(PluginArgs):
        of: str = Field("grpo", description="the advantage fn that is broken")

    def __init__(self, **args):
        super().__init__(**args)
        inner = resolve(Kind.ADVANTAGE_FN, self.args.of)
        self.inner = inner(**inner.default_args())


class NegatedAdvantage(BrokenAdvantage):
    """The advantages of ``of`` times -1, its returns kept: a broken mechanism, which must not learn."""

    def __call__(self, batch):
        batch, metrics = self.inner(batch)
        return batch.with_fields(advantages=-batch.advantages), metrics


class ShuffledRewards(BrokenAdvantage):
    """The advantages of ``of`` over the batch's rewards shuffled among its rows (a fixed seed),
    the rows keeping their own rewards for the metrics: a broken mechanism, which must not learn."""

    def __init__(self, **args):
        super().__init__(**args)
        self.generator = torch.Generator().manual_seed(0)

    def __call__(self, batch):
        order = torch.randperm(len(batch.rewards), generator=self.generator)
        shuffled, metrics = self.inner(batch.with_fields(rewards=batch.rewards[order]))
        return shuffled.with_fields(rewards=batch.rewards), metrics


@hookimpl
def trinity_register_advantage_fns(register):
    register("negated", "single_turn_plugins:NegatedAdvantage")
    register("shuffled_rewards", "single_turn_plugins:ShuffledRewards")


@hookimpl
def trinity_register_workflows(register):
    register("greedy_baseline_workflow", "algorithm_test_plugins:GreedyBaselineWorkflow")
