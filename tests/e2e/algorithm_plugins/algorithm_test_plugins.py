"""Plugins of the algorithm-type runs (loaded through TRINITY_PLUGIN_DIRS).

``length_parity_reward`` gives an untrained model's samples rewards that differ within a task,
so the group advantages are not all 0 (``constant_reward`` makes them all 0, a run with nothing to
learn, and so does ``truth_parity_reward``, though tasks score differently); ``greedy_baseline_workflow`` records the reward of the
greedy response as ``info["reward_baseline"]``, the baseline ReMax needs.
"""

from trinity.plugins import hookimpl
from trinity_workflows.workflows import SimpleWorkflow


def length_parity_reward(response, truth=None, prompt=None):
    return {"accuracy": float(len(response) % 2)}


def constant_reward(response, truth=None, prompt=None):
    return {"accuracy": 1.0}


def truth_parity_reward(response, truth=None, prompt=None):
    """The same for every sample of a task, different between tasks: groups agree, the batch does not."""
    return {"accuracy": float(int(truth) % 2)}


class GreedyBaselineWorkflow(SimpleWorkflow):
    """``simple_workflow`` plus the reward of a greedy (temperature 0) response as each sample's baseline."""

    async def rollout(self):
        experiences = await super().rollout()
        (greedy,) = await self.model.chat_async(self.messages(), n=1, temperature=0.0)
        baseline = self.score_experience(greedy).reward
        for experience in experiences:
            experience.info["reward_baseline"] = baseline
        return experiences


@hookimpl
def trinity_register_reward_fns(register):
    register("length_parity_reward", "algorithm_test_plugins:length_parity_reward")
    register("constant_reward", "algorithm_test_plugins:constant_reward")
    register("truth_parity_reward", "algorithm_test_plugins:truth_parity_reward")


@hookimpl
def trinity_register_workflows(register):
    register("greedy_baseline_workflow", "algorithm_test_plugins:GreedyBaselineWorkflow")
