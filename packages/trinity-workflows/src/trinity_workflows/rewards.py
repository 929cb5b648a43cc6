"""The catalogue's reward functions.

Convention (what ``default_reward_fn_type`` / a row's ``reward_fn_key`` name):
``fn(response, truth=None, prompt=None, **options) -> dict[str, float]``. ``response`` is
the model's text, ``truth`` the row's ``response_key`` value, ``prompt`` the user prompt;
``options`` are the taskset's ``reward_fn_args`` plus any context a workflow offers and
the function declares (``response_length`` in tokens). The reward is the sum of the
returned components; each component is also reported as a metric.
"""

from __future__ import annotations

import json
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
