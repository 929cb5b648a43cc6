"""Finding the answer in a model's response and comparing it with the ground truth.

The reward functions share these. Equivalence is decided by ``math-verify`` (sympy under
the hood), so ``\\frac{1}{2}``, ``0.5`` and ``1/2`` are the same answer and units such as
``5 cm`` are dropped. math-verify's own timeouts use ``signal.alarm``, which only works in
the main thread; workflows run in worker threads and event loops, so the timeouts are
off here and the explorer's per-workflow timeout bounds a pathological expression.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

import sympy
from math_verify import parse, verify

_SPECIAL_TOKEN = re.compile(r"<\|[^|<>]*\|>")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
_GSM8K_MARK = "####"
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")  # as written plainly: math-verify reads no "-01"


def _not_the_timeout_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):  # the timeouts are off on purpose (above)
    logging.getLogger(_name).addFilter(_not_the_timeout_warning)


def strip_special_tokens(text: str) -> str:
    """The text without chat special tokens such as ``<|im_end|>``."""
    return _SPECIAL_TOKEN.sub("", text)


def clean_response(text: str) -> str:
    """The response without special tokens and without its thinking part.

    Everything up to the last ``</think>`` is reasoning, not the answer.
    """
    return strip_special_tokens(text).rpartition("</think>")[2].strip()


def answer_tag(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>``, or None."""
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 7``), or None.

    Braces are matched, so ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``. An unclosed
    ``\\boxed{`` (a truncated response) counts as no answer. Only the last box counts:
    a response that boxes several candidates is graded on its final one.
    """
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    if last.group(1) is None:  # "\boxed 7": the next whitespace-free run
        rest = text[last.end() :].split(maxsplit=1)
        return rest[0].rstrip(".$") if rest else None
    depth, start = 1, last.end()
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None


def final_answer(response: str) -> str:
    """The part of a free-form response to grade: ``<answer>`` tag, else last box, else all of it.

    In the last case math-verify picks the answer: a phrase like "the answer is 7" wins,
    otherwise the last expression in the text.
    """
    text = clean_response(response)
    for found in (answer_tag(text), last_boxed(text)):
        if found is not None:
            return found
    return text


def truth_text(truth: Any) -> str:
    """The ground truth as a string; a GSM8K-style ``"... #### 72"`` gives ``"72"``."""
    text = str(truth).strip()
    return text.rpartition(_GSM8K_MARK)[2].strip() if _GSM8K_MARK in text else text


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> tuple:
    """math-verify's parse of ``text``, cached: the samples of a task share its truth, and a
    model repeats its answers (sympy expressions are immutable, so sharing them is safe)."""
    if "\\" in text and "$" not in text:  # bare LaTeX needs delimiters to be found
        text = f"${text}$"
    return tuple(parse(text, parsing_timeout=None))


def is_equivalent(prediction: str, truth: Any) -> bool:
    """Whether ``prediction`` is mathematically the same answer as ``truth``.

    False when either side has no parsable answer (empty or malformed output), and when
    the prediction is still a sum or product of plain numbers: ``3+4`` restates the
    question "3+4=" rather than answering 7 (``2\\sqrt{2}``, ``2\\pi`` and ``1/2`` are answers).
    Two plain integers are compared as integers, as math-verify would: its sympy comparison
    runs for every sample even when both parses are cached.
    """
    gold_text = truth_text(truth)
    if _INTEGER.fullmatch(prediction.strip()) and _INTEGER.fullmatch(gold_text):
        return int(prediction) == int(gold_text)
    return verified(prediction, gold_text)


def verified(prediction: str, gold_text: str) -> bool:
    """:func:`is_equivalent` by math-verify alone, ``gold_text`` already through :func:`truth_text`."""
    gold = _parse(gold_text)
    answer = _parse(prediction)
    if not gold or not answer or _unevaluated_arithmetic(answer[0]):
        return False
    return bool(verify(list(gold), list(answer), timeout_seconds=None))


def _unevaluated_arithmetic(expression: Any) -> bool:
    def operands(node: Any) -> int | None:
        """How many numbers a sum/product of plain numbers combines; None for anything else."""
        if isinstance(node, sympy.Number):
            return 1
        if not isinstance(node, (sympy.Add, sympy.Mul)):
            return None
        counts = [operands(arg) for arg in node.args if arg is not sympy.S.NegativeOne]  # a sign is no operand
        return None if None in counts else sum(counts)

    return (operands(expression) or 0) > 1
