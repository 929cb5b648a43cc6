"""Plugins of the multi-turn learning cells (tests/learning/multi_turn_cells.py).

``sum_pair_step_wise`` / ``sum_pair_multi_turn``: two sums in a row. The row's ``question`` is
asked, then its ``turns[0]``; the reward is the mean of the reward function over the two
replies (each against its entry of ``answers``), so it needs both turns.

``secret`` / ``wrong_secret``: the tool-use cell's tool (a task's secret digit) and its control's
(a wrong digit).

``*_env_masked`` (``tool_call_env_masked`` too): the same workflows with the action mask one turn off, the controls: each
experience is trained on the environment's turns (the user's follow-up and the template
between turns) instead of the model's replies. They must not learn.
"""

from __future__ import annotations

import torch

from trinity.plugin_api import Experience, hookimpl
from trinity_workflows.base import Messages
from trinity_workflows.conversation import ConversationWorkflow, MultiTurnWorkflow, StepWiseWorkflow, ToolCallWorkflow


class SumPair(ConversationWorkflow):
    """Scores every reply against its answer (``answers`` column); the reward is their mean,
    a missing reply counting as the reward of an empty answer."""

    default_max_turns = 2

    async def experiences(
        self, messages: Messages, turns: list[Experience], components: dict[str, float]
    ) -> list[Experience]:
        replies = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        answers = self.task.raw["answers"]
        replies += [""] * (len(answers) - len(replies))
        scores = [self.score(reply, answer) for reply, answer in zip(replies, answers, strict=True)]
        mean = {key: sum(s[key] for s in scores) / len(scores) for key in scores[0]}
        return await super().experiences(messages, turns, mean)


class SumPairStepWise(SumPair, StepWiseWorkflow):
    """One experience per reply (``multi_step_grpo``, ``gigpo``)."""


class SumPairMultiTurn(SumPair, MultiTurnWorkflow):
    """The conversation as one experience, masked to the replies."""


async def on_env_turns(experience: Experience, model, tools=None) -> Experience:
    """``experience`` re-tokenised from its messages with the action mask inverted after the
    first reply: the user and template tokens are trained, the model's replies are not."""
    conversation = model.tokenize_conversation(experience.messages, tools)
    logprobs = await model.logprobs_async(conversation.tokens)
    start = conversation.prompt_length
    experience.tokens = torch.tensor(conversation.tokens, dtype=torch.long)
    experience.prompt_length = start
    experience.logprobs = torch.tensor(logprobs[start:], dtype=torch.float32)
    experience.action_mask = torch.tensor([not m for m in conversation.action_mask], dtype=torch.bool)
    return experience


class EnvMasked(ConversationWorkflow):
    """The control: every experience trained on the environment's turns (:func:`on_env_turns`)."""

    async def experiences(
        self, messages: Messages, turns: list[Experience], components: dict[str, float]
    ) -> list[Experience]:
        experiences = await super().experiences(messages, turns, components)
        return [await on_env_turns(e, self.model, self.tools) for e in experiences]


class SumPairStepWiseEnvMasked(EnvMasked, SumPairStepWise):
    pass


class SumPairMultiTurnEnvMasked(EnvMasked, SumPairMultiTurn):
    pass


class ToolCallEnvMasked(EnvMasked, ToolCallWorkflow):
    pass


def secret(task) -> str:
    """The tool of the tool-use cell (``workflow_args.tool_functions``): the task's secret digit,
    which the model cannot know without calling it."""
    return str(task.raw["secret"])


def wrong_secret(task) -> str:
    """The tool of its control: the digit after the secret (mod 10), so copying the result is
    always wrong and the call earns nothing."""
    return str((int(task.raw["secret"]) + 1) % 10)


@hookimpl
def trinity_register_workflows(register):
    register("sum_pair_step_wise", SumPairStepWise)
    register("sum_pair_multi_turn", SumPairMultiTurn)
    register("sum_pair_step_wise_env_masked", SumPairStepWiseEnvMasked)
    register("sum_pair_multi_turn_env_masked", SumPairMultiTurnEnvMasked)
    register("tool_call_env_masked", ToolCallEnvMasked)
