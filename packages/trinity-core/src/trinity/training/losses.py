"""The micro-batch losses every training engine uses, so that all engines share one numerical truth.

An engine splits a batch into micro-batches and accumulates gradients; each loss term of a
micro-batch is weighted by the micro-batch's share of the batch (tokens for
``token-mean``, 1 for ``token-sum``, non-empty rows otherwise), so the accumulated gradient
is the full batch's. ``trainer.fix_actor_microbatch_loss_scale: false`` weighs the actor's
``token-mean`` terms by the micro-batch's share of the batch's rows instead (Trinity-RFT's
default, verl's original scale), where micro-batches of unequal token counts do not add up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trinity.algorithm.rollout_correction import PREFIX as ROLLOUT_CORR_PREFIX
from trinity.algorithm.rollout_correction import RolloutCorrector
from trinity.algorithm.utils import agg_loss, masked_mean
from trinity.common.batch import Batch
from trinity.config.schema import Config
from trinity.model.engines import Metrics
from trinity.plugins import Kind, resolve

Totals = tuple[torch.Tensor, torch.Tensor, int]
"""``(response tokens, non-empty rows, rows)`` of a whole batch."""


def batch_totals(batch: Batch) -> Totals:
    mask = batch.response_mask.float()
    return mask.sum().clamp(min=1), (mask.sum(dim=1) > 0).sum().clamp(min=1), max(1, len(mask))


def role_metrics(role: str, metrics: Metrics) -> Metrics:
    """``role/<key>`` for an engine's metrics, except rollout correction's, which keep verl's
    ``rollout_corr/`` names."""
    return {k if k.startswith(ROLLOUT_CORR_PREFIX) else f"{role}/{k}": v for k, v in metrics.items()}


def share(fn_or_mode: Any, mask: torch.Tensor, totals: Totals) -> torch.Tensor:
    """The micro-batch's share of the batch for a term aggregated with the given mode."""
    mode = fn_or_mode if isinstance(fn_or_mode, str) else getattr(fn_or_mode, "loss_agg_mode", None)
    if mode == "token-mean":
        return mask.sum() / totals[0].to(mask.device)
    if mode == "token-sum":
        return torch.ones((), device=mask.device)
    return (mask.sum(dim=1) > 0).sum() / totals[1].to(mask.device)


@dataclass(frozen=True)
class LossFns:
    """The configured policy-loss, KL-loss and entropy-loss functions of the actor."""

    policy: Any
    kl: Any
    entropy: Any
    correction: RolloutCorrector | None = None
    """``algorithm.rollout_correction`` in bypass mode corrects inside the policy loss."""
    row_scaled: bool = False
    """``trainer.fix_actor_microbatch_loss_scale: false``: token-mean terms weighted by rows."""

    @classmethod
    def from_config(cls, config: Config) -> LossFns:
        """The functions named in ``config.algorithm`` (after the config pass) or the type's defaults."""
        algorithm = resolve(Kind.ALGORITHM_TYPE, config.algorithm.algorithm_type)

        def fn(kind: Kind, field: str) -> Any:
            name = getattr(config.algorithm, field) or getattr(algorithm, field)
            return resolve(kind, name)(**(getattr(config.algorithm, f"{field}_args") or {}))

        correction = RolloutCorrector.from_config(config)
        return cls(
            fn(Kind.POLICY_LOSS_FN, "policy_loss_fn"),
            fn(Kind.KL_FN, "kl_loss_fn"),
            fn(Kind.ENTROPY_LOSS_FN, "entropy_loss_fn"),
            correction if correction is not None and correction.bypass else None,
            row_scaled=not config.trainer.fix_actor_microbatch_loss_scale,
        )

    @property
    def entropy_grad(self) -> bool:
        """Whether the entropy term has a gradient (not with ``entropy_coef: 0``)."""
        coef = getattr(getattr(self.entropy, "args", None), "entropy_coef", None)
        return coef is None or coef != 0

    def gradient_rows(self, mb: Batch) -> torch.Tensor | None:
        """The rows of ``mb`` that add to the gradient, where the others add nothing: rows whose
        advantages are all 0 under a policy loss that vanishes there, with no KL, entropy or
        bypass-correction term to give them one. None: every row (nothing to tell apart)."""
        if mb.advantages is None or not self.policy.vanishes_at_zero_advantage:
            return None
        if self.kl.loss_has_gradient or self.entropy_grad or self.correction is not None:
            return None
        return ((mb.advantages != 0) & mb.response_mask.bool()).any(dim=1)

    def actor_micro_loss(
        self, logprobs: torch.Tensor, entropy: torch.Tensor, mb: Batch, totals: Totals
    ) -> tuple[torch.Tensor, Metrics, float]:
        """``(loss weighted by the micro-batch's shares, metrics, metrics weight)`` of ``mb``."""
        mask = mb.response_mask.float()
        if not self.entropy_grad:
            entropy = entropy.detach()
        if self.correction is not None:
            pg, pg_metrics = self.correction.bypass_loss(self.policy, logprobs, mb)
        else:
            pg, pg_metrics = self.policy(logprobs, mb)
        kl, kl_metrics = self.kl.calculate_kl_loss(logprobs, mb)
        ent, ent_metrics = self.entropy(entropy, mb)
        weight = self._share(self.policy, mask, totals)
        total = pg * weight + kl * self._share(self.kl, mask, totals) + ent * self._share(self.entropy, mask, totals)
        return total, {**pg_metrics, **kl_metrics, **ent_metrics}, float(weight)

    def _share(self, fn: Any, mask: torch.Tensor, totals: Totals) -> torch.Tensor:
        if self.row_scaled and getattr(fn, "loss_agg_mode", None) == "token-mean":
            return torch.tensor(len(mask) / totals[2], device=mask.device)
        return share(fn, mask, totals)


def critic_micro_loss(
    values: torch.Tensor, mb: Batch, totals: Totals, mode: str, clip: float
) -> tuple[torch.Tensor, Metrics, float]:
    """verl's clipped value loss ``0.5 * agg(max((v - R)^2, (clip(v, v_old +- c) - R)^2))`` of
    ``mb``, weighted by its share; with metrics and their weight."""
    mask = mb.response_mask.float()
    old, returns = mb.values.float(), mb.returns.float()
    clipped = old + (values - old).clamp(-clip, clip)
    unclipped_loss, clipped_loss = (values - returns).square(), (clipped - returns).square()
    vf_loss = 0.5 * agg_loss(torch.maximum(unclipped_loss, clipped_loss), mask, mode)
    weight = share(mode, mask, totals)
    metrics = {
        "vf_loss": vf_loss.item(),
        "vf_clipfrac": masked_mean((clipped_loss > unclipped_loss).float(), mask).item(),
        "vpred_mean": masked_mean(values.detach(), mask).item(),
    }
    return vf_loss * weight, metrics, float(weight)
