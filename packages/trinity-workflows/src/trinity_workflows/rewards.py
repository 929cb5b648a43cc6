"""The catalogue's reward functions.

Convention (what ``default_reward_fn_type`` / a row's ``reward_fn_key`` name):
``fn(response, truth=None, prompt=None, **options) -> dict[str, float]``. ``response`` is
the model's text, ``truth`` the row's ``response_key`` value, ``prompt`` the user prompt;
``options`` are the taskset's ``reward_fn_args`` plus any context a workflow offers and
the function declares (``response_length`` in tokens). The reward is the sum of the
returned components; each component is also reported as a metric.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import math
import os
import re
from collections import Counter
from typing import Any

from trinity_workflows.answers import (
    answer_tag,
    clean_response,
    final_answer,
    is_equivalent,
    last_boxed,
    strip_special_tokens,
    truth_text,
)
from trinity_workflows.arithmetic import evaluate
from trinity_workflows.base import Messages, require

THINK_ANSWER_PATTERN = r"<think>.*?</think>\s*<answer>.*?</answer>"
"""The format ``math_workflow``'s default system prompt asks for."""
_THINK_PATTERN = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def format_reward(
    response: str, truth: Any = None, prompt: str | None = None, pattern: str = THINK_ANSWER_PATTERN, score: float = 1.0
) -> dict[str, float]:
    """``score`` when the whole response (special tokens aside) matches ``pattern``, else 0."""
    text = strip_special_tokens(response).strip()
    return {"format": score if re.fullmatch(pattern, text, re.DOTALL) else 0.0}


def accuracy_reward(response: str, truth: Any = None, prompt: str | None = None) -> dict[str, float]:
    """1 when the final answer equals the truth, mathematically or, for non-math answers, as text.

    For short answers that are not math (a multiple-choice letter, a name): compared
    case-, whitespace- and trailing-punctuation-insensitively.
    """
    answer = final_answer(response)
    same_text = _normalise(answer) == _normalise(truth_text(truth)) != ""
    return {"accuracy": 1.0 if same_text or is_equivalent(answer, truth) else 0.0}


