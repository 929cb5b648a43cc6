"""What the environment workflows share: an episode loop over a text environment.

An environment is anything with ``reset() -> observation`` and ``step(action) -> (observation,
reward, done)`` (``Episode``); each workflow adapts its library (gymnasium, TextWorld, ScienceWorld,
WebShop) to that shape. The loop shows the model the observation, parses an action from its reply and
steps the environment until done or ``max_env_steps`` replies; the episode's reward (each workflow's
rule) goes on every experience the multi-turn workflows' ``experiences`` build. Environment
libraries are imported on first use; a missing one is an ``ImportError`` saying what to install.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from trinity.plugin_api import Experience, Field, PluginArgs
from trinity_workflows.base import Messages
from trinity_workflows.conversation import ConversationWorkflow, mark_cut

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)


def action_in_tags(reply: str) -> str:
    """The text of the reply's first ``<action>...</action>`` (empty without one)."""
    match = _ACTION.search(reply)
    return match.group(1).strip() if match else ""


class Episode(Protocol):
    """The environment as the loop drives it."""

    def reset(self) -> str: ...

    def step(self, action: str) -> tuple[str, float, bool]: ...

    def close(self) -> None: ...


@dataclass
class EpisodeRecord:
    """What happened in one episode: the model turns, step rewards, the observations acted on."""

    turns: list[Experience] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    done: bool = False
    cut: Experience | None = None
    """The reply whose prompt outgrew ``max_prompt_tokens``, when that ended the episode."""


class EnvArgs(PluginArgs):
    """``workflow_args`` of the environment workflows."""

    max_env_steps: int = Field(30, ge=1, description="most model actions per episode")


class EnvironmentWorkflow(ConversationWorkflow):
    """The model acts in an environment for one episode; subclasses name the environment.

    Subclasses give ``open_episode`` (the environment, ready to reset), ``env_system_prompt``
    and, where their rules differ from the sum of step rewards, ``episode_reward`` (or, for a
    reward that is not the environment's, ``episode_components``). Metrics: the environment's
    reward (``env_reward``), ``env_steps`` and ``env_done``.
    """

    Args: ClassVar[type[EnvArgs]] = EnvArgs
    needs_reward_fn = False
    env_system_prompt: ClassVar[str] = ""

    @property
    def args(self) -> Any:
        return self.Args.model_validate(self.task.workflow_args)

    @property
    def task_desc(self) -> str:
        """The row's ``format.prompt_key`` value: what identifies the episode (a game file,
        a session id...), as Trinity-RFT's ``task_desc``."""
        return self.user_prompt

    @property
    def step_limit(self) -> int:
        """The most actions of an episode."""
        return self.args.max_env_steps

    def open_episode(self) -> Episode:
        raise NotImplementedError

    def parse_action(self, reply: str) -> str:
        return action_in_tags(reply)

    def format_observation(self, observation: str) -> str:
        return f"Observation: {observation}"

    def episode_reward(self, record: EpisodeRecord) -> float:
        return float(sum(record.rewards))

    async def episode_components(self, record: EpisodeRecord) -> dict[str, float]:
        """The reward components of the episode (their sum is its reward): the environment's."""
        return {"env_reward": self.episode_reward(record)}

    async def rollout(self) -> list[Experience]:
        episode = await asyncio.to_thread(self.open_episode)
        try:
            record = await self.play(episode, self.step_limit)
        finally:
            await asyncio.to_thread(episode.close)
        components = await self.episode_components(record)
        experiences = await self.experiences(record.turns[-1].messages, record.turns, components)
        if record.cut is not None:
            mark_cut(experiences[-1], record.cut)
        reward = self.episode_reward(record)
        for experience in experiences:
            experience.metrics.update(
                env_reward=reward, env_steps=float(len(record.rewards)), env_done=float(record.done)
            )
        return self.annotate(experiences, record)

    async def play(self, episode: Episode, max_steps: int, context: Messages | None = None) -> EpisodeRecord:
        """Model and environment take turns until the episode ends, ``max_steps`` actions were
        taken, or the conversation outgrows ``max_prompt_tokens`` (``record.cut``: the episode's
        last experience then counts as a truncated prompt, as a conversation's does). The model
        sees ``context`` (default: the system prompt) before the first observation."""
        record = EpisodeRecord()
        observation = self.format_observation(await asyncio.to_thread(episode.reset))
        messages: Messages = context or [{"role": "system", "content": self.env_system_prompt}]
        for _ in range(max_steps):
            messages = [*messages, {"role": "user", "content": observation}]
            (reply,) = await self.model.chat_async(messages, n=1)
            if reply.truncate_status == "prompt_truncated" and record.turns:
                record.cut = reply
                break
            record.turns.append(reply)
            record.observations.append(observation)
            action = self.parse_action(reply.info["response_text"])
            raw, reward, record.done = await asyncio.to_thread(episode.step, action)
            record.rewards.append(float(reward))
            if record.done or reply.truncate_status == "prompt_truncated":
                break
            observation, messages = self.format_observation(raw), reply.messages
        return record

    def annotate(self, experiences: list[Experience], record: EpisodeRecord) -> list[Experience]:
        """A hook for what a workflow adds to its experiences (default: nothing)."""
        return experiences
