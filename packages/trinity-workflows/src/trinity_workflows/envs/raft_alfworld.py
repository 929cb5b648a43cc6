"""RAFT on ALFWorld (Trinity-RFT's ``RAFT_alfworld_workflow`` and ``RAFT_reflect_alfworld_workflow``):
the workflows write fine-tuning data, the model's own successful games, for ``algorithm_type: raft``.

Each reply carries non-empty ``<experience>``, ``<think>`` and ``<action>``; a game is at most
``max_env_steps`` actions, three identical ones in a row losing it. ``RAFT_alfworld_workflow`` keeps a
won, well-formed game as one multi-turn experience; ``RAFT_reflect_alfworld_workflow`` also lets the
model replay a lost game, seeing the first and a note on it, and keeps the second game (without that
context) when it is well-formed and does better. Evaluation tasks give their game whatever its
outcome. Rules and metrics: the package README.
"""

from __future__ import annotations

import asyncio
import re
from typing import ClassVar

from trinity.plugin_api import Experience, Field
from trinity_workflows.base import Messages
from trinity_workflows.conversation import MultiTurnWorkflow
from trinity_workflows.envs.base import EnvArgs, Episode, EpisodeRecord
from trinity_workflows.envs.text_games import ALFWORLD_PROMPT, AlfworldGame

RAFT_FORMAT = """Answer every step with exactly these three tags, in this order:
<experience>working principles, strategies, common knowledge and pitfalls for this kind of task</experience>
<think>your reasoning</think>
<action>exactly one command</action>
The <experience> must hold lessons that carry over to other tasks of this type, not placeholders \
or steps of this one task."""

RAFT_PROMPT = ALFWORLD_PROMPT.split("Each step, think first", 1)[0] + RAFT_FORMAT

SECOND_ATTEMPT = """{feedback}

This is your second attempt: do better. Update your <experience> with what the first attempt taught \
you (strategies, pitfalls, knowledge of the domain) and never repeat an action that did nothing. Do \
not mention the first attempt in your replies: act as if starting fresh, with the lessons learned."""

_REPLY = re.compile(
    r"<experience>\s*(.*?)\s*</experience>.*?<think>\s*(.*?)\s*</think>.*?<action>\s*(.*?)\s*</action>", re.DOTALL
)


def parse_reply(reply: str) -> tuple[str, str, str]:
    """The reply's experience, thought and action (all empty when the tags are not there in order)."""
    match = _REPLY.search(reply)
    return (match.group(1), match.group(2), match.group(3)) if match else ("", "", "")


def well_formed(record: EpisodeRecord) -> bool:
    """Whether every reply of the game has all three parts."""
    return all(all(parse_reply(turn.info["response_text"])) for turn in record.turns)


class RepeatGuard:
    """An episode that ends, lost, at the third identical action in a row (not taken)."""

    def __init__(self, episode: Episode):
        self.episode, self.last, self.stalled = episode, [], False

    def reset(self) -> str:
        self.last, self.stalled = [], False
        return self.episode.reset()

    def step(self, action: str) -> tuple[str, float, bool]:
        self.last = [*self.last[-2:], action]
        if len(self.last) == 3 and len(set(self.last)) == 1:
            self.stalled = True
            return "The same action three times in a row: the game ends.", 0.0, True
        return self.episode.step(action)

    def close(self) -> None:
        self.episode.close()


class RAFTArgs(EnvArgs):
    max_env_steps: int = Field(50, ge=1, description="most model actions per game")


def game_reward(record: EpisodeRecord) -> float:
    """The last step's reward (0 for a game without steps)."""
    return record.rewards[-1] if record.rewards else 0.0


class RAFTAlfworldWorkflow(AlfworldGame, MultiTurnWorkflow):
    """RAFT data from ALFWorld games won at the first attempt (see the module doc)."""

    Args: ClassVar[type[EnvArgs]] = RAFTArgs
    env_system_prompt = RAFT_PROMPT

    def parse_action(self, reply: str) -> str:
        return parse_reply(reply)[2]

    async def attempt(self, context: Messages | None = None, guard: bool = True) -> EpisodeRecord:
        """One game (``guard``: ended at three identical actions)."""
        episode = await asyncio.to_thread(self.open_episode)
        try:
            return await self.play(RepeatGuard(episode) if guard else episode, self.step_limit, context)
        finally:
            await asyncio.to_thread(episode.close)

    async def as_data(self, messages: Messages, record: EpisodeRecord, **metrics: float) -> list[Experience]:
        reward = game_reward(record)
        (experience,) = await self.experiences(messages, record.turns, {"env_reward": reward})
        success = float(record.done and reward >= 1)
        experience.metrics.update(
            {"success": success, "reward": reward, "steps": float(len(record.rewards)), **metrics}
        )
        return [experience]

    async def rollout(self) -> list[Experience]:
        record = await self.attempt()
        if self.task.is_eval or (game_reward(record) >= 1 and well_formed(record)):
            return await self.as_data(record.turns[-1].messages, record)
        return []


def feedback(reward: float, steps: int, limit: int) -> str:
    """What the model is told of its lost first game (Trinity-RFT's words)."""
    if steps >= limit:
        ending = f"reached the limit of {limit} steps without completing the task (reward: {reward:.3f})"
        return f"In your attempt, you {ending}. Be more efficient and focused to finish within the limit."
    ending = f"stopped after {steps} steps with a reward of {reward:.3f} without completing the task"
    return f"In your attempt, you {ending}. Improve your strategy and persist until you succeed."


class RAFTReflectAlfworldWorkflow(RAFTAlfworldWorkflow):
    """RAFT data from ALFWorld with a second, reflective attempt after a lost game (see the module doc)."""

    async def rollout(self) -> list[Experience]:
        first = await self.attempt()
        reward, steps = game_reward(first), len(first.rewards)
        if self.task.is_eval or reward >= 1:
            won = well_formed(first) or self.task.is_eval
            return await self.as_data(first.turns[-1].messages, first) if won else []
        note = SECOND_ATTEMPT.format(feedback=feedback(reward, steps, self.step_limit))
        context = [*first.turns[-1].messages, {"role": "system", "content": note}]
        second = await self.attempt(context, guard=False)
        new_reward, new_steps = game_reward(second), len(second.rewards)
        improved = new_reward > reward
        if not (well_formed(second) and (improved or (new_steps < steps and new_reward >= 1))):
            return []
        clean = [{"role": "system", "content": self.env_system_prompt}, *second.turns[-1].messages[len(context) :]]
        metrics = {"reward": reward, "steps": float(steps), "second_reward": new_reward}
        metrics.update(second_steps=float(new_steps), improvement=float(improved))
        return await self.as_data(clean, second, **metrics)
