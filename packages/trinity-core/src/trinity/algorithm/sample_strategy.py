"""Sample strategies: trainer-side conversion of experiences read from the buffer into a Batch.

Staleness of a row is ``current_version - model_version``: how many weight updates ago the
rollout model that produced it was current. Every batch carries ``global_steps``, the
(1-based) training step it trains in, for losses that follow a schedule (``mix_chord``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from trinity.algorithm.base import Metrics, SampleStrategy
from trinity.common.batch import Batch
from trinity.common.experience import Experience
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs

torch = lazy_module("torch")


def collate(experiences: Sequence[Experience], step: int) -> Batch:
    """The experiences as a batch that trains in step ``step + 1`` (``step`` steps are done)."""
    batch = Batch.from_experiences(experiences)
    return batch.with_fields(global_steps=torch.full((batch.batch_size,), step + 1, dtype=torch.long))


def _staleness_metrics(batch: Batch, current_version: int) -> Metrics:
    """Rows' staleness (their first token's weights); with partial rollout also the response tokens'
    (``staleness_token_*``) and the share of rows whose tokens span versions (``partial_rollout_fraction``)."""
    if batch.batch_size == 0:
        return {}
    staleness = (current_version - batch.model_versions).float()
    metrics = {"staleness_mean": staleness.mean().item(), "staleness_max": staleness.max().item()}
    if batch.token_versions is not None:
        mask = batch.response_mask.bool()
        tokens = (current_version - batch.token_versions).float()[mask]
        spans = batch.token_versions.masked_fill(~mask, -1).amax(-1) > batch.model_versions
        if tokens.numel():
            metrics.update({"staleness_token_mean": tokens.mean().item(), "staleness_token_max": tokens.max().item()})
        metrics["partial_rollout_fraction"] = spans.float().mean().item()
    return metrics


class DefaultSampleStrategy(SampleStrategy):
    """All experiences, collated as they come (``Batch.from_experiences``). Trinity-RFT's
    deprecated ``warmup`` strategy is this one too."""

    def sample(self, experiences: Sequence[Experience], step: int, current_version: int) -> tuple[Batch, Metrics]:
        batch = collate(experiences, step)
        return batch, {"experience_count": float(batch.batch_size), **_staleness_metrics(batch, current_version)}


class StalenessControlSampleStrategy(SampleStrategy):
    """Bounded staleness for async RFT (cf. AReaL, arXiv:2505.24298).

    Rows with staleness ``k > max_staleness`` are dropped (``stale_action: drop``) or kept with
    ``sample_weights = decay ** (k - max_staleness)`` (``stale_action: downweight``), which the
    policy losses multiply into their per-token losses. A batch may come out empty when
    everything is dropped (``experience_count`` 0).
    """

    class Args(PluginArgs):
        max_staleness: int = Field(1, ge=0, description="weight updates a row may lag before it counts as stale")
        stale_action: Literal["drop", "downweight"] = Field("drop", description="what becomes of stale rows")
        decay: float = Field(0.5, gt=0, le=1, description="downweight: factor per update beyond max_staleness")

    def sample(self, experiences: Sequence[Experience], step: int, current_version: int) -> tuple[Batch, Metrics]:
        action, limit = self.args.stale_action, self.args.max_staleness
        batch = collate(experiences, step)
        metrics = _staleness_metrics(batch, current_version)
        excess = (current_version - batch.model_versions - limit).clamp(min=0)
        metrics["stale_fraction"] = (excess > 0).float().mean().item()
        if action == "drop":
            batch = batch.select(torch.nonzero(excess == 0).squeeze(-1))
        else:
            batch = batch.with_fields(sample_weights=self.args.decay ** excess.float())
        return batch, {**metrics, "experience_count": float(batch.batch_size)}


class MixSampleStrategy(SampleStrategy):
    """Rollouts mixed with expert (SFT) data for the ``mix`` algorithm (Trinity-RFT).

    The trainer reads ``expert_data_ratio`` of each batch from the auxiliary buffer
    ``sft_dataset_name`` and the rest from the experience buffer, marks the expert rows with
    ``info["is_expert"] = True`` and passes both; the batch gets ``is_expert`` accordingly. So
    ``buffer.train_batch_size`` is rollouts plus expert rows: at batch_size x repeat_times the
    trainer reads only part of each step's rollouts, and the check warns (as Trinity-RFT's mix
    examples, set it to the rollouts over ``1 - expert_data_ratio``).
    """

    class Args(PluginArgs):
        expert_data_ratio: float = Field(0.5, ge=0, le=1, description="share of each batch read from expert data")
        sft_dataset_name: str = Field("sft_dataset", description="the auxiliary buffer holding the expert data")

    def expert_reads(self, train_batch_size: int) -> tuple[str, int]:
        return self.args.sft_dataset_name, round(train_batch_size * self.args.expert_data_ratio)

    def sample(self, experiences: Sequence[Experience], step: int, current_version: int) -> tuple[Batch, Metrics]:
        batch = collate(experiences, step)
        is_expert = torch.tensor([bool(exp.info.get("is_expert", False)) for exp in experiences], dtype=torch.bool)
        if is_expert.numel() != batch.batch_size:
            raise ValueError("mix sample strategy: DPO experiences cannot be mixed with expert data")
        batch = batch.with_fields(is_expert=is_expert)
        return batch, {
            "experience_count": float(batch.batch_size),
            "expert_fraction": is_expert.float().mean().item(),
            **_staleness_metrics(batch.select(torch.nonzero(~is_expert).squeeze(-1)), current_version),
        }
