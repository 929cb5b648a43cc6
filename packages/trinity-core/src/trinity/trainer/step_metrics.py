"""What a training step logs beside the engine's metrics: scores, lengths, advantages, what it
could learn from (warning when nothing), and the ``rollout_preview`` table.

The keys of the learning signal are ``trinity.monitor.learnable``'s, which the console and the
run report read.
"""

from __future__ import annotations

from typing import Any

from trinity.common.batch import Batch
from trinity.common.experience import Experience
from trinity.config.schema import ModelConfig
from trinity.model.tokenization import load_tokenizer
from trinity.monitor.learnable import (
    LEARNABLE_TOKENS,
    NO_GRADIENT,
    ZERO_ADVANTAGE_FRACTION,
    ZERO_ADVANTAGE_GROUPS,
    CauseWarnings,
    uniform_score,
)
from trinity.monitor.metrics import stats

PREVIEW_ROWS = 4
"""Experiences of a step shown in the ``rollout_preview`` table (``trainer.enable_preview``)."""


def batch_metrics(batch: Batch) -> dict[str, float]:
    mask = batch.response_mask
    metrics = stats("critic/score", batch.rewards.tolist())
    metrics.update(stats("response_length", mask.sum(dim=1).tolist()))
    if batch.advantages is not None:
        valid = batch.advantages[mask > 0]
        metrics.update(stats("critic/advantages", valid.tolist() if valid.numel() else []))
    return metrics


def learning_signal(batch: Batch) -> dict[str, float]:
    """What the step could learn from: the tokens under the loss mask with a nonzero advantage
    (all of them where the batch has no advantages, and an expert row's in a mix), and the
    groups with response tokens whose advantages are all 0."""
    mask = batch.response_mask > 0
    if batch.advantages is None:
        return {LEARNABLE_TOKENS: float(mask.sum())}
    signal = mask & (batch.advantages != 0)
    expert = batch.is_expert if batch.is_expert is not None else mask.new_zeros(batch.batch_size)
    learnable = signal | (mask & expert[:, None])
    groups: dict[int, tuple[bool, bool]] = {}  # group -> (any response token, any nonzero advantage)
    rows = zip(
        batch.group_ids.tolist(), mask.any(dim=1).tolist(), signal.any(dim=1).tolist(), expert.tolist(), strict=True
    )
    for group, tokens, nonzero, is_expert in rows:
        if not is_expert:
            had_tokens, had_signal = groups.get(group, (False, False))
            groups[group] = (had_tokens or tokens, had_signal or nonzero)
    zero = sum(tokens and not nonzero for tokens, nonzero in groups.values())
    return {
        LEARNABLE_TOKENS: float(learnable.sum()),
        ZERO_ADVANTAGE_GROUPS: zero,
        ZERO_ADVANTAGE_FRACTION: zero / len(groups) if groups else 0.0,
    }


def warn_unlearnable(warnings: CauseWarnings, batch: Batch, metrics: dict[str, float], step: int) -> None:
    """Warn of a step whose groups all had zero advantage, or else of one with no gradient,
    naming why; ``CauseWarnings`` says when."""
    groups, score = metrics.get(ZERO_ADVANTAGE_GROUPS), uniform_score(metrics)
    if metrics.get(ZERO_ADVANTAGE_FRACTION) == 1 and score is not None:
        warnings.warn(
            "one score",
            step,
            True,
            f"all {batch.batch_size} samples scored {score:g} (zero advantage): none is better "
            "to learn from; the task is solved if that is the best score, else check the reward function",
        )
    elif metrics.get(ZERO_ADVANTAGE_FRACTION) == 1:
        warnings.warn(
            "equal rewards",
            step,
            True,
            f"{groups} of {groups} groups had equal rewards (zero advantage): nothing to learn from them; "
            "check the reward function or raise algorithm.repeat_times",
        )
    elif metrics[NO_GRADIENT]:
        tokens = int(metrics[LEARNABLE_TOKENS])
        why = (
            f"grad_norm was 0 with {tokens} tokens of nonzero advantage: the policy loss gave none; "
            "check algorithm.policy_loss_fn_args"
            if tokens
            else f"none of its {batch.batch_size} rows has a response token to train on (empty responses: "
            "see the explorer's warnings)"
            if not batch.response_mask.any()
            else "no response token has a nonzero advantage: check the reward function or raise algorithm.repeat_times"
        )
        warnings.warn("no gradient", step, True, f"no gradient: {why}")


class RolloutPreview:
    """``trainer.enable_preview``: a step's first experiences as text (the tokenizer loads on first use)."""

    def __init__(self, model: ModelConfig):
        self.model = model
        self._tokenizer: Any = None

    def rows(self, experiences: list[Experience]) -> list[dict[str, Any]]:
        """The ``rollout_preview`` table's rows (wandb's Table, tensorboard's text, the console's tables file)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.model).tokenizer
        decode = self._tokenizer.decode
        return [
            {
                "task": exp.eid.task,
                "run": exp.eid.run,
                "reward": exp.reward,
                "prompt": decode(exp.tokens[: exp.prompt_length].tolist()),
                "response": decode(exp.tokens[exp.prompt_length :].tolist()),
            }
            for exp in experiences[:PREVIEW_ROWS]
        ]
