"""KL estimators between the policy and the reference model, per token, from log-probabilities.

Each serves as a reward penalty (``kl_penalty_fn``: ``r_t -= kl_coef * kl_t`` on old
logprobs) and as a loss (``kl_loss_fn``: ``kl_coef * agg(kl_t)`` on current logprobs).
Estimators after J. Schulman, "Approximating KL divergence" (2020), with ``d = logp - logp_ref``;
verl's ``kl_penalty`` names them the same (there ``k3`` is clamped like ``low_var_kl``).

The reward penalty can adapt its coefficient (``adaptive: true``) with the proportional
controller of Ziegler et al. 2019 (arXiv:1909.08593), verl's ``AdaptiveKLController``:
``kl_coef *= 1 + clip(kl / target_kl - 1, -0.2, 0.2) * batch_size / horizon`` after each batch.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from trinity.algorithm.advantage import token_rewards
from trinity.algorithm.base import KLFn, Metrics
from trinity.algorithm.utils import agg_loss, masked_mean
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module

torch = lazy_module("torch")


class _KL(KLFn):
    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"kl_coef": 0.001, "adaptive": False, "target_kl": 0.1, "horizon": 10000, "loss_agg_mode": "token-mean"}

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.kl_coef = float(self.args["kl_coef"])

    @abstractmethod
    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        """Per-token estimate ``[B, R]`` (float32)."""

    def _per_token(self, logprobs: torch.Tensor, batch: Batch) -> torch.Tensor:
        if batch.ref_logprobs is None:
            raise ValueError(f"{type(self).__name__} needs batch.ref_logprobs (a reference model)")
        return self.kl(logprobs.float(), batch.ref_logprobs.float())

    def apply_to_reward(self, batch: Batch) -> tuple[Batch, Metrics]:
        if batch.old_logprobs is None:
            raise ValueError(f"{type(self).__name__} as kl_penalty_fn needs batch.old_logprobs")
        mask = batch.response_mask.float()
        with torch.no_grad():
            kl = self._per_token(batch.old_logprobs, batch) * mask
            rewards = token_rewards(batch) - self.kl_coef * kl
            current = masked_mean(kl, mask, dim=-1).mean().item()
        metrics = {"kl": current, "kl_coef": self.kl_coef}
        if self.args["adaptive"]:
            error = min(max(current / self.args["target_kl"] - 1.0, -0.2), 0.2)
            self.kl_coef *= 1.0 + error * batch.batch_size / self.args["horizon"]
        return batch.with_fields(token_level_rewards=rewards), metrics

    def calculate_kl_loss(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        kl = agg_loss(self._per_token(logprobs, batch), batch.response_mask.float(), self.args["loss_agg_mode"])
        return self.kl_coef * kl, {"kl_loss": kl.item(), "kl_coef": self.kl_coef}


class NoKL(_KL):
    """No KL term: rewards unchanged, loss 0 (accepts, and ignores, the usual args)."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(logprobs)

    def apply_to_reward(self, batch: Batch) -> tuple[Batch, Metrics]:
        return batch, {}

    def calculate_kl_loss(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        return logprobs.new_zeros((), dtype=torch.float32), {}


class K1(_KL):
    """k1: ``d = logp - logp_ref`` (unbiased, high variance, can be negative). verl: ``kl``/``k1``."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        return logprobs - ref_logprobs


class K2(_KL):
    """k2: ``d**2 / 2`` (biased, low variance; its gradient is the true KL's). verl: ``mse``/``k2``."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        return 0.5 * (logprobs - ref_logprobs).square()


class K3(_KL):
    """k3: ``exp(-d) - 1 + d`` (unbiased, non-negative), unclamped; see ``low_var_kl``."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        log_ratio = ref_logprobs - logprobs
        return torch.exp(log_ratio) - log_ratio - 1


class LowVarKL(_KL):
    """k3 with clamps as in verl's ``low_var_kl``: ``-d`` clamped to [-20, 20], result to [-10, 10]."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10.0, 10.0)


class AbsKL(_KL):
    """``|d|``. verl: ``abs``."""

    def kl(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        return (logprobs - ref_logprobs).abs()
