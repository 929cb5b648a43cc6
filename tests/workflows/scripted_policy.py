"""A scripted policy: the tiny model's tokenizer, chat template and logprobs, with replies written by
the test (a random tiny model never writes a well-formed SQL statement, tool call or tag chain, so
the environment paths that need one are driven by a script; everything else is the real engine)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

import torch

from trinity.common.experience import Experience, Task
from trinity.plugins import Kind, resolve
from trinity.rollout.model_wrapper import ModelWrapper

Reply = str | Callable[[list[dict]], str]


class ScriptedPolicy(ModelWrapper):
    """Answers each chat with the next of ``replies`` (a text, or a function of the conversation);
    ``seen`` keeps every conversation it was asked to continue."""

    def __init__(self, model: ModelWrapper, replies: Iterable[Reply]):
        super().__init__(model.client, model.defaults)
        self.replies, self.seen = iter(replies), []

    async def chat_async(self, messages, **sampling):
        self.seen.append(messages)
        reply = next(self.replies)
        text = reply(messages) if callable(reply) else reply
        conversation = self.tokenize_conversation(
            [*messages, {"role": "assistant", "content": text}], sampling.get("tools")
        )
        tokens, prompt_length = conversation.tokens, conversation.prompt_length
        logprobs = await self.logprobs_async(tokens)
        return [
            Experience(
                tokens=torch.tensor(tokens, dtype=torch.long),
                prompt_length=prompt_length,
                logprobs=torch.tensor(logprobs[prompt_length:], dtype=torch.float32),
                messages=[*messages, {"role": "assistant", "content": text}],
                info={"response_text": text, "finish_reason": "stop"},
            )
        ]


def scripted_workflow(
    model: ModelWrapper, workflow_type: str, raw: dict, replies: Iterable[Reply], auxiliary_models=(), **task_fields
):
    """The registered ``workflow_type`` on a task of ``raw``, its model the scripted policy."""
    task = Task(workflow_type=workflow_type, raw=raw, taskset_name="t", index=0, **task_fields)
    policy = ScriptedPolicy(model, replies)
    policy.defaults = replace(policy.defaults, n=1)
    return resolve(Kind.WORKFLOW, workflow_type)(task, policy, auxiliary_models), policy
