"""Token budgets of a rollout, as every rollout engine reads them, so that engines agree.

A response gets ``response_budget`` tokens at most; ``first`` is the config fallback (a rollout
model's own value over the model's). The prompt limit is the engine's ``ChatTokenizer.fit``.
"""

from __future__ import annotations

from typing import Any


def response_budget(
    max_tokens: int | None, max_response_tokens: int | None, max_model_len: int | None, prompt_length: int
) -> int:
    """Most tokens a response may take: the call's ``max_tokens`` over ``max_response_tokens``,
    bounded by what ``max_model_len`` leaves after the prompt; a ``ValueError`` when none."""
    budget = first(max_tokens, max_response_tokens)
    if max_model_len is not None:
        room = max_model_len - prompt_length
        budget = room if budget is None else min(budget, room)
    if budget is None or budget < 1:
        raise ValueError(
            f"no room to generate: max_tokens {max_tokens}, max_response_tokens {max_response_tokens}, "
            f"max_model_len {max_model_len}, prompt {prompt_length} tokens"
        )
    return budget


def first(*values: Any) -> Any:
    """The first value that is not None (config fallbacks)."""
    return next((v for v in values if v is not None), None)
