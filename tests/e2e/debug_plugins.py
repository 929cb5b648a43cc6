"""Planted problems for ``trinity debug``'s tests, named by dotted path (``debug_plugins.X``)."""

from __future__ import annotations

import torch

from trinity.common.experience import Experience
from trinity.explorer.workflow import Workflow
from trinity_workflows.conversation import MultiTurnWorkflow


def constant_reward(response: str, truth: str, **_) -> dict[str, float]:
    """The same reward whatever the response: every group's rewards are equal."""
    return {"constant": 0.5}


def checksum_reward(response: str, truth: str, **_) -> dict[str, float]:
    """A reward that differs between (random) responses: the control of ``constant_reward``."""
    return {"checksum": sum(map(ord, response)) % 97 / 97}


def failing_reward(response: str, truth: str, **_) -> dict[str, float]:
    raise ZeroDivisionError("planted in failing_reward")


class FailingWorkflow(Workflow):
    """Fails every run before it asks the model anything."""

    async def run_async(self) -> list[Experience]:
        raise ValueError(f"planted failure on {self.task.task_id}")


class UntrainedMultiTurn(MultiTurnWorkflow):
    """``multi_turn_workflow`` with its action mask all 0: nothing of the conversation is trained."""

    async def experiences(self, messages, turns, components) -> list[Experience]:
        experiences = await super().experiences(messages, turns, components)
        for experience in experiences:
            experience.action_mask = torch.zeros_like(experience.action_mask)
        return experiences
