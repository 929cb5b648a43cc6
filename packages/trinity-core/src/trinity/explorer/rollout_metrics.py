"""A step's rollout metrics, and the warnings of a step the trainer can learn nothing from.

Explored steps and serve-mode commits report the same ``rollout/...`` metrics; truncated
prompts and empty responses are counted as ``trinity.monitor.learnable`` names them.
"""

from __future__ import annotations

from trinity.common.experience import TRUNCATED_FROM
from trinity.config.schema import Config
from trinity.explorer.runner import BatchOutcome
from trinity.monitor.learnable import (
    EMPTY_RESPONSES,
    EXPERIENCES,
    TRUNCATED_PROMPT_LENGTH,
    TRUNCATED_PROMPTS,
    CauseWarnings,
)
from trinity.monitor.metrics import gather, stats


def rollout_metrics(outcome: BatchOutcome, policy_version: int) -> dict[str, float]:
    """The batch's metrics; ``staleness`` of an experience: how many versions its weights lag
    behind ``policy_version``, the one an on-policy batch is explored with (its step - 1)."""
    experiences = outcome.experiences
    truncated = [e for e in experiences if e.truncate_status == "prompt_truncated"]
    metrics = stats("rollout/reward", [e.reward for e in experiences if e.reward is not None])
    metrics.update(stats("rollout/response_length", [e.response_length for e in experiences]))
    metrics.update(stats("rollout/staleness", [policy_version - e.model_version for e in experiences]))
    metrics.update(gather("rollout", [e.metrics for e in experiences]))
    metrics["rollout/experience_count"] = len(experiences)
    metrics["rollout/failed_tasks"] = outcome.failed_tasks
    metrics["rollout/failed_runs"] = outcome.failed_runs
    metrics["rollout/dropped_tasks"] = outcome.dropped_tasks
    metrics[TRUNCATED_PROMPTS] = len(truncated)
    metrics.update(
        stats(TRUNCATED_PROMPT_LENGTH, [e.info[TRUNCATED_FROM] for e in truncated if TRUNCATED_FROM in e.info])
    )
    metrics[EMPTY_RESPONSES] = sum(e.response_length == 0 for e in experiences)
    return metrics


class UnlearnableWarnings:
    """Warns of prompts over the limit (any), and of a step whose responses are all empty for
    another reason (an engine that returns no token ids); ``CauseWarnings`` says when."""

    def __init__(self, config: Config, role: str):
        self.config = config
        self.warnings = CauseWarnings(role)

    def check(self, metrics: dict[str, float], step: int) -> None:
        """Warn about step ``step`` from its ``rollout_metrics``."""
        count, truncated = metrics[EXPERIENCES], metrics[TRUNCATED_PROMPTS]
        if truncated:
            limit = self.config.explorer.rollout_model.max_prompt_tokens  # model.max_prompt_tokens unless set apart
            apart = limit != self.config.model.max_prompt_tokens
            key = "explorer.rollout_model.max_prompt_tokens" if apart else "model.max_prompt_tokens"
            longest = metrics.get(f"{TRUNCATED_PROMPT_LENGTH}/max")
            self.warnings.warn(
                "truncated prompts",
                step,
                truncated == count,
                f"{truncated} of {count} prompts exceeded {key} {limit}"
                + (f" (longest {longest:.0f})" if longest else "")
                + f": nothing was generated for them; raise {key} or shorten the prompt",
            )
        if count and metrics[EMPTY_RESPONSES] == count and truncated < count:
            cut = f" ({truncated} of truncated prompts)" if truncated else ""
            self.warnings.warn(
                "empty responses",
                step,
                True,
                f"all {count} responses had no token{cut}: nothing to learn from them; check "
                "explorer.rollout_model.engine_type (an external endpoint must return token ids) and the workflow",
            )
