"""Policy losses: ``loss_fn(logprobs [B, R], batch) -> (scalar loss, metrics)``.

Inputs of any float dtype (bf16 included) are computed in float32; gradients flow back to
``logprobs`` in its own dtype. Each loss aggregates its per-token loss with ``loss_agg_mode``
(see ``trinity.algorithm.utils.agg_loss``) over ``batch.response_mask``; when the batch has
``sample_weights`` (e.g. staleness down-weighting) each row's token losses are scaled by it.
"""

from __future__ import annotations

from typing import Any

from trinity.algorithm.base import Metrics, PolicyLossFn
from trinity.algorithm.utils import agg_loss, masked_mean, masked_sum
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module

torch = lazy_module("torch")
F = lazy_module("torch.nn.functional")


def _required(batch: Batch, name: str, loss: str) -> torch.Tensor:
    value = getattr(batch, name)
    if value is None:
        raise ValueError(f"policy_loss_fn {loss!r} needs batch.{name}")
    return value.float()


class _AggregatedLoss(PolicyLossFn):
    """Base of the per-token losses: aggregation, sample weights and the common inputs."""

    name = ""

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"loss_agg_mode": "token-mean"}

    def aggregate(self, loss_mat: torch.Tensor, batch: Batch) -> torch.Tensor:
        if batch.sample_weights is not None:
            loss_mat = loss_mat * batch.sample_weights.float()[:, None]
        return agg_loss(loss_mat, batch.response_mask.float(), self.args["loss_agg_mode"])

    def inputs(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, ...]:
        """float32 ``logprobs, old_logprobs, advantages, mask``."""
        return (
            logprobs.float(),
            _required(batch, "old_logprobs", self.name),
            _required(batch, "advantages", self.name),
            batch.response_mask.float(),
        )


class _ClippedLoss(_AggregatedLoss):
    """The clipped surrogate shared by ``ppo`` and ``gspo`` (ranges default to ``clip_range``)."""

    def clip_bounds(self) -> tuple[float, float]:
        low, high = self.args["clip_range_low"], self.args["clip_range_high"]
        clip = self.args["clip_range"]
        return 1.0 - (clip if low is None else low), 1.0 + (clip if high is None else high)

    def surrogate(
        self, log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, ratio_c: float | None
    ) -> tuple[torch.Tensor, Metrics]:
        """``max(-A r, -A clip(r))``, for ``A < 0`` capped at ``-A ratio_c`` (dual clip)."""
        ratio = torch.exp(log_ratio)
        lower, upper = self.clip_bounds()
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(lower, upper)
        losses = torch.maximum(unclipped, clipped)
        clipfrac = masked_mean((clipped > unclipped).float(), mask)
        clipfrac_lower = torch.zeros((), device=mask.device)
        if ratio_c is not None:
            capped = -advantages * ratio_c
            clipfrac_lower = masked_mean(((losses > capped) & (advantages < 0)).float(), mask)
            losses = torch.where(advantages < 0, torch.minimum(losses, capped), losses)
        return losses, {"pg_clipfrac": clipfrac.item(), "pg_clipfrac_lower": clipfrac_lower.item()}


class PPOPolicyLoss(_ClippedLoss):
    """PPO clipped surrogate with dual clip (Schulman et al. 2017, arXiv:1707.06347;
    dual clip: Ye et al. 2020, arXiv:1912.09729).

    ``r = exp(logp - logp_old)`` (log-ratio clamped to [-20, 20]),
    ``l = max(-A r, -A clip(r, 1 - clip_range_low, 1 + clip_range_high))``, and for ``A < 0``
    ``l = min(l, -A clip_ratio_c)`` (``clip_ratio_c: null`` disables the dual clip).
    verl: ``compute_policy_loss_vanilla``. Metrics: ``pg_loss``, ``ppo_kl`` (mean of
    ``logp_old - logp``), ``pg_clipfrac``, ``pg_clipfrac_lower``.
    """

    name = "ppo"

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {
            **super().default_args(),
            "clip_range": 0.2,
            "clip_range_low": None,
            "clip_range_high": None,
            "clip_ratio_c": 3.0,
        }

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = (logprobs - old).clamp(-20.0, 20.0)
        losses, metrics = self.surrogate(log_ratio, advantages, mask, self.args["clip_ratio_c"])
        loss = self.aggregate(losses, batch)
        return loss, {"pg_loss": loss.item(), "ppo_kl": masked_mean(-log_ratio, mask).item(), **metrics}


