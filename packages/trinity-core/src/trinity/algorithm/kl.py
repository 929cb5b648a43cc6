"""KL estimators between the policy and the reference model, per token, from log-probabilities.

Each serves as a reward penalty (``kl_penalty_fn``: ``r_t -= kl_coef * kl_t`` on old logprobs) and
as a loss (``kl_loss_fn``: ``kl_coef * agg(kl_t)`` on current logprobs). Estimators after J.
Schulman, "Approximating KL divergence" (2020), with ``d = logp - logp_ref``, named as verl 0.9's
``kl_penalty``; a ``+`` suffix keeps the estimator's value but takes the gradient of k2, the
unbiased gradient of the KL (verl's straight-through forms). The reward penalty can adapt its
coefficient (``adaptive: true``) with Ziegler et al. 2019's controller, verl's ``AdaptiveKLController``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from trinity.algorithm.advantage import token_rewards
from trinity.algorithm.base import KLFn, Metrics
from trinity.algorithm.utils import LossAggMode, agg_loss, masked_mean
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs

torch = lazy_module("torch")

Estimator = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return logprobs - ref_logprobs


def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logprobs - ref_logprobs).square()


def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """``exp(-d) - 1 + d`` with verl's clamps: ``-d`` to [-20, 20], the result to [-10, 10]."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10.0, 10.0)


def abs_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - ref_logprobs).abs()


@dataclass
class AdaptiveKLController:
    """The proportional KL controller of Ziegler et al. 2019 (arXiv:1909.08593), verl's
    ``AdaptiveKLController``: after each batch of ``n_steps`` samples with measured KL ``kl``,
    ``value *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon``."""

    value: float
    target: float
    horizon: float

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


class _KL(KLFn):
    estimate: ClassVar[Estimator]
    """The per-token estimate of ``(logprobs, ref_logprobs)``."""

    class Args(PluginArgs):
        kl_coef: float = Field(0.001, ge=0, description="weight of the KL term (initial value when adaptive)")
        adaptive: bool = Field(False, description="adapt kl_coef towards target_kl (reward penalty only)")
        target_kl: float = Field(0.1, gt=0, description="the KL the adaptive controller steers to")
        horizon: float = Field(10000, gt=0, description="samples over which the controller acts")
        loss_agg_mode: LossAggMode = Field("token-mean", description="how the KL loss aggregates tokens")

    def __init__(self, **args) -> None:
        super().__init__(**args)
        self.controller = AdaptiveKLController(self.args.kl_coef, self.args.target_kl, self.args.horizon)

    @property
    def kl_coef(self) -> float:
        return self.controller.value

    @property
    def loss_has_gradient(self) -> bool:
        return self.kl_coef != 0

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """Per-token estimate ``[B, R]`` (float32)."""
        return type(self).estimate(logprobs, ref_logprobs)

    def per_token(self, logprobs: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The estimate of ``logprobs`` against the batch's reference, 0 off the mask."""
        if batch.ref_logprobs is None:
            raise ValueError(f"{type(self).__name__} needs batch.ref_logprobs (a reference model)")
        mask = batch.response_mask.bool()
        return torch.where(mask, self.kl(logprobs.float(), torch.where(mask, batch.ref_logprobs.float(), 0.0)), 0.0)

    def apply_to_reward(self, batch: Batch) -> tuple[Batch, Metrics]:
        if batch.old_logprobs is None:
            raise ValueError(f"{type(self).__name__} as kl_penalty_fn needs batch.old_logprobs")
        mask = batch.response_mask.float()
        with torch.no_grad():
            old = torch.where(mask.bool(), batch.old_logprobs.float(), 0.0)
            kl = self.per_token(old, batch)
            rewards = token_rewards(batch) - self.kl_coef * kl
            current = masked_mean(kl, mask, dim=-1).mean().item()
        metrics = {"kl": current, "kl_coef": self.kl_coef}
        if self.args.adaptive:
            self.controller.update(current, batch.batch_size)
        return batch.with_fields(token_level_rewards=rewards), metrics

    def calculate_kl_loss(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        kl = agg_loss(self.per_token(logprobs, batch), batch.response_mask.float(), self.args.loss_agg_mode)
        return self.kl_coef * kl, {"kl_loss": kl.item(), "kl_coef": self.kl_coef}


class NoKL(_KL):
    """No KL term: rewards unchanged, loss 0 (accepts, and ignores, the usual args)."""

    def apply_to_reward(self, batch: Batch) -> tuple[Batch, Metrics]:
        return batch, {}

    def calculate_kl_loss(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        return logprobs.new_zeros((), dtype=torch.float32), {}

    @property
    def loss_has_gradient(self) -> bool:
        return False


class K1(_KL):
    """k1: ``d = logp - logp_ref`` (unbiased, high variance, can be negative). verl: ``kl``/``k1``."""

    estimate = staticmethod(k1)


class K2(_KL):
    """k2: ``d**2 / 2`` (biased, low variance; its gradient is the true KL's). verl: ``mse``/``k2``."""

    estimate = staticmethod(k2)


class LowVarKL(_KL):
    """k3, ``exp(-d) - 1 + d`` (unbiased, non-negative), with verl's clamps: ``-d`` to [-20, 20],
    the result to [-10, 10]. verl: ``low_var_kl``."""

    estimate = staticmethod(k3)


class K3(LowVarKL):
    """k3 as verl 0.9 computes it: the same clamped estimate as ``low_var_kl`` (Trinity-RFT's
    ``k3`` leaves it unclamped, ~1e17 at extreme log-ratios). verl: ``k3``."""


class AbsKL(_KL):
    """``|d|``. verl: ``abs``."""

    estimate = staticmethod(abs_kl)


class _StraightThroughKL(_KL):
    """The estimate's value with the gradient of k2 (``k2 - sg[k2] + sg[estimate]``): verl's
    ``+`` forms, for an unbiased KL gradient from a low-variance value."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        gradient = k2(logprobs, ref_logprobs)
        return gradient - gradient.detach() + type(self).estimate(logprobs, ref_logprobs).detach()


class K1Plus(_StraightThroughKL):
    """k1's value, k2's gradient. verl: ``k1+`` (``kl+``)."""

    estimate = staticmethod(k1)


class K3Plus(_StraightThroughKL):
    """Clamped k3's value, k2's gradient. verl: ``k3+`` and ``low_var_kl+``."""

    estimate = staticmethod(k3)


class AbsKLPlus(_StraightThroughKL):
    """``|d|``'s value, k2's gradient. verl: ``abs+``."""

    estimate = staticmethod(abs_kl)


class CorrectedK3(_KL):
    """k3 corrected by importance sampling towards the current policy (Trinity-RFT
    ``corrected_k3``): ``clip(exp(logp - logp_old), 0, 2) * k3``, whose expectation under the
    rollout policy is the KL of the current one; the ratio keeps its gradient. The k3 here is
    clamped as verl clamps it (Trinity-RFT's is not). As a reward penalty (on old logprobs) the
    ratio is 1: plain k3."""

    estimate = staticmethod(k3)

    def per_token(self, logprobs: torch.Tensor, batch: Batch) -> torch.Tensor:
        kl = super().per_token(logprobs, batch)
        if batch.old_logprobs is None:
            raise ValueError("corrected_k3 needs batch.old_logprobs")
        old = torch.where(batch.response_mask.bool(), batch.old_logprobs.float(), 0.0)
        return torch.exp(logprobs.float() - old).clamp(0.0, 2.0) * kl
