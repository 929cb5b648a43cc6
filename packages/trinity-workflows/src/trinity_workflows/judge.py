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
import os
import random
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

from trinity.plugin_api import Experience, Field, ModelWrapper, PluginArgs, set_reward
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

    async def ask_judge(self, judge: Any, prompt: str, parse: Callable[[str], T | None], wanted: str) -> tuple[T, str]:
        """The judge's parsed verdict on ``prompt`` and its reply; ``JudgeError`` naming
        ``wanted`` when no reply parses."""
        attempts = 1 + int(self._arg("judge_retries", 2))
        for _ in range(attempts):
            output = await self.judge_reply(judge, prompt)
            parsed = parse(output)
            if parsed is not None:
                return parsed, output
        raise JudgeError(f"the judge gave no {wanted} in {attempts} attempts; its last reply: {output[-300:]!r}")

    async def judge_reply(self, judge: ModelWrapper, prompt: str) -> str:
        """The judge's reply to ``prompt`` (one sample, ``judge_sampling``'s arguments)."""
        sampling = {"logprobs": False, **self._arg("judge_sampling", {})}
        (verdict,) = await judge.chat_async([{"role": "user", "content": prompt}], n=1, **sampling)
        return verdict.info["response_text"]


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

    async def _grade(self, judge: Any, rubric: str, question: str, exp: Experience, index: int) -> None:
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


def ruler_prompt(question: str, responses: list[str]) -> str:
    """RULER's request to score ``responses`` to ``question`` together."""
    solutions = "\n\n".join(f"# Candidate solution {i + 1}\n{text}" for i, text in enumerate(responses))
    count = len(responses)
    return RULER_PROMPT.format(question=question, count=count, solutions=solutions, example=", ".join(["0.5"] * count))


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
        count = len(experiences)
        prompt = ruler_prompt(last_user_text(messages) or "", [exp.info["response_text"] for exp in experiences])
        scores, output = await self.ask_judge(
            judge, prompt, lambda text: parse_scores(text, count), f"list of {count} scores"
        )
        for exp, score in zip(experiences, scores, strict=True):
            exp.info["judge_output"] = output
            set_reward(exp, {"ruler": score})
        return experiences


class RubricJudgeAPIWorkflow(RubricJudgeWorkflow):
    """``rubric_judge_workflow`` with the judge behind an OpenAI-compatible API instead of an
    auxiliary model (Trinity-RFT's ``rubric_judge_openai_workflow``): ``workflow_args``
    ``judge_model_name`` (required), ``judge_api_base_url_env`` (default ``OPENAI_BASE_URL``)
    and ``judge_api_key_env`` (``OPENAI_API_KEY``) name the model and the environment variables
    holding the API's address and key. Checked before any model call.
    """

    _client: Any = None

    @property
    def judge(self) -> Any:
        name = self._arg("judge_model_name", None)
        if not name:
            raise ValueError("no judge: set workflow_args.judge_model_name (the model the judge API serves)")
        url_env = self._arg("judge_api_base_url_env", "OPENAI_BASE_URL")
        base_url = os.environ.get(url_env)
        if not base_url:
            raise ValueError(
                f"no judge API: environment variable {url_env} (workflow_args.judge_api_base_url_env) is unset"
            )
        api_key = os.environ.get(self._arg("judge_api_key_env", "OPENAI_API_KEY")) or "EMPTY"
        import openai  # on first use: a second of import time the other workflows do not pay

        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        return name

    async def judge_reply(self, judge: Any, prompt: str) -> str:
        sampling = self._arg("judge_sampling", {})
        completion = await self._client.chat.completions.create(
            model=judge, messages=[{"role": "user", "content": prompt}], n=1, **sampling
        )
        return completion.choices[0].message.content or ""

    async def rollout(self) -> list[Experience]:
        try:
            return await super().rollout()
        finally:
            if self._client is not None:
                await self._client.close()


def ruler_rewards(replies: list[str], count: int, gold: list[float] | None) -> tuple[list[float], list[float], float]:
    """What a group of RULER judgements gives: each response's mean score over the replies
    that parse (0 when none does), each reply's own reward (1 - its mean absolute error to
    ``gold``; 0 without ``gold`` or when it does not parse) and the share of replies that parse."""
    totals, parsed, judge_rewards = [0.0] * count, 0, []
    for reply in replies:
        scores = parse_scores(reply, count)
        if scores is None:
            judge_rewards.append(0.0)
            continue
        parsed += 1
        totals = [t + s for t, s in zip(totals, scores, strict=True)]
        error = sum(abs(s - g) for s, g in zip(scores, gold, strict=True)) / count if gold else 1.0
        judge_rewards.append(1.0 - error)
    means = [t / parsed for t in totals] if parsed else totals
    return means, judge_rewards, parsed / len(replies) if replies else 0.0


class TrainableRULERArgs(PluginArgs):
    """``workflow_args`` of ``math_trainable_ruler_workflow``."""

    ground_truth_probability: float = Field(
        0.2,
        ge=0,
        le=1,
        description="share of the tasks whose truth is used (the rest are rewarded by the policy's judgement)",
    )


class MathTrainableRULERWorkflow(CatalogueWorkflow):
    """RULER where the policy itself is the judge, and is trained as one (Trinity-RFT's
    ``math_trainable_ruler_workflow``, after ART's RULER and Kimi K2): a share of the tasks,
    ``workflow_args.ground_truth_probability`` (0.2), counts as labelled.

    - Labelled: each response's reward is the reward function's (``math_reward``); the policy
      also judges the group ``repeat_times`` times, and each judgement is an experience too,
      rewarded 1 - its mean absolute error to the true scores (rescaled from [-0.1, 1.1] to
      [0, 1]). Judgements form their own GRPO group (``eid.task`` ``<task>/ruler``).
    - Unlabelled: the policy judges once and its scores are the responses' rewards.

    Metrics: ``gold_reward`` (the reward function's score, always), ``judge_success`` (the
    share of judgements with a list of as many scores), ``reward_for_judger`` on judgements.
    """

    Args = TrainableRULERArgs
    default_reward_fn = "math_reward"
    default_system_prompt = THINK_ANSWER_SYSTEM_PROMPT

    async def rollout(self) -> list[Experience]:
        args = TrainableRULERArgs.model_validate(self.task.workflow_args)
        messages = self.messages()
        responses = await self.model.chat_async(messages, n=self.repeat_times)
        question = last_user_text(messages) or ""
        record_gold_reward(self, responses)
        gold = [exp.metrics["gold_reward"] for exp in responses]
        labelled = random.random() < args.ground_truth_probability
        prompt = ruler_prompt(question, [exp.info["response_text"] for exp in responses])
        judge_messages = [{"role": "user", "content": prompt}]
        judgements = await self.model.chat_async(judge_messages, n=self.repeat_times if labelled else 1)
        scaled = [min(1.0, max(0.0, (g + 0.1) / 1.2)) for g in gold] if labelled else None
        means, judge_rewards, success = ruler_rewards(
            [j.info["response_text"] for j in judgements], len(responses), scaled
        )
        for exp, true, judged in zip(responses, gold, means, strict=True):
            exp.reward = true if labelled else judged
            exp.metrics["judge_success"] = success
        if not labelled:
            return responses
        for judgement, reward in zip(judgements, judge_rewards, strict=True):
            judgement.reward = reward
            judgement.eid = replace(judgement.eid, task="ruler")
            judgement.metrics.update(judge_success=success, reward_for_judger=reward)
        return responses + judgements