class GSPOPolicyLoss(_ClippedLoss):
    """Group sequence policy optimisation (Zheng et al. 2025, arXiv:2507.18071).

    The ratio is the sequence's length-normalised one, ``s = exp(mean_t(logp - logp_old))``,
    with per-token gradients ``s_t = sg[s] * p_t / sg[p_t]`` (log clamped at 10), clipped as in
    PPO without dual clip. verl: ``compute_policy_loss_gspo``. The paper's defaults:
    ``clip_range_low=3e-4``, ``clip_range_high=4e-4``, ``loss_agg_mode=seq-mean-token-mean``.
    """

    name = "gspo"

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {
            "loss_agg_mode": "seq-mean-token-mean",
            "clip_range": 0.2,
            "clip_range_low": 3e-4,
            "clip_range_high": 4e-4,
        }

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        token_log_ratio = logprobs - old
        seq_log_ratio = masked_sum(token_log_ratio, mask, dim=-1) / mask.sum(-1).clamp(min=1)
        log_ratio = (logprobs - logprobs.detach() + seq_log_ratio.detach()[:, None]).clamp(max=10.0)
        losses, metrics = self.surrogate(log_ratio, advantages, mask, None)
        loss = self.aggregate(losses, batch)
        return loss, {"pg_loss": loss.item(), "ppo_kl": masked_mean(-token_log_ratio, mask).item(), **metrics}


class CISPOPolicyLoss(_AggregatedLoss):
    """Clipped IS-weight policy optimisation (MiniMax-M1, arXiv:2506.13585).

    ``l = -sg[clip(r, 1 - clip_range_low, 1 + clip_range_high)] * A * logp``: every token keeps
    its gradient, only the importance weight is clipped. verl: ``compute_policy_loss_cispo``.
    ``pg_clipfrac`` is the fraction of tokens whose weight was clipped.
    """

    name = "cispo"

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {**super().default_args(), "clip_range_low": 1.0, "clip_range_high": 0.28}

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = (logprobs - old).clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio).detach()
        weight = ratio.clamp(1.0 - self.args["clip_range_low"], 1.0 + self.args["clip_range_high"])
        weight = torch.where(mask.bool(), weight, torch.zeros_like(weight))  # a NaN weight off the mask x 0 grad
        loss = self.aggregate(-weight * advantages * logprobs, batch)
        return loss, {
            "pg_loss": loss.item(),
            "ppo_kl": masked_mean(-log_ratio, mask).item(),
            "pg_clipfrac": masked_mean((weight != ratio).float(), mask).item(),
        }


class OPMDPolicyLoss(_AggregatedLoss):
    """Online policy mirror descent loss (Trinity-RFT ``opmd``; arXiv:2509.24203).

    ``l = -A * logp / (1 + tau)``: a REINFORCE-style loss on OPMD advantages, scaled by the
    strength ``tau`` of the KL regulariser towards the previous policy.
    """

    name = "opmd"

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {**super().default_args(), "tau": 1.0}

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        advantages = _required(batch, "advantages", self.name)
        loss = self.aggregate(-advantages * logprobs.float(), batch) / (1.0 + self.args["tau"])
        return loss, {"pg_loss": loss.item()}


class TOPRPolicyLoss(_AggregatedLoss):
    """Tapered off-policy REINFORCE (Le Roux et al. 2025, arXiv:2503.14286).

    Rows with ``A >= 0`` take the plain REINFORCE gradient ``-A logp``; rows with ``A < 0``
    are weighted by the sequence importance ratio truncated at 1,
    ``sg[min(1, exp(sum_t(logp - logp_old)))]``, so bad off-policy samples cannot blow up.
    ``pg_clipfrac``: fraction of negative tokens whose ratio was truncated.
    """

    name = "topr"

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = logprobs.detach() - old
        seq_log_ratio = masked_sum(log_ratio, mask, dim=-1)[:, None]
        negative = advantages < 0
        weight = torch.where(negative, torch.exp(seq_log_ratio.clamp(max=0.0)), torch.ones_like(advantages))
        loss = self.aggregate(-weight * advantages * logprobs, batch)
        return loss, {
            "pg_loss": loss.item(),
            "ppo_kl": masked_mean(-log_ratio, mask).item(),
            "pg_clipfrac": masked_mean((negative & (seq_log_ratio > 0)).float(), mask).item(),
        }


