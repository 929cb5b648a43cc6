"""``learn2ask_workflow``: a doctor model learns to ask the next question of a medical inquiry, or to
stop when enough is known (Trinity-RFT's Learn2Ask example).

The row's prompt column is the dialogue so far; ``decision_truth`` (``continue`` or ``stop``) and
``info_truth`` (what is still to be learnt) are the truth, and a reply containing ``<stop />``
stops. The judge (``explorer.auxiliary_models[0]``) grades a continuing reply's question for format
and content; the three scores (``action_score``, ``format_score``, ``content_score``) are metrics,
and ``workflow_args.train_mode`` combines them into the reward (the package README).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import ClassVar, Literal

from trinity.plugin_api import Experience, Field, ModelWrapper, PluginArgs, Task
from trinity_workflows.base import CatalogueWorkflow, Messages

GUIDELINES = """# Task
You are a medical assistant. Your task is to understand the ongoing conversation and continue the \
medical inquiry in English.

## Guidelines
- Each response must contain exactly one clear and concise medical question with 2 to 3 answer choices.
- Do not repeat any previous question.
- Your response must be a single sentence."""
STOP_GUIDELINE = "\n- If enough information has been gathered to make a medication suggestion, output only: <stop />"

JUDGE_PROMPT = """# Task
You are an evaluation assistant. The user gives a dialogue between a doctor and a patient: evaluate \
the doctor's last message.

# Grading Policy
## Format Score
- 1.0: the doctor's last message contains exactly one question.
- 0.5: it contains two questions.
- 0.0: it contains three or more questions.

## Content Score
- 1.0: the question(s) directly ask about an item of the Reference Information.
- 0.5: the question(s) are highly relevant to, but do not directly ask about, an item of it.
- 0.0: the question(s) are irrelevant to every item of it.

# Reference Information
{info}

# Output Format
<think>your reasoning for both scores, briefly</think>
<format_score>the format score only, as a number (1.0, 0.5 or 0.0)</format_score>
<content_score>the content score only, as a number (1.0, 0.5 or 0.0)</content_score>
Output exactly these three tags and nothing else; judge only the doctor's last message."""

STOP = "<stop />"
_TAG = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)


class Learn2AskArgs(PluginArgs):
    """``workflow_args`` of ``learn2ask_workflow``."""

    train_mode: Literal["Ra+Rs", "Ra", "Rs"] = Field("Ra+Rs", description="which rewards train (see the module)")
    fusion_mode: Literal["default", "sum"] = Field("default", description="Ra+Rs: multiplicative or summed")


def fuse(action: float, content: float, form: float, train_mode: str, fusion_mode: str) -> float:
    """The reward of the three scores under ``train_mode`` / ``fusion_mode``."""
    if train_mode == "Ra":
        return 2 * content + form
    if train_mode == "Rs":
        return 3 * action + form
    return action + content + form if fusion_mode == "sum" else action * (1 + 2 * content) + form


def dialogue_text(messages: Messages) -> str:
    """The dialogue as the judge reads it: ``patient:`` and ``doctor:`` lines."""
    speakers = {"user": "patient", "assistant": "doctor"}
    return "".join(f"{speakers[m['role']]}: {m['content']}\n" for m in messages if m["role"] in speakers)


def _score(tags: dict[str, str], name: str) -> float:
    try:
        return float(tags.get(name, 0.0))
    except ValueError:
        return 0.0


class Learn2AskWorkflow(CatalogueWorkflow):
    """Samples the doctor's next message ``repeat_times`` times and scores each (see the module)."""

    Args: ClassVar[type[PluginArgs]] = Learn2AskArgs
    needs_reward_fn = False

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: Sequence[ModelWrapper] = ()):
        super().__init__(task, model, auxiliary_models)
        self.args = Learn2AskArgs.model_validate(task.workflow_args)

    @property
    def dialogue(self) -> Messages:
        history = self._field("prompt_key", "prompt")
        if isinstance(history, str):
            return [{"role": "user", "content": history}]
        if isinstance(history, list):
            return [dict(m) for m in history]
        raise ValueError(f"the prompt column must be a dialogue (a list of messages) or a string, not {history!r}")

    def messages(self) -> Messages:
        guidelines = GUIDELINES if self.args.train_mode == "Ra" else GUIDELINES + STOP_GUIDELINE
        return [{"role": "system", "content": guidelines}, *self.dialogue]

    async def rollout(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise LookupError("learn2ask_workflow grades with explorer.auxiliary_models[0], and there is none")
        responses = await self.model.chat_async(self.messages(), n=self.repeat_times)
        await asyncio.gather(*(self.grade(experience) for experience in responses))
        return responses

    async def grade(self, experience: Experience) -> None:
        reply = experience.info["response_text"]
        truth = self.task.raw.get("decision_truth", "continue")
        action = 1.0 if truth == ("stop" if STOP in reply else "continue") else 0.0
        content = form = 0.0
        if action and truth == "continue":
            content, form = await self.judge(reply)
        elif action:
            content, form = 1.0, float(reply == STOP)
        experience.reward = fuse(action, content, form, self.args.train_mode, self.args.fusion_mode)
        experience.metrics.update(action_score=action, content_score=content, format_score=form)

    async def judge(self, reply: str) -> tuple[float, float]:
        """The judge's content and format scores of ``reply``."""
        dialogue = dialogue_text([*self.dialogue, {"role": "assistant", "content": reply}])
        system = JUDGE_PROMPT.format(info=self.task.raw.get("info_truth", "None"))
        messages = [{"role": "system", "content": system}, {"role": "user", "content": dialogue}]
        (verdict,) = await self.auxiliary_models[0].chat_async(messages, n=1)
        tags = dict(_TAG.findall(verdict.info["response_text"]))
        return _score(tags, "content_score"), _score(tags, "format_score")
