"""LLM-as-a-judge: an auxiliary model scores each response against the task's rubric.

The judge is ``explorer.auxiliary_models[workflow_args.judge_model]`` (default the first).
It sees the question, the reference answer when the row has one, the rubric and the
response, and must end with ``Score: N`` (0 <= N <= ``max_score``). A judge reply without
a valid score is asked again (``judge_retries`` times); if it never gives one the run
fails with ``JudgeError``, naming the task and quoting the judge, so a broken judge shows
up in the explorer's failure count and logs instead of as a silent reward of 0.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from trinity.plugin_api import Experience, ModelWrapper, set_reward
from trinity_workflows.base import CatalogueWorkflow, last_user_text

JUDGE_PROMPT = """You are grading a response to a question, following a rubric.

# Question
{question}
{reference}
# Rubric
{rubric}

# Response
{response}

Judge the response by the rubric only. Explain briefly, then end with a line "Score: N", \
where N is a number from 0 to {max_score}."""

_SCORE = re.compile(r"score[\s:*=]{0,6}(-?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?", re.IGNORECASE)


class JudgeError(RuntimeError):
    """The judge gave no parsable score."""


def parse_score(text: str, max_score: float) -> float | None:
    """The last ``Score: N`` (also ``**Score:** N``, ``score = N/10``) in ``text`` if
    0 <= N <= max_score, else None. ``N/M`` with another scale ``M`` is rescaled."""
    matches = _SCORE.findall(text)
    if not matches:
        return None
    value, scale = matches[-1]
    score = float(value) * (max_score / float(scale) if scale and float(scale) > 0 else 1.0)
    return score if 0 <= score <= max_score else None


class RubricJudgeWorkflow(CatalogueWorkflow):
    """Sample ``repeat_times`` responses; each one's reward is the judge's score / ``max_score``.

    ``workflow_args``: ``rubric`` (or the row's ``rubric_key`` column, default ``rubric``),
    ``max_score`` (10), ``judge_model`` (0), ``judge_retries`` (2) and ``judge_sampling``
    (sampling arguments for the judge, e.g. ``{"temperature": 0.0, "max_tokens": 512}``).
    The reward component is ``judge``; the judge's reply is kept in ``info["judge_output"]``.
    """

    needs_reward_fn = False

    def _arg(self, name: str, default: Any) -> Any:
        return self.task.workflow_args.get(name, default)

    @property
    def judge(self) -> ModelWrapper:
        index = int(self._arg("judge_model", 0))
        if index >= len(self.auxiliary_models):
            raise LookupError(
                f"the judge is auxiliary model {index}, but explorer.auxiliary_models has {len(self.auxiliary_models)}"
            )
        return self.auxiliary_models[index]

    @property
    def rubric(self) -> str:
        rubric = self.task.raw.get(self._arg("rubric_key", "rubric")) or self._arg("rubric", None)
        if not rubric:
            raise KeyError(
                "no rubric: set workflow_args.rubric or give rows a 'rubric' column (workflow_args.rubric_key)"
            )
        return str(rubric)

    async def rollout(self) -> list[Experience]:
        judge, rubric = self.judge, self.rubric
        messages = self.messages()
        experiences = await self.model.chat_async(messages, n=self.repeat_times)
        question = last_user_text(messages) or ""
        await asyncio.gather(*(self._grade(judge, rubric, question, exp, i) for i, exp in enumerate(experiences)))
        return experiences

    async def _grade(self, judge: ModelWrapper, rubric: str, question: str, exp: Experience, index: int) -> None:
        max_score = float(self._arg("max_score", 10))
        truth = self.truth
        prompt = JUDGE_PROMPT.format(
            question=question,
            reference=f"\n# Reference answer\n{truth}\n" if truth not in (None, "") else "",
            rubric=rubric,
            response=exp.info["response_text"],
            max_score=f"{max_score:g}",
        )
        attempts = 1 + int(self._arg("judge_retries", 2))
        sampling = {"logprobs": False, **self._arg("judge_sampling", {})}
        for _ in range(attempts):
            (verdict,) = await judge.chat_async([{"role": "user", "content": prompt}], n=1, **sampling)
            output = verdict.info["response_text"]
            score = parse_score(output, max_score)
            if score is not None:
                exp.info["judge_output"] = output
                set_reward(exp, {"judge": score / max_score})
                return
        raise JudgeError(
            f"the judge gave no score (0 to {max_score:g}) for response {index} in {attempts} attempts; "
            f"its last reply: {output[-300:]!r}"
        )
