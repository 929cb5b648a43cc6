"""LLM-as-a-judge: an auxiliary model scores responses (rubric judge, math reward model, RULER).

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
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from trinity.plugin_api import Experience, ModelWrapper, set_reward
from trinity_workflows.base import CatalogueWorkflow, last_user_text
from trinity_workflows.workflows import THINK_ANSWER_SYSTEM_PROMPT

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

T = TypeVar("T")
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


class JudgedWorkflow(CatalogueWorkflow):
    """What the judged workflows share: the judge, ``workflow_args``, asking until it scores.

    The judge is ``explorer.auxiliary_models[workflow_args.judge_model]`` (default 0); it is
    asked ``1 + judge_retries`` (2) times at most with ``judge_sampling``'s arguments.
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

    async def ask_judge(
        self, judge: ModelWrapper, prompt: str, parse: Callable[[str], T | None], wanted: str
    ) -> tuple[T, str]:
        """The judge's parsed verdict on ``prompt`` and its reply; ``JudgeError`` naming
        ``wanted`` when no reply parses."""
        attempts = 1 + int(self._arg("judge_retries", 2))
        sampling = {"logprobs": False, **self._arg("judge_sampling", {})}
        for _ in range(attempts):
            (verdict,) = await judge.chat_async([{"role": "user", "content": prompt}], n=1, **sampling)
            output = verdict.info["response_text"]
            parsed = parse(output)
            if parsed is not None:
                return parsed, output
        raise JudgeError(f"the judge gave no {wanted} in {attempts} attempts; its last reply: {output[-300:]!r}")


class RubricJudgeWorkflow(JudgedWorkflow):
    """Sample ``repeat_times`` responses; each one's reward is the judge's score / ``max_score``.

    ``workflow_args``: ``rubric`` (or the row's ``rubric_key`` column, default ``rubric``),
    ``max_score`` (10), and the judge's (``JudgedWorkflow``).
    The reward component is ``judge``; the judge's reply is kept in ``info["judge_output"]``.
    When the task names a reward function (``default_reward_fn_type``), its score is the
    metric ``gold_reward``, so a run shows whether the judge's reward raises the true one.
    """

    default_rubric: ClassVar[str | None] = None

    @property
    def rubric(self) -> str:
        rubric = self.task.raw.get(self._arg("rubric_key", "rubric")) or self._arg("rubric", self.default_rubric)
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
        if self.reward_fn is not None:
            record_gold_reward(self, experiences)
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
        wanted = f"score (0 to {max_score:g}) for response {index}"
        score, output = await self.ask_judge(judge, prompt, lambda text: parse_score(text, max_score), wanted)
        exp.info["judge_output"] = output
        set_reward(exp, {"judge": score / max_score})


MATH_RUBRIC = """Grade the final answer's correctness first (against the reference answer when \
there is one), then the soundness of the reasoning that leads to it. A wrong final answer scores \
at most 2 of 10, whatever the reasoning."""


class MathRMWorkflow(RubricJudgeWorkflow):
    """Math with a reward model: each response's reward is the reward model's grade (an
    auxiliary model, possibly ``engine_type: external``, by the rubric judge's protocol and a
    math rubric unless ``workflow_args.rubric`` gives one). The system prompt defaults to
    ``math_workflow``'s; ``math_reward`` (or the taskset's reward function) is kept as the
    metric ``gold_reward``, never as the reward, so one can watch the model agree with the truth.
    """

    default_reward_fn = "math_reward"
    default_system_prompt = THINK_ANSWER_SYSTEM_PROMPT
    default_rubric = MATH_RUBRIC


def record_gold_reward(workflow: CatalogueWorkflow, experiences: list[Experience]) -> None:
    """Each experience's score by the task's reward function, as the metric ``gold_reward``."""
    for exp in experiences:
        exp.metrics["gold_reward"] = float(sum(workflow.score(exp.info["response_text"], workflow.truth).values()))


RULER_PROMPT = """Here is a question and {count} candidate solutions. Compare them and score how \
well each one solves the question, from 0 (useless) to 1 (fully correct and well argued).

# Question
{question}

{solutions}

Reason briefly if you need to, then end with the list of the {count} scores in order, e.g. \
[{example}]."""

_LIST = re.compile(r"\[([^\[\]]*)\]")


def parse_scores(text: str, count: int) -> list[float] | None:
    """The last ``[s1, ..., sN]`` list of ``count`` numbers in ``text``, clipped to [0, 1]; else None."""
    for match in reversed(_LIST.findall(text)):
        try:
            scores = [float(part) for part in match.split(",")]
        except ValueError:
            continue
        return [min(1.0, max(0.0, s)) for s in scores] if len(scores) == count else None
    return None


class MathRULERWorkflow(JudgedWorkflow):
    """RULER (relative universal LLM-elicited rewards, after OpenPipe ART) for math: the judge
    (``explorer.auxiliary_models[workflow_args.judge_model]``, default the first) sees all
    ``repeat_times`` responses to a question together and scores each in [0, 1]; those scores
    are the rewards. A judge reply without a list of as many scores is asked again
    (``judge_retries``, 2), then the run fails with ``JudgeError``. ``math_reward`` (or the
    taskset's reward function) gives the metric ``gold_reward``; ``judge_sampling`` sets the
    judge's sampling arguments.
    """

    default_reward_fn = "math_reward"
    default_system_prompt = THINK_ANSWER_SYSTEM_PROMPT

    async def rollout(self) -> list[Experience]:
        judge = self.judge
        messages = self.messages()
        experiences = await self.model.chat_async(messages, n=self.repeat_times)
        record_gold_reward(self, experiences)
        solutions = "\n\n".join(
            f"# Candidate solution {i + 1}\n{exp.info['response_text']}" for i, exp in enumerate(experiences)
        )
        count = len(experiences)
        prompt = RULER_PROMPT.format(
            question=last_user_text(messages) or "",
            count=count,
            solutions=solutions,
            example=", ".join(["0.5"] * count),
        )
        scores, output = await self.ask_judge(
            judge, prompt, lambda text: parse_scores(text, count), f"list of {count} scores"
        )
        for exp, score in zip(experiences, scores, strict=True):
            exp.info["judge_output"] = output
            set_reward(exp, {"ruler": score})
        return experiences
