"""A reward function: how close the response is to the reversed word."""

from __future__ import annotations

import difflib


def reverse_text_reward(
    response: str, truth: str, prompt: str | None = None, exact_bonus: float = 1.0
) -> dict[str, float]:
    """``similarity`` (0 to 1, difflib's ratio to the reversed text) plus ``exact_bonus`` when
    the stripped response is exactly it. ``exact_bonus`` comes from ``reward_fn_args``."""
    target = truth[::-1]
    answer = response.strip()
    return {
        "similarity": difflib.SequenceMatcher(None, answer, target).ratio(),
        "exact": exact_bonus if answer == target else 0.0,
    }
