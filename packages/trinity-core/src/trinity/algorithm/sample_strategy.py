"""Sample strategies: trainer-side conversion of experiences read from the buffer into a Batch.

Staleness of a row is ``current_version - model_version``: how many weight updates ago the
rollout model that produced it was current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.algorithm.base import Metrics, SampleStrategy
from trinity.common.batch import Batch
from trinity.common.experience import Experience
from trinity.common.lazy_import import lazy_module

torch = lazy_module("torch")


def _staleness_metrics(batch: Batch, current_version: int) -> Metrics:
    if batch.batch_size == 0:
        return {}
    staleness = (current_version - batch.model_versions).float()
    return {"staleness_mean": staleness.mean().item(), "staleness_max": staleness.max().item()}


class DefaultSampleStrategy(SampleStrategy):
    """All experiences, collated as they come (``Batch.from_experiences``)."""

    def sample(self, experiences: Sequence[Experience], step: int, current_version: int) -> tuple[Batch, Metrics]:
        batch = Batch.from_experiences(experiences)
        return batch, {"experience_count": float(batch.batch_size), **_staleness_metrics(batch, current_version)}


class StalenessControlSampleStrategy(SampleStrategy):
    """Bounded staleness for async RFT (cf. AReaL, arXiv:2505.24298).

    Rows with staleness ``k > max_staleness`` are dropped (``stale_action: drop``) or kept with
    ``sample_weights = decay ** (k - max_staleness)`` (``stale_action: downweight``), which the
    policy losses multiply into their per-token losses. A batch may come out empty when
    everything is dropped (``experience_count`` 0).
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"max_staleness": 1, "stale_action": "drop", "decay": 0.5}

    def sample(self, experiences: Sequence[Experience], step: int, current_version: int) -> tuple[Batch, Metrics]:
        action, limit = self.args["stale_action"], int(self.args["max_staleness"])
        if action not in ("drop", "downweight"):
            raise ValueError(f"stale_action must be 'drop' or 'downweight', got {action!r}")
        batch = Batch.from_experiences(experiences)
        metrics = _staleness_metrics(batch, current_version)
        excess = (current_version - batch.model_versions - limit).clamp(min=0)
        metrics["stale_fraction"] = (excess > 0).float().mean().item()
        if action == "drop":
            batch = batch.select(torch.nonzero(excess == 0).squeeze(-1))
        else:
            batch = batch.with_fields(sample_weights=float(self.args["decay"]) ** excess.float())
        return batch, {**metrics, "experience_count": float(batch.batch_size)}


class MixSampleStrategy(SampleStrategy):
    """Rollouts mixed with expert (SFT) data for the ``mix`` algorithm (Trinity-RFT).

    The trainer reads ``expert_data_ratio`` of each batch from the auxiliary buffer
    ``sft_dataset_name`` and the rest from the experience buffer, marks the expert rows with
    ``info["is_expert"] = True`` and passes both; the batch gets ``is_expert`` accordingly.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"expert_data_ratio": 0.5, "sft_dataset_name": "sft_dataset"}

    def expert_reads(self, train_batch_size: int) -> tuple[str, int]:
        return self.args["sft_dataset_name"], round(train_batch_size * float(self.args["expert_data_ratio"]))

    def sample(self, experiences: Sequence[Experience], step: int, current_version: int) -> tuple[Batch, Metrics]:
        batch = Batch.from_experiences(experiences)
        is_expert = torch.tensor([bool(exp.info.get("is_expert", False)) for exp in experiences], dtype=torch.bool)
        if is_expert.numel() != batch.batch_size:
            raise ValueError("mix sample strategy: DPO experiences cannot be mixed with expert data")
        batch = batch.with_fields(is_expert=is_expert)
        return batch, {
            "experience_count": float(batch.batch_size),
            "expert_fraction": is_expert.float().mean().item(),
            **_staleness_metrics(batch.select(torch.nonzero(~is_expert).squeeze(-1)), current_version),
        }
