"""Single-call workflows: ask once (``repeat_times`` samples), score each response.

Prompt construction, in order: the row's messages (``prompt_type: messages``) or its
``prompt_key`` text as the user turn; a system prompt from the row
(``format.system_prompt_key``), else the taskset (``format.system_prompt``), else the
workflow's default below. Sampling settings (temperature, ``max_tokens``...) are the
ModelWrapper's: the model config merged with the taskset's ``rollout_args``; the
workflow asks for ``n = repeat_times`` samples in one call.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import torch

from trinity.plugin_api import Experience, Field, PluginArgs
from trinity_workflows.base import CatalogueWorkflow, Messages, last_user_text

THINK_ANSWER_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>."
)
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
COUNTDOWN_PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. "
    "And return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
)


class SimpleWorkflow(CatalogueWorkflow):
    """Chat once with the task's conversation and score every sample with the reward function.

    The taskset must name a reward function (``default_reward_fn_type``).
    """

    sampling_overrides: ClassVar[dict[str, Any]] = {}

    async def rollout(self) -> list[Experience]:
        messages = self.messages()
        experiences = await self.model.chat_async(messages, n=self.repeat_times, **self.sampling_overrides)
        prompt = last_user_text(messages)
        return [self.score_experience(e, prompt) for e in experiences]


class MathWorkflow(SimpleWorkflow):
    """Math word problems with ``math_reward`` by default; the default system prompt asks for
    ``<think>...</think> <answer>...</answer>`` (Trinity-RFT's), ``format.system_prompt`` replaces it.

    Works on plaintext rows like ``{"question": "3+4=", "answer": "7"}`` with
    ``prompt_key: question`` and ``response_key: answer``.
    """

    default_reward_fn = "math_reward"
    default_system_prompt = THINK_ANSWER_SYSTEM_PROMPT


class MathBoxedWorkflow(SimpleWorkflow):
    """Math with the final answer in ``\\boxed{}`` (Qwen-math style prompt), graded by
    ``math_boxed_reward``; its ``with_think`` / ``format_penalty`` come from ``reward_fn_args``."""

    default_reward_fn = "math_boxed_reward"
    default_system_prompt = BOXED_SYSTEM_PROMPT


class MathEvalWorkflow(SimpleWorkflow):
    """For eval tasksets: the boxed prompt, but graded by ``math_reward`` (the ``<answer>`` tag,
    else the last box, else the text), so the score measures correctness, not format; no logprobs.

    The explorer turns the per-sample ``accuracy`` into ``mean@k`` and ``best@k`` (pass@k).
    """

    default_reward_fn = "math_reward"
    default_system_prompt = BOXED_SYSTEM_PROMPT
    sampling_overrides = {"logprobs": False}


class CountdownWorkflow(SimpleWorkflow):
    """The countdown arithmetic puzzle with ``countdown_reward``, in either data layout:

    - TinyZero's: ``numbers`` and ``target`` columns (renamed by ``workflow_args.numbers_key``
      / ``target_key``) are the truth, and TinyZero's prompt is built from them when the row
      has no prompt column;
    - Trinity-RFT's: a prompt column and a response column holding ``{"numbers", "target"}``
      (or its JSON text).
    """

    default_reward_fn = "countdown_reward"

    @property
    def _puzzle(self) -> dict[str, Any] | None:
        args, raw = self.task.workflow_args, self.task.raw
        numbers, target = args.get("numbers_key", "numbers"), args.get("target_key", "target")
        return {"numbers": raw[numbers], "target": raw[target]} if numbers in raw and target in raw else None

    @property
    def user_prompt(self) -> str:
        puzzle = self._puzzle
        if puzzle is not None and self._field("prompt_key", "prompt") is None:
            return COUNTDOWN_PROMPT.format(**puzzle)
        return super().user_prompt

    @property
    def truth(self) -> Any:
        return self._puzzle or super().truth


class OnPolicyDistillWorkflow(SimpleWorkflow):
    """On-policy distillation (Trinity-RFT's ``on_policy_distill_workflow``, after Thinking
    Machines' recipe): the rollout model, the student, samples; the first auxiliary model, the
    teacher, scores every sampled token. Its logprobs go to ``Experience.teacher_logprobs``,
    which the ``on_policy_distill`` and ``jsd`` advantages read.

    A reward function is optional (the signal is the teacher's): with one each sample is
    scored as in ``simple_workflow``, without one the reward is 0. Metric ``kl_divergence``:
    the summed ``logp_student - logp_teacher`` of the response.
    """

    needs_reward_fn = False

    async def rollout(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise ValueError("on-policy distillation needs a teacher: the first of explorer.auxiliary_models")
        teacher = self.auxiliary_models[0]
        messages = self.messages()
        experiences = await self.model.chat_async(messages, n=self.repeat_times)
        prompt = last_user_text(messages)
        for exp in experiences:
            logprobs = await asyncio.to_thread(teacher.logprobs, exp.tokens.tolist())
            exp.teacher_logprobs = torch.tensor(logprobs[exp.prompt_length :], dtype=torch.float32)
            if self.reward_fn is not None:
                self.score_experience(exp, prompt)
            else:
                exp.reward = 0.0
            exp.metrics["kl_divergence"] = float((exp.logprobs - exp.teacher_logprobs).sum())
        return experiences


class OnPolicyDistillMathWorkflow(OnPolicyDistillWorkflow):
    """``on_policy_distill_workflow`` with Qwen2.5-Math's prompt (Trinity-RFT's
    ``on_policy_distill_math_workflow``): the system prompt "You are a helpful assistant." and
    the question followed by the boxed-answer instruction; each sample is graded by
    ``math_reward`` (the boxed answer against the truth) unless the task names another.
    """

    default_reward_fn = "math_reward"
    default_system_prompt = "You are a helpful assistant."

    @property
    def user_prompt(self) -> str:
        return f"{super().user_prompt}\n{BOXED_SYSTEM_PROMPT}"


class ThinkingBudgetArgs(PluginArgs):
    """``workflow_args`` of ``thinking_budget_workflow``."""

    thinking_token_budget: int | None = Field(
        None, ge=1, description="most tokens of thinking before its end is forced (required)"
    )
    reasoning_end_str: str = Field("</think>", min_length=1, description="the text that ends the thinking")


class ThinkingBudgetWorkflow(CatalogueWorkflow):
    """Responses whose thinking is cut at a token budget (Trinity-RFT's
    ``thinking_budget_workflow``, which asks vLLM for ``thinking_token_budget``): each sample
    thinks for at most ``thinking_token_budget`` tokens; if it has not written
    ``reasoning_end_str`` by then, that text is appended for it, and it goes on to answer. The
    forced end is masked out of the loss (``action_mask`` 0). Works on any engine with a
    tokenizer: the continuation is a second call on the raw text, and the response's logprobs
    are recomputed in one pass over the whole sequence. The prompt is the row's
    ``messages`` column (Trinity-RFT's) or the task's prompt; a reward function is optional
    (without one the reward is 0). Metric ``thinking_forced``: 1 where the end was forced.
    """

    Args = ThinkingBudgetArgs
    needs_reward_fn = False

    def messages(self) -> Messages:
        row_messages = self.task.raw.get(self.task.format.get("messages_key") or "messages")
        return [dict(m) for m in row_messages] if isinstance(row_messages, list) else super().messages()

    async def rollout(self) -> list[Experience]:
        args = ThinkingBudgetArgs.model_validate(self.task.workflow_args)
        if args.thinking_token_budget is None:
            raise ValueError("no budget: set workflow_args.thinking_token_budget (tokens of thinking, >= 1)")
        chat = self.model.chat_tokenizer
        messages = self.messages()
        prompt = chat.render(messages, generation_prompt=True)
        thoughts = await self.model.generate_async(prompt, n=self.repeat_times, max_tokens=args.thinking_token_budget)
        total = self.model.defaults.max_tokens
        end_ids = chat.encode(args.reasoning_end_str)
        experiences = await asyncio.gather(
            *(self._finish(exp, prompt, args.reasoning_end_str, end_ids, total, messages) for exp in thoughts)
        )
        question = last_user_text(messages)
        for exp in experiences:
            if self.reward_fn is not None:
                self.score_experience(exp, question)
            else:
                exp.reward = 0.0
        return list(experiences)

    async def _finish(
        self, thought: Experience, prompt: str, end: str, end_ids: list[int], total: int | None, messages: Messages
    ) -> Experience:
        """``thought`` ended (its own end of thinking, or the forced one) and answered."""
        text = thought.info["response_text"]
        forced = end not in text
        if not forced and thought.info["finish_reason"] == "stop":
            thought.action_mask = torch.ones(thought.response_length, dtype=torch.bool)
            thought.metrics["thinking_forced"] = 0.0
            return thought
        inserted = end_ids if forced else []
        so_far = text + (end if forced else "")
        left = None if total is None else max(1, total - thought.response_length - len(inserted))
        (answer,) = await self.model.generate_async(prompt + so_far, n=1, max_tokens=left)
        tokens = [*thought.tokens.tolist(), *inserted, *answer.tokens[answer.prompt_length :].tolist()]
        logprobs = await self.model.logprobs_async(tokens)
        mask = torch.ones(len(tokens) - thought.prompt_length, dtype=torch.bool)
        mask[thought.response_length : thought.response_length + len(inserted)] = False
        response_text = so_far + answer.info["response_text"]
        return Experience(
            tokens=torch.tensor(tokens, dtype=torch.long),
            prompt_length=thought.prompt_length,
            logprobs=torch.tensor(logprobs[thought.prompt_length :], dtype=torch.float32),
            action_mask=mask,
            model_version=answer.model_version,
            truncate_status=answer.truncate_status,
            messages=[*messages, {"role": "assistant", "content": response_text}],
            info={"response_text": response_text, "finish_reason": answer.info["finish_reason"]},
            metrics={"thinking_forced": float(forced)},
        )