class SFTLoss(_AggregatedLoss):
    """Supervised fine-tuning: negative log-likelihood ``l = -logp`` of the response tokens."""

    name = "sft"

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        loss = self.aggregate(-logprobs.float(), batch)
        return loss, {"sft_loss": loss.item()}


class DPOLoss(PolicyLossFn):
    """Direct preference optimisation (Rafailov et al. 2023, arXiv:2305.18290; TRL's
    ``DPOTrainer`` for ``label_smoothing``, the cDPO variant).

    Rows come in pairs, chosen at even and rejected at odd index. With sequence log-ratios
    ``h = sum_t(logp - logp_ref)``, ``z = beta * (h_chosen - h_rejected)`` and
    ``loss = mean(-(1 - ls) * log sigmoid(z) - ls * log sigmoid(-z))``. Needs
    ``batch.ref_logprobs``. Metrics: ``dpo_loss``, ``chosen_reward``, ``rejected_reward``
    (``beta * h``), ``accuracy`` (share of pairs with ``z > 0``).
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"beta": 0.1, "label_smoothing": 0.0}

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        if batch.batch_size % 2:
            raise ValueError(f"dpo needs chosen/rejected row pairs, got {batch.batch_size} rows")
        mask = batch.response_mask.float()
        ref = _required(batch, "ref_logprobs", "dpo")
        rewards = self.args["beta"] * masked_sum(logprobs.float() - ref, mask, dim=-1)
        chosen, rejected = rewards[0::2], rewards[1::2]
        margin = chosen - rejected
        smoothing = self.args["label_smoothing"]
        loss = (-(1 - smoothing) * F.logsigmoid(margin) - smoothing * F.logsigmoid(-margin)).mean()
        return loss, {
            "dpo_loss": loss.item(),
            "chosen_reward": chosen.mean().item(),
            "rejected_reward": rejected.mean().item(),
            "accuracy": (margin > 0).float().mean().item(),
        }


class MIXPolicyLoss(PolicyLossFn):
    """RL on rollouts plus SFT on expert data (Trinity-RFT ``mix``, e.g. CHORD arXiv:2508.11408).

    ``loss = (1 - mu) * ppo(rows with not is_expert) + mu * sft(rows with is_expert)``, each
    part aggregated over its own tokens of the micro-batch (0 when it has none). Metrics of the
    parts come prefixed ``usual/`` and ``expert/``; ``pg_loss`` is the total.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {**PPOPolicyLoss.default_args(), "mu": 0.1}

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        ppo_args = {k: v for k, v in self.args.items() if k != "mu"}
        self.rl = PPOPolicyLoss(**ppo_args)
        self.sft = SFTLoss(loss_agg_mode=ppo_args["loss_agg_mode"])

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        mask = batch.response_mask.float()
        if batch.is_expert is None:
            expert = torch.zeros(batch.batch_size, dtype=torch.bool, device=mask.device)
        else:
            expert = batch.is_expert.bool()
        loss = logprobs.new_zeros((), dtype=torch.float32)
        rl_metrics: Metrics = {}
        sft_metrics: Metrics = {}
        if not expert.all():
            rl_loss, rl_metrics = self.rl(logprobs, batch.with_fields(response_mask=mask * ~expert[:, None]))
            loss = loss + (1 - self.args["mu"]) * rl_loss
        if expert.any():
            sft_loss, sft_metrics = self.sft(logprobs, batch.with_fields(response_mask=mask * expert[:, None]))
            loss = loss + self.args["mu"] * sft_loss
        metrics = {f"usual/{k}": v for k, v in rl_metrics.items()}
        metrics.update({f"expert/{k}": v for k, v in sft_metrics.items()})
        return loss, {**metrics, "pg_loss": loss.item()}
