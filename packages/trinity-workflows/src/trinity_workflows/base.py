"""What the catalogue's workflows share: prompts from the task's format, scoring, errors.

Every workflow here is async-native (``rollout`` awaits the model's ``*_async`` calls)
and also runnable synchronously (``run``). A failure inside a workflow surfaces as
``WorkflowError`` naming the workflow and the task id, with the original error chained.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType
from typing import Any, ClassVar

from trinity.plugin_api import Experience, ModelWrapper, PicklableError, Task, Workflow, set_reward

Messages = list[dict[str, Any]]


class WorkflowError(PicklableError, RuntimeError):
    """A workflow failed on a task; the message names both, ``__cause__`` is the original."""

    def __init__(self, workflow: str, task: Task, error: BaseException):
        self.task_id = task.task_id
        super().__init__(f"workflow {workflow} failed on task {task.task_id}: {type(error).__name__}: {error}")


class CatalogueWorkflow(Workflow):
    """Base of the catalogue: subclasses implement ``async rollout()``.

    ``default_reward_fn`` is used when the task names none (neither the row through
    ``format.reward_fn_key`` nor the taskset; e.g. ``math_workflow`` -> ``math_reward``).
    ``default_system_prompt`` is used when neither the row (``format.system_prompt_key``)
    nor the taskset (``format.system_prompt``) gives one. A workflow that ``needs_reward_fn``
    refuses to start without one, before any model call.
    """

    default_reward_fn: ClassVar[str | None] = None
    default_system_prompt: ClassVar[str | None] = None
    needs_reward_fn: ClassVar[bool] = True

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: Sequence[ModelWrapper] = ()):
        reward_fn_type = task.reward_fn_type or self.default_reward_fn
        super().__init__(replace(task, reward_fn_type=reward_fn_type), model, auxiliary_models)

    async def rollout(self) -> list[Experience]:
        raise NotImplementedError

    async def run_async(self) -> list[Experience]:
        try:
            if self.needs_reward_fn and self.reward_fn is None:
                raise ValueError(f"{self._name} needs a reward function: set default_reward_fn_type")
            return await self.rollout()
        except Exception as exc:
            raise WorkflowError(self._name, self.task, exc) from exc

    def run(self) -> list[Experience]:
        return asyncio.run(self.run_async())

    @property
    def _name(self) -> str:
        return self.task.workflow_type or type(self).__name__

    # --- the task's format -------------------------------------------------------------

    def _field(self, format_key: str, default: str) -> Any:
        key = self.task.format.get(format_key) or default
        return self.task.raw.get(key)

    @property
    def system_prompt(self) -> str | None:
        row_key = self.task.format.get("system_prompt_key")
        if row_key and self.task.raw.get(row_key):
            return self.task.raw[row_key]
        return self.task.format.get("system_prompt") or self.default_system_prompt

    @property
    def user_prompt(self) -> str:
        """The row's ``format.prompt_key`` value (plaintext tasks)."""
        prompt = self._field("prompt_key", "prompt")
        if prompt is None:
            raise KeyError(f"row has no prompt column '{self.task.format.get('prompt_key') or 'prompt'}'")
        return str(prompt)

    def messages(self) -> Messages:
        """The conversation to send: the row's ``messages_key`` list (``prompt_type: messages``)
        or the system prompt plus ``user_prompt``; a system prompt is prepended when missing."""
        if self.task.format.get("prompt_type") == "messages":
            messages = [dict(m) for m in self._field("messages_key", "messages")]
        else:
            messages = [{"role": "user", "content": self.user_prompt}]
        if self.system_prompt and messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    # --- scoring -----------------------------------------------------------------------

    def score(self, response: str, truth: Any, prompt: str | None = None, **context: Any) -> dict[str, float]:
        """The reward components; ``context`` (e.g. ``response_length``) reaches only the
        reward functions that declare it, so simple functions need no ``**kwargs``; ``messages``
        is the conversation, the response last (for the rewards that grade a trajectory)."""
        return call_reward(self.reward_fn, self.task.reward_fn_args, response, truth, prompt, **context)

    def score_experience(self, experience: Experience, prompt: str | None = None) -> Experience:
        """Score one experience's response against ``truth`` and store reward and components."""
        response = experience.info["response_text"]
        components = self.score(
            response, self.truth, prompt, response_length=experience.response_length, messages=experience.messages
        )
        return set_reward(experience, components)


def call_reward(
    fn: Any, fn_args: dict[str, Any], response: str, truth: Any, prompt: str | None = None, **context: Any
) -> dict[str, float]:
    """``fn(response, truth, prompt, **fn_args)``, its reward components; each ``context`` keyword
    reaches it only where it declares that keyword."""
    keywords = _keywords(fn)
    accepted = {k: v for k, v in context.items() if keywords is None or k in keywords}
    return fn(response=response, truth=truth, prompt=prompt, **accepted, **fn_args)


@functools.lru_cache(maxsize=256)
def _keywords(fn: Any) -> frozenset[str] | None:
    """The keyword arguments ``fn`` declares, None when it takes any (``**kwargs``). Cached: a
    step scores every sample, and reading a signature costs as much as a small reward."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)


def last_user_text(messages: Messages) -> str | None:
    """The content of the last user message (what reward functions get as ``prompt``)."""
    return next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)


def require(module: str, install: str) -> ModuleType:
    """``module``, imported; if it cannot be, an ``ImportError`` that says ``install`` (for the
    optional libraries of environments and agent frameworks, imported on first use)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"cannot import {module} ({exc}): {install}") from exc
