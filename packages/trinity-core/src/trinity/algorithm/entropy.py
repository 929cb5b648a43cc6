"""Entropy losses: a term added to the actor loss from per-token entropy ``[B, R]``.

``loss = -entropy_coef * agg(H)``: a positive coefficient rewards entropy (exploration).
verl adds ``-entropy_coeff * agg_loss(entropy)`` to the policy loss the same way.
Metrics: ``entropy`` (the aggregated entropy) and ``entropy_loss`` (the returned term).
"""

from __future__ import annotations

from pydantic import Field

from trinity.algorithm.base import EntropyLossFn, Metrics
from trinity.algorithm.utils import LossAggMode, agg_loss
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs

torch = lazy_module("torch")


class DefaultEntropyLoss(EntropyLossFn):
    """``-entropy_coef * agg(H, response_mask)`` over all rows."""

    class Args(PluginArgs):
        entropy_coef: float = Field(0.0, description="weight of the entropy bonus (0: none)")
        loss_agg_mode: LossAggMode = Field("token-mean", description="how the entropy aggregates tokens")

    def mask(self, batch: Batch) -> torch.Tensor:
        return batch.response_mask.float()

    def __call__(self, entropy: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        mean_entropy = agg_loss(entropy.float(), self.mask(batch), self.args.loss_agg_mode)
        loss = -self.args.entropy_coef * mean_entropy
        return loss, {"entropy": mean_entropy.item(), "entropy_loss": loss.item()}


class MixEntropyLoss(DefaultEntropyLoss):
    """As ``default`` on the rollout rows only (``is_expert`` false): expert data of a ``mix``
    batch is trained by SFT, whose entropy is not the policy's to regularise."""

    def mask(self, batch: Batch) -> torch.Tensor:
        mask = batch.response_mask.float()
        return mask if batch.is_expert is None else mask * ~batch.is_expert.bool()[:, None]


class NoEntropyLoss(EntropyLossFn):
    """No entropy term: 0 (accepts, and ignores, the usual args)."""

    Args = DefaultEntropyLoss.Args

    def __call__(self, entropy: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        return entropy.new_zeros((), dtype=torch.float32), {}
