"""The workflow interface: what turns one task into experiences.

A workflow is built per task run with the task, a ModelWrapper over the rollout model
and wrappers over the auxiliary models. It calls the model (sync or async), scores the
responses with its reward function and returns experiences. Workflows are plugins
(``trinity_register_workflows``); the catalogue lives in trinity-workflows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from trinity.common.experience import Experience, Task
from trinity.plugins import Kind, resolve
from trinity.rollout.model_wrapper import ModelWrapper

RewardFn = Callable[..., dict[str, float]]
"""``reward_fn(response=..., truth=..., prompt=..., **reward_fn_args) -> {component: value}``.

The reward is the sum of the components; each component also becomes a metric.
"""


class Workflow:
    """One run of a task: ask the model, score, return experiences.

    ``can_repeat``: the workflow itself asks for ``task.repeat_times`` samples (``n``) and
    returns them all; otherwise the explorer runs ``repeat_times`` instances, one per run.
    """

    can_repeat: ClassVar[bool] = True
    reads_prompt: ClassVar[bool] = True
    """False for workflows that take their episode from other columns (FrozenLake's map): the
    taskset then accepts rows without a prompt column."""

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: Sequence[ModelWrapper] = ()):
        self.task = task
        self.model = model
        self.auxiliary_models = list(auxiliary_models)
        self.reward_fn: RewardFn | None = (
            resolve(Kind.REWARD_FN, task.reward_fn_type, "default_reward_fn_type") if task.reward_fn_type else None
        )

    @property
    def repeat_times(self) -> int:
        """Samples this instance asks for: its job's share of the task's ``repeat_times`` (all of
        them unless ``explorer.max_repeat_times_per_runner`` splits them), 1 without ``can_repeat``."""
        return self.model.defaults.n if self.can_repeat else 1

    @property
    def truth(self) -> Any:
        """The row's ground truth: its ``format.response_key`` column (default ``response``)."""
        return self.task.raw.get(self.task.format.get("response_key") or "response")

    def score(self, response: str, truth: Any, prompt: str | None = None) -> dict[str, float]:
        """The reward components of one response (empty without a reward function)."""
        if self.reward_fn is None:
            return {}
        return self.reward_fn(response=response, truth=truth, prompt=prompt, **self.task.reward_fn_args)

    def run(self) -> list[Experience]:
        """Sync workflows override this; it runs in a worker thread."""
        raise NotImplementedError(f"{type(self).__name__} implements neither run() nor run_async()")

    async def run_async(self) -> list[Experience]:
        """Async workflows override this; the default runs ``run()`` in a thread."""
        return await asyncio.to_thread(self.run)


def set_reward(experience: Experience, components: dict[str, float]) -> Experience:
    """Store the reward (sum of components) and the components as metrics."""
    experience.reward = float(sum(components.values()))
    experience.metrics.update({k: float(v) for k, v in components.items()})
    return experience