def _normalise(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .!$")


def math_reward(
    response: str,
    truth: Any = None,
    prompt: str | None = None,
    format_weight: float = 0.0,
    pattern: str = THINK_ANSWER_PATTERN,
) -> dict[str, float]:
    """Math answer equivalence (math-verify), in [0, 1]: ``"7"``, ``"the answer is 7"`` and
    ``<answer>7</answer>`` all score 1 against truth ``7``.

    The graded answer is the ``<answer>`` tag, else the last ``\\boxed{}``, else the text.
    ``format_weight`` > 0 mixes in ``format_reward`` as ``(1 - w) * accuracy + w * format``
    (components ``accuracy`` and ``format``), so the reward stays in [0, 1].
    """
    accuracy = 1.0 if is_equivalent(final_answer(response), truth) else 0.0
    if format_weight <= 0:
        return {"accuracy": accuracy}
    fmt = format_reward(response, pattern=pattern)["format"]
    return {"accuracy": (1 - format_weight) * accuracy, "format": format_weight * fmt}


def math_boxed_reward(
    response: str,
    truth: Any = None,
    prompt: str | None = None,
    with_think: bool = False,
    format_penalty: float = 0.1,
) -> dict[str, float]:
    """1 when the last ``\\boxed{}`` equals the truth; no box scores 0.

    With ``with_think``, a response that does not open with a ``<think>...</think>`` block
    gets ``-format_penalty`` in the ``format`` component (as in Trinity-RFT).
    """
    boxed = last_boxed(clean_response(response))
    components = {"accuracy": 1.0 if boxed is not None and is_equivalent(boxed, truth) else 0.0}
    if with_think:
        cleaned = strip_special_tokens(response)
        components["format"] = 0.0 if _THINK_PATTERN.match(cleaned) else -format_penalty
    return components


def math_dapo_reward(
    response: str,
    truth: Any = None,
    prompt: str | None = None,
    response_length: int | None = None,
    enable_overlong_penalty: bool = False,
    max_response_length: int | None = None,
    cache_length: int | None = None,
    penalty_factor: float = 1.0,
) -> dict[str, float]:
    """DAPO's rule reward: +1 for a correct answer, -1 otherwise, plus the overlong penalty.

    The answer is the last ``\\boxed{}``, else what follows the last ``Answer:``. The soft
    overlong penalty (DAPO eq. 13) is 0 up to ``max_response_length - cache_length`` tokens,
    falls linearly to ``-penalty_factor`` at ``max_response_length`` and stays there.
    """
    text = clean_response(response)
    answer = last_boxed(text)
    if answer is None and "Answer:" in text:
        answer = text.rpartition("Answer:")[2].strip()
    components = {"accuracy": 1.0 if answer is not None and is_equivalent(answer, truth) else -1.0}
    if enable_overlong_penalty:
        components["overlong"] = _overlong_penalty(response_length, max_response_length, cache_length, penalty_factor)
    return components


def _overlong_penalty(length: int | None, max_length: int | None, cache: int | None, factor: float) -> float:
    if length is None or max_length is None or cache is None or not 0 < cache < max_length:
        raise ValueError(
            "math_dapo_reward with enable_overlong_penalty needs max_response_length > cache_length > 0 "
            "in reward_fn_args and a workflow that passes response_length"
        )
    expected = max_length - cache
    if length <= expected:
        return 0.0
    return -factor if length >= max_length else (expected - length) / cache * factor


def countdown_reward(
    response: str, truth: Any = None, prompt: str | None = None, format_score: float = 0.1
) -> dict[str, float]:
    """The countdown puzzle: reach ``truth["target"]`` using each of ``truth["numbers"]`` once.

    ``truth`` is a dict or its JSON text. The equation is the last ``<answer>`` tag, else
    the last non-empty line; a trailing ``= result`` is ignored. A well-formed arithmetic
    expression earns ``format`` (``format_score``); one that uses exactly the given numbers
    and equals the target also earns ``accuracy`` (``1 - format_score``), so a solution
    scores 1. Only ``+ - * /``, parentheses and integers are evaluated (no ``eval``).
    """
    spec = json.loads(truth) if isinstance(truth, str) else truth
    text = clean_response(response)
    equation = answer_tag(text)
    if equation is None:
        lines = [line for line in text.splitlines() if line.strip()]
        equation = lines[-1] if lines else ""
    try:
        value, used = evaluate(equation.partition("=")[0], integers_only=True)
    except (ValueError, ZeroDivisionError):
        return {"format": 0.0, "accuracy": 0.0}
    solved = Counter(used) == Counter(spec["numbers"]) and abs(value - float(spec["target"])) < 1e-6
    return {"format": format_score, "accuracy": (1.0 - format_score) if solved else 0.0}


RLCR_WEIGHTS = {"format": 0.5, "accuracy": 0.5, "brier": 0.5, "mean_confidence": 1e-5, "confidence_one_or_zero": 1e-5}
_RLCR_TAGS = ("think", "answer", "analysis", "confidence")
_RLCR_TAG = re.compile(r"</?(?:think|answer|analysis|confidence)>")


def rlcr_reward(
    response: str, truth: Any = None, prompt: str | None = None, weights: dict[str, float] | None = None
) -> dict[str, float]:
    """RLCR's calibration reward (Trinity-RFT's five components, each times its weight).

    The response must end with ``<think>..</think><answer>..</answer><analysis>..</analysis>
    <confidence>q</confidence>`` (only whitespace between and after the tags, no nested tags,
    q a number in [0, 1]): ``format`` 1; ``accuracy`` 1 when the answer equals the truth
    (math-verify); ``brier`` = 1 - (accuracy - q)^2. ``mean_confidence`` is the last well-closed
    confidence (0 without one) and ``confidence_one_or_zero`` 1 when it is below 0.01 or above
    0.99, whatever the format. ``weights`` must name all five components (default ``RLCR_WEIGHTS``).
    """
    weights = _rlcr_weights(weights)
    safe = _last_confidence(response)
    scores = {"format": 0.0, "accuracy": 0.0, "brier": 0.0}
    parsed = _rlcr_terminal(response)
    if parsed is not None:
        answer, confidence = parsed
        accuracy = 1.0 if truth is not None and is_equivalent(answer, truth) else 0.0
        scores = {"format": 1.0, "accuracy": accuracy, "brier": 1.0 - (accuracy - confidence) ** 2}
    scores["mean_confidence"] = safe or 0.0
    scores["confidence_one_or_zero"] = float(safe is not None and not 0.01 <= safe <= 0.99)
    return {name: weights[name] * value for name, value in scores.items()}


def _rlcr_weights(weights: dict[str, float] | None) -> dict[str, float]:
    if weights is None:
        return RLCR_WEIGHTS
    missing, unknown = set(RLCR_WEIGHTS) - set(weights), set(weights) - set(RLCR_WEIGHTS)
    if missing or unknown:
        raise ValueError(
            f"rlcr_reward: reward_fn_args.weights must name exactly {sorted(RLCR_WEIGHTS)} "
            f"(missing: {sorted(missing)}, unknown: {sorted(unknown)})"
        )
    bad = [
        k for k, v in weights.items() if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
    ]
    if bad:
        raise ValueError(f"rlcr_reward: reward_fn_args.weights.{bad[0]} must be a finite number")
    return {k: float(v) for k, v in weights.items()}


def _confidence(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def _last_confidence(response: str) -> float | None:
    """The payload of the last ``<confidence>..</confidence>`` holding no other tag, as a probability."""
    start, end = response.rfind("<confidence>"), response.rfind("</confidence>")
    if start < 0 or end < start:
        return None
    payload = response[start + len("<confidence>") : end]
    return None if _RLCR_TAG.search(payload) else _confidence(payload)


def _rlcr_terminal(response: str) -> tuple[str, float] | None:
    """The answer and confidence of a response ending with RLCR's four tags, else None."""
    tags, open_name = list(_RLCR_TAG.finditer(response)), None
    for tag in tags:  # tags never nest and every opened tag is closed
        name = tag.group(0).strip("</>")
        if tag.group(0).startswith("</"):
            if open_name != name:
                return None
            open_name = None
        elif open_name is not None:
            return None
        else:
            open_name = name
    last = tags[-8:]
    expected = [f"<{n}>" if i % 2 == 0 else f"</{n}>" for n in _RLCR_TAGS for i in range(2)]
    if open_name is not None or [t.group(0) for t in last] != expected:
        return None
    gaps = [response[last[i].end() : last[i + 1].start()] for i in (1, 3, 5)] + [response[last[-1].end() :]]
    confidence = _confidence(response[last[6].end() : last[7].start()])
    if any(gap.strip() for gap in gaps) or confidence is None:
        return None
    return response[last[2].end() : last[3].start()], confidence


def rm_gallery_reward(
    response: str, truth: Any = None, prompt: str | None = None, messages: Messages | None = None, **options: Any
) -> dict[str, float]:
    """A reward model of RM-Gallery (``reward_name``, built with the other ``options``) on the
    conversation: each dimension it scores is a component (its overall score, ``reward``, when it
    gives none). Needs ``pip install rm-gallery``."""
    install = "pip install rm-gallery (https://github.com/modelscope/RM-Gallery)"
    schema = require("rm_gallery.core.data.schema", install)
    message = require("rm_gallery.core.model.message", install)
    rewards = require("rm_gallery.core.reward.schema", install)
    if "reward_name" not in options:
        raise ValueError("rm_gallery_reward needs reward_fn_args.reward_name: the RM-Gallery reward to use")
    model = _rm_gallery_model(json.dumps(options, sort_keys=True))
    history = [m for m in messages or [{"role": "user", "content": prompt or ""}] if m.get("role") != "assistant"]
    answer = schema.Step(role="assistant", content=response, label={"reference": "" if truth is None else truth})
    sample = schema.DataSample(
        unique_id="0",
        input=[message.ChatMessage(role=message.MessageRole(m["role"]), content=m["content"]) for m in history],
        output=[schema.DataOutput(answer=answer)],
    )
    reward = model.evaluate(sample).output[0].answer.reward
    components = {}
    for detail in reward.details:
        if isinstance(detail, rewards.RewardDimensionWithScore):
            components[detail.name] = float(detail.score)
        elif isinstance(detail, rewards.RewardDimensionWithRank) and detail:
            components[detail[0].name] = float(detail[0].score)
    return components or {"reward": float(reward.score)}


@functools.lru_cache(maxsize=8)
def _rm_gallery_model(options: str) -> Any:
    """The RM-Gallery reward model of these (JSON) options, built once per process."""
    from rm_gallery.core.reward.registry import RewardRegistry

    settings = json.loads(options)
    return RewardRegistry.get(settings.pop("reward_name"))(**settings)


def trajectory_accuracy_grader_reward(
    response: str,
    truth: Any = None,
    prompt: str | None = None,
    messages: Messages | None = None,
    model_name: str = "qwen3-max",
    judge_model_name: str | None = None,
    normalize_score: bool = True,
    score_min: float = 1.0,
    score_max: float = 3.0,
    temperature: float = 0.0,
    max_concurrency: int = 8,
    judge_api_base_url_env: str = "OPENAI_BASE_URL",
    judge_api_key_env: str = "OPENAI_API_KEY",
) -> dict[str, float]:
    """OpenJudge's trajectory accuracy grader: a judge model (OpenAI-compatible, at the URL in
    ``$judge_api_base_url_env``) scores the whole conversation from ``score_min`` to ``score_max``
    (0 when the grader fails); the one component, ``trajectory_accuracy``, is that score mapped to
    [0, 1] when ``normalize_score``, else the score itself. Needs ``pip install py-openjudge``."""
    base_url = os.environ.get(judge_api_base_url_env, "")
    if not base_url:
        raise ValueError(
            f"trajectory_accuracy_grader_reward: the judge's URL is missing: set ${judge_api_base_url_env}"
        )
    conversation = list(messages or [{"role": "user", "content": prompt or ""}])
    if conversation[-1].get("role") != "assistant":
        conversation.append({"role": "assistant", "content": response})
    runner = _trajectory_runner(
        judge_model_name or model_name, base_url, judge_api_key_env, temperature, max_concurrency
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a workflow's event loop may be running here
        results = pool.submit(asyncio.run, runner.arun([{"messages": conversation}])).result()
    graded = (results.get("trajectory") or [None])[0]
    grader_schema = require("openjudge.graders.schema", "pip install py-openjudge")
    score = float(graded.score) if isinstance(graded, grader_schema.GraderScore) else 0.0
    if normalize_score and score_max > score_min:
        score = min(1.0, max(0.0, (score - score_min) / (score_max - score_min)))
    return {"trajectory_accuracy": score}


@functools.lru_cache(maxsize=8)
def _trajectory_runner(model: str, base_url: str, key_env: str, temperature: float, concurrency: int) -> Any:
    """OpenJudge's grading runner for the trajectory accuracy grader, built once per judge."""
    install = "pip install py-openjudge (https://github.com/modelscope/OpenJudge)"
    trajectory = require("openjudge.graders.agent.trajectory.trajectory_accuracy", install)
    models = require("openjudge.models.openai_chat_model", install)
    runners = require("openjudge.runner.grading_runner", install)
    judge = models.OpenAIChatModel(
        model=model, base_url=base_url, api_key=os.environ.get(key_env, ""), temperature=temperature
    )
    grader = trajectory.TrajectoryAccuracyGrader(model=judge)
    return runners.GradingRunner(
        grader_configs={"trajectory": grader}, max_concurrency=concurrency, show_progress=False
    )
