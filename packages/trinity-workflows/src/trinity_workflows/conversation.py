"""Multi-turn workflows: the model and an environment (follow-up turns, tools) take turns.

``ConversationWorkflow`` runs the loop: the model replies, ``respond`` answers with the next messages
(or ends the conversation), for at most ``workflow_args.max_turns`` model turns; the final reply is
scored against the truth. ``multi_turn_workflow`` gives one experience masked to the model's turns,
``step_wise_workflow`` one per model turn (each with the final reward), ``tool_call_workflow`` the
first with the environment executing tool calls (``trinity_workflows.tools``). An environment
subclasses one and overrides ``respond`` (and ``tools``). Conversations are tokenised by the rollout
engine's own chat template (``ModelWrapper.tokenize_conversation``), so the mask is the engine's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any, ClassVar

import torch

from trinity.plugin_api import TRUNCATED_FROM, Experience, ModelWrapper, Task, set_reward
from trinity_workflows.base import CatalogueWorkflow, Messages, last_user_text
from trinity_workflows.tools import ToolCall, ToolFunction, execute, parse_tool_calls, resolve_tools, tool_schemas


class ConversationWorkflow(CatalogueWorkflow):
    """The turn loop; subclasses decide what becomes of the turns (``experiences``).

    Each run is one conversation, so the explorer runs ``repeat_times`` instances. A turn
    whose prompt no longer fits ``max_prompt_tokens`` ends the conversation without it, and the
    conversation's last experience counts as a truncated prompt (``mark_cut``).
    """

    can_repeat = False
    default_max_turns: ClassVar[int] = 4

    @property
    def max_turns(self) -> int:
        return int(self.task.workflow_args.get("max_turns", self.default_max_turns))

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """OpenAI tool schemas the chat template offers the model on every turn (default: none)."""
        return None

    async def respond(self, messages: Messages, turn: int) -> Messages | None:
        """The messages that answer the model's reply of ``turn`` (0-based), or None to stop.

        Default: the row's follow-up user turns (``workflow_args.turns_key``, default
        ``turns``: a list of strings), one after each reply.
        """
        follow_ups = self.task.raw.get(self.task.workflow_args.get("turns_key", "turns")) or []
        return [{"role": "user", "content": str(follow_ups[turn])}] if turn < len(follow_ups) else None

    async def rollout(self) -> list[Experience]:
        messages = self.messages()
        prompt = last_user_text(messages)
        turns: list[Experience] = []
        cut: Experience | None = None
        for turn in range(self.max_turns):
            (reply,) = await self.model.chat_async(messages, n=1, tools=self.tools)
            prompt_truncated = reply.truncate_status == "prompt_truncated"
            if prompt_truncated and turns:
                cut = reply  # the conversation outgrew max_prompt_tokens: it ends with the turns so far
                break
            turns.append(reply)
            follow_up = None if prompt_truncated else await self.respond(reply.messages, turn)
            if not follow_up:  # done (or not even the first prompt fit: the trainer leaves it out)
                break
            messages = [*reply.messages, *follow_up]
        components = await self.grade(turns, prompt)
        experiences = await self.experiences(turns[-1].messages, turns, components)
        if cut is not None:
            mark_cut(experiences[-1], cut)
        return experiences

    async def grade(self, turns: list[Experience], prompt: str | None) -> dict[str, float]:
        """The reward components of the conversation (default: the reward function on the last
        reply); a workflow that grades the whole episode, or asks a judge, overrides it."""
        return self.score(turns[-1].info["response_text"], self.truth, prompt, messages=turns[-1].messages)

    async def experiences(
        self, messages: Messages, turns: list[Experience], components: dict[str, float]
    ) -> list[Experience]:
        raise NotImplementedError


def mark_cut(experience: Experience, cut: Experience) -> None:
    """``experience``, the last of a conversation that ended because the prompt of its next turn
    (``cut``) was over ``max_prompt_tokens``, counts as a truncated prompt
    (``rollout/truncated_prompts``, with its length before the cut), so the explorer warns of it
    naming the key. Its turns so far still train; uncounted, a run whose conversations all ended
    there (a tool's result never seen) trained at reward 0 without a word."""
    experience.truncate_status = "prompt_truncated"
    if TRUNCATED_FROM in cut.info:
        experience.info[TRUNCATED_FROM] = cut.info[TRUNCATED_FROM]


class MultiTurnWorkflow(ConversationWorkflow):
    """The whole conversation as one experience, masked to the model's turns.

    Tokens come from the chat template over the final conversation; logprobs are
    recomputed for them in one pass of the rollout model (the weights that sampled the
    turns), since re-tokenized earlier turns need not match the sampled ids exactly.
    """

    async def experiences(
        self, messages: Messages, turns: list[Experience], components: dict[str, float]
    ) -> list[Experience]:
        conversation = self.model.tokenize_conversation(messages, self.tools)
        tokens, prompt_length = conversation.tokens, conversation.prompt_length
        logprobs = await self.model.logprobs_async(tokens)
        experience = Experience(
            tokens=torch.tensor(tokens, dtype=torch.long),
            prompt_length=prompt_length,
            logprobs=torch.tensor(logprobs[prompt_length:], dtype=torch.float32),
            action_mask=torch.tensor(conversation.action_mask, dtype=torch.bool),
            model_version=turns[-1].model_version,
            truncate_status=next((t.truncate_status for t in turns if t.truncate_status), None),
            messages=messages,
            info={"response_text": turns[-1].info["response_text"], "turns": len(turns)},
        )
        return [set_reward(experience, components)]


class StepWiseWorkflow(ConversationWorkflow):
    """One experience per model turn, ``eid.step`` = turn index, all with the final reward.

    Each turn records the state it acted from as ``info["env_state_hash"]``, a digest of the
    conversation before the reply: turns of different runs that saw the same conversation share
    it, which is what GiGPO's step-level groups compare (``advantage_fn: gigpo``).
    """

    async def experiences(
        self, messages: Messages, turns: list[Experience], components: dict[str, float]
    ) -> list[Experience]:
        for step, turn in enumerate(turns):
            turn.eid = replace(turn.eid, step=step)
            state = json.dumps(turn.messages[:-1], sort_keys=True, ensure_ascii=False)
            turn.info["env_state_hash"] = hashlib.sha256(state.encode()).hexdigest()[:16]
            set_reward(turn, components)
        return turns


class ToolUse(ConversationWorkflow):
    """The model calls tools until it answers without a call: each call's result (or error) is
    a ``tool`` turn. Subclasses give ``tools`` (schemas) and ``functions`` (name -> callable);
    each call runs with ``workflow_args.tool_timeout`` seconds (default 10). Metrics
    ``tool_calls`` and ``tool_errors`` (on the first experience) count the calls."""

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: Sequence[ModelWrapper] = ()):
        super().__init__(task, model, auxiliary_models)
        self.calls = self.errors = 0

    @property
    def functions(self) -> dict[str, ToolFunction]:
        raise NotImplementedError

    async def rollout(self) -> list[Experience]:
        self.functions  # noqa: B018 -- a tool without a function fails before any model call
        experiences = await super().rollout()
        if experiences:  # a workflow may leave out all of them (too long for training)
            experiences[0].metrics.update(tool_calls=float(self.calls), tool_errors=float(self.errors))
        return experiences

    async def respond(self, messages: Messages, turn: int) -> Messages | None:
        return await self.run_calls(parse_tool_calls(messages[-1]["content"]))

    async def run_calls(self, calls: list[ToolCall]) -> Messages | None:
        """The ``tool`` turns answering ``calls`` (None when there are none: the conversation ends)."""
        if not calls:
            return None
        timeout = float(self.task.workflow_args.get("tool_timeout", 10))
        results = await asyncio.gather(*(execute(call, self.functions, timeout, self.task) for call in calls))
        self.calls += len(calls)
        self.errors += sum(not ok for _, ok in results)
        return [{"role": "tool", "name": c.name, "content": text} for c, (text, _) in zip(calls, results, strict=True)]


class ToolCallWorkflow(ToolUse, MultiTurnWorkflow):
    """Tool use on the task's tools; the whole conversation is one experience, masked to the
    model's turns, and the last reply is scored.

    Tool schemas come from the row's ``format.tools_key`` column (default ``tools``) or
    ``workflow_args.tools``; the functions are those
    registered with ``register_tool`` or mapped in ``workflow_args.tool_functions`` (one with a
    ``task`` parameter gets this task: tools over the row's own data). The
    schemas go to the chat template as ``tools`` (a template that renders none gets them in
    the system prompt, as Qwen2.5's renders them).
    """

    @cached_property
    def tools(self) -> list[dict[str, Any]]:
        tools_key = self.task.format.get("tools_key") or "tools"
        return tool_schemas(self.task.raw.get(tools_key) or self.task.workflow_args.get("tools"))

    @cached_property
    def functions(self) -> dict[str, ToolFunction]:
        return resolve_tools(self.tools, self.task.workflow_args.get("tool_functions", {}))
