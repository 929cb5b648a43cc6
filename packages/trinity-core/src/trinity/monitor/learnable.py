"""Whether a step could teach the model anything, and saying so when it could not.

A run can run to its end and learn nothing: every prompt over ``max_prompt_tokens`` (nothing
is generated for it), every response empty, every group's rewards equal (a group baseline
leaves zero advantage), or no gradient. The explorer and the trainer count these per step
under the keys below and warn of each cause through :class:`CauseWarnings`; the progress
display and the summary read the counts back from ``monitor/<role>.jsonl``
(:func:`step_cause`, :class:`Streak`, :func:`nothing_learnable`).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

REWARD = "rollout/reward/mean"
EXPERIENCES = "rollout/experience_count"
TRUNCATED_PROMPTS = "rollout/truncated_prompts"
"""Experiences whose prompt (a turn's, in a multi-turn one) was over ``max_prompt_tokens``."""
TRUNCATED_PROMPT_LENGTH = "rollout/truncated_prompt_length"
"""``/mean|max|min``: those prompts' lengths before the cut, where the engine reported them."""
EMPTY_RESPONSES = "rollout/empty_responses"
"""Experiences with no response token (those of truncated prompts included)."""
ZERO_ADVANTAGE_GROUPS = "critic/zero_advantage_groups"
"""Groups (one task's runs) with response tokens, all of whose advantages are 0."""
ZERO_ADVANTAGE_FRACTION = "critic/zero_advantage_group_fraction"
"""Those groups over all groups of the step."""
LEARNABLE_TOKENS = "actor/learnable_tokens"
"""Tokens under the loss mask with a nonzero advantage (every such token where the algorithm has
no advantages, and an expert row's in a mix)."""
SCORE_MIN, SCORE_MAX = "critic/score/min", "critic/score/max"
"""The lowest and highest reward of a trainer step's samples."""
NO_GRADIENT = "actor/no_gradient"
"""1 for a step with no learnable token or a ``grad_norm`` of 0, else 0."""

NOTHING_LEARNABLE_STEPS = 5
"""Consecutive steps with nothing to learn after which the progress line and the summary say
so; a run shorter than that says so when all its steps had nothing. Fewer is noise (a step
whose groups all happened to agree), more hides a run that learns nothing for minutes."""

REPEAT_STEPS = 100
"""Steps after which a warning that still holds is said again."""


def step_cause(record: Mapping[str, Any]) -> str | None:
    """Why a logged step could teach nothing, from its metrics; None when it could."""
    experiences = record.get(EXPERIENCES)
    if experiences and record.get(EMPTY_RESPONSES) == experiences:
        return "all prompts truncated" if record.get(TRUNCATED_PROMPTS) == experiences else "all responses empty"
    if record.get(ZERO_ADVANTAGE_FRACTION) == 1:
        score = uniform_score(record)
        return "all groups had equal rewards" if score is None else f"every sample scored {score:g}"
    if record.get(NO_GRADIENT) == 1:
        return "no gradient"
    return None


def uniform_score(record: Mapping[str, Any]) -> float | None:
    """The one score every sample of a trainer step had (``critic/score`` min = max), else None:
    a solved task's steps (or a reward that cannot tell samples apart), not just agreeing groups."""
    low, high = record.get(SCORE_MIN), record.get(SCORE_MAX)
    return high if low is not None and low == high else None


def is_step(record: Mapping[str, Any]) -> bool:
    """Whether a metrics record is a step's (an evaluation's is not)."""
    return EXPERIENCES in record or NO_GRADIENT in record


def threshold(total: int | None) -> int:
    """Consecutive steps that make a stall worth saying, in a run of ``total`` steps (None: unknown)."""
    return min(NOTHING_LEARNABLE_STEPS, total) if total else NOTHING_LEARNABLE_STEPS


@dataclass
class Streak:
    """The consecutive steps up to the last one added that could teach nothing."""

    steps: int = 0
    cause: str | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        if is_step(record):
            self.cause = step_cause(record)
            self.steps = self.steps + 1 if self.cause else 0

    def note(self, total: int | None) -> str:
        """``nothing learnable for 7 steps (all prompts truncated)`` once the streak is long enough, else ``""``."""
        if not self.steps or self.steps < threshold(total):
            return ""
        return f"nothing learnable for {self.steps} steps ({self.cause})"


def nothing_learnable(records: Iterable[Mapping[str, Any]]) -> str | None:
    """``nothing learnable: 40 of 40 steps (all prompts truncated)`` for a role whose metrics
    show a stall of :func:`threshold` steps; None otherwise. A step logged twice (a resumed
    run) counts once, as last logged."""
    steps = {record["step"]: record for record in records if is_step(record)}
    streak, longest, causes = Streak(), 0, Counter()
    for step in sorted(steps):
        streak.add(steps[step])
        longest = max(longest, streak.steps)
        if streak.cause:
            causes[streak.cause] += 1
    if not steps or longest < threshold(len(steps)):
        return None
    named = ", ".join(cause for cause, _ in causes.most_common())
    return f"nothing learnable: {causes.total()} of {len(steps)} steps ({named})"


class CauseWarnings:
    """A role's warnings of why it cannot learn: each cause at the first step it happens, again
    when it spreads to the whole step, and otherwise at most every ``REPEAT_STEPS`` steps (a
    line per step would bury the run's other messages)."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._said: dict[str, tuple[int, bool]] = {}  # cause -> (step, whole) of its last warning

    def warn(self, cause: str, step: int, whole: bool, message: str) -> None:
        said = self._said.get(cause)
        if said is not None and step - said[0] < REPEAT_STEPS and (said[1] or not whole):
            return
        self._said[cause] = (step, whole)
        logger.warning("%s: step %d: %s", self.role, step, message)


def reward_trend(records: Iterable[Mapping[str, Any]]) -> tuple[float, float] | None:
    """``(start, end)`` of a role's mean reward: its first step's, from the weights it started
    with (no update has reached them yet), and the mean of its last tenth of steps (one at least).
    None when no step logged a finite reward."""
    rewards = [
        float(r[REWARD]) for r in records if isinstance(r.get(REWARD), (int, float)) and math.isfinite(r[REWARD])
    ]
    if not rewards:
        return None
    tenth = max(1, len(rewards) // 10)
    return rewards[0], sum(rewards[-tenth:]) / tenth


def describe_trend(trend: tuple[float, float]) -> str:
    """The one wording of a reward trend, for the run's summary and its report."""
    start, end = trend
    return f"{start:.3f} before any update -> {end:.3f} at end ({end - start:+.3f})"
