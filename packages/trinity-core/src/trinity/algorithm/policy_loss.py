"""Policy-gradient losses: ``loss_fn(logprobs [B, R], batch) -> (scalar loss, metrics)``.

Inputs of any float dtype (bf16 included) are computed in float32; gradients flow back to
``logprobs`` in its own dtype. Each loss aggregates its per-token loss with ``loss_agg_mode``
(see ``trinity.algorithm.utils.agg_loss``) over ``batch.response_mask``; when the batch has
``sample_weights`` (e.g. staleness down-weighting) each row's token losses are scaled by it, and
with ``rollout_is_weights`` (rollout correction's importance weights) each token's loss.
``r = exp(logp - logp_old)`` is the importance ratio against the rollout (old) policy.
Supervised and mixed losses (SFT, DPO, mix) live in ``trinity.algorithm.supervised_loss``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import Field

from trinity.algorithm.base import Metrics, PolicyLossFn
from trinity.algorithm.utils import LossAggMode, agg_loss, masked_mean, masked_sum
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs

torch = lazy_module("torch")

LOSS_AGG_MODE = Field("token-mean", description="how per-token losses become one scalar (verl's agg_loss)")
CLIP_LOW = Field(None, ge=0, description="lower clip range, 1 - low (default: clip_range)")
CLIP_HIGH = Field(None, ge=0, description="upper clip range, 1 + high (default: clip_range)")
LOG_RATIO_LIMIT = 20.0


def required(batch: Batch, name: str, loss: str) -> torch.Tensor:
    """``batch.<name>`` in float32, 0 off the response mask (nothing there may leak into a loss)."""
    value = getattr(batch, name)
    if value is None:
        raise ValueError(f"policy_loss_fn {loss!r} needs batch.{name}")
    return torch.where(batch.response_mask.bool(), value.float(), 0.0)


class AggregatedLoss(PolicyLossFn):
    """Base of the per-token losses: aggregation, sample weights and the common inputs."""

    name: ClassVar[str] = ""

    class Args(PluginArgs):
        loss_agg_mode: LossAggMode = LOSS_AGG_MODE

    def aggregate(self, loss_mat: torch.Tensor, batch: Batch, mode: str | None = None) -> torch.Tensor:
        if batch.sample_weights is not None:
            loss_mat = loss_mat * batch.sample_weights.float()[:, None]
        if batch.rollout_is_weights is not None:  # rollout correction (trinity.algorithm.rollout_correction)
            loss_mat = loss_mat * batch.rollout_is_weights.to(loss_mat.dtype)
        return agg_loss(loss_mat, batch.response_mask.float(), mode or self.loss_agg_mode)

    def inputs(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, ...]:
        """float32 ``logprobs, old_logprobs, advantages, mask``."""
        return (
            logprobs.float(),
            required(batch, "old_logprobs", self.name),
            required(batch, "advantages", self.name),
            batch.response_mask.float(),
        )

    @staticmethod
    def result(
        loss: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, **metrics: float
    ) -> tuple[torch.Tensor, Metrics]:
        """The loss and its metrics: ``pg_loss``, ``ppo_kl`` (mean ``logp_old - logp``) and ``metrics``."""
        return loss, {"pg_loss": loss.item(), "ppo_kl": masked_mean(-log_ratio, mask).item(), **metrics}


def clamped_log_ratio(logprobs: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``logp - logp_old`` clamped to [-20, 20] (where verl clamps it: PPO, CISPO, SAPO)."""
    return (logprobs - old).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def clip_ratio_bounds(args: PluginArgs, default: tuple[float, float]) -> tuple[float, float]:
    """``(1 - low, 1 + high)``: ``clip_range_low/high``, else ``clip_range``, else ``default``."""
    low = next(v for v in (args.clip_range_low, args.clip_range, default[0]) if v is not None)
    high = next(v for v in (args.clip_range_high, args.clip_range, default[1]) if v is not None)
    return 1.0 - low, 1.0 + high


class _ClippedLoss(AggregatedLoss):
    """The clipped surrogate shared by ``ppo``, ``gspo`` and ``clip_cov``."""

    default_clip: ClassVar[tuple[float, float]] = (0.2, 0.2)
    vanishes_at_zero_advantage = True

    class Args(AggregatedLoss.Args):
        clip_range: float | None = Field(0.2, ge=0, description="PPO's epsilon: the ratio is clipped to 1 +- it")
        clip_range_low: float | None = CLIP_LOW
        clip_range_high: float | None = CLIP_HIGH

    def clipped(
        self, ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(max(-A r, -A clip(r)), unclipped, clipped)`` per token."""
        lower, upper = clip_ratio_bounds(self.args, self.default_clip)
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(lower, upper)
        return torch.maximum(unclipped, clipped), unclipped, clipped


class PPOPolicyLoss(_ClippedLoss):
    """PPO clipped surrogate with dual clip (Schulman et al. 2017, arXiv:1707.06347;
    dual clip: Ye et al. 2020, arXiv:1912.09729).

    ``r = exp(logp - logp_old)`` (log-ratio clamped to [-20, 20]),
    ``l = max(-A r, -A clip(r, 1 - clip_range_low, 1 + clip_range_high))``, and for ``A < 0``
    ``l = min(l, -A clip_ratio_c)`` (``clip_ratio_c: null`` disables the dual clip).
    verl: ``compute_policy_loss_vanilla``. Metrics: ``pg_loss``, ``ppo_kl`` (mean of
    ``logp_old - logp``), ``pg_clipfrac``, ``pg_clipfrac_lower``.

    Trinity-RFT's options: ``enable_sequence_masking`` (DeepSeek-V3.2, arXiv:2512.02556) drops
    the negative-advantage tokens of sequences whose mean ``logp_old - logp`` exceeds
    ``delta_sequence_masking``; ``fallback_to_policy_gradient`` sets the ratio to 1 (its
    gradient that of ``logp``), ignoring the rollout engine's logprobs.
    """

    name = "ppo"

    class Args(_ClippedLoss.Args):
        clip_ratio_c: float | None = Field(3.0, gt=1, description="dual-clip cap of -A r for A < 0 (null: none)")
        enable_sequence_masking: bool = Field(False, description="mask negative tokens of off-policy sequences")
        delta_sequence_masking: float = Field(0.1, ge=0, description="mean KL above which a sequence is masked")
        fallback_to_policy_gradient: bool = Field(False, description="ratio 1: plain policy gradient")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = clamped_log_ratio(logprobs, logprobs.detach() if self.args.fallback_to_policy_gradient else old)
        losses, unclipped, clipped = self.clipped(torch.exp(log_ratio), advantages, mask)
        metrics = {"pg_clipfrac": masked_mean((clipped > unclipped).float(), mask).item()}
        lower = torch.zeros((), device=mask.device)
        if self.args.clip_ratio_c is not None:
            capped = -advantages * self.args.clip_ratio_c
            lower = masked_mean(((losses > capped) & (advantages < 0)).float(), mask)
            losses = torch.where(advantages < 0, torch.minimum(losses, capped), losses)
        metrics["pg_clipfrac_lower"] = lower.item()
        if self.args.enable_sequence_masking:
            sequence_kl = masked_mean(-log_ratio.detach(), mask, dim=-1)
            masked = (advantages < 0) & (sequence_kl > self.args.delta_sequence_masking)[:, None]
            losses = torch.where(masked, 0.0, losses)
            metrics["seq_mask/masked_tokens"] = masked_mean(masked.float(), mask).item()
            metrics["seq_mask/mean_sequence_kl"] = sequence_kl.mean().item()
        return self.result(self.aggregate(losses, batch), log_ratio, mask, **metrics)


class GSPOPolicyLoss(_ClippedLoss):
    """Group sequence policy optimisation (Zheng et al. 2025, arXiv:2507.18071).

    The ratio is the sequence's length-normalised one, ``s = exp(mean_t(logp - logp_old))``,
    with per-token gradients ``s_t = sg[s] * p_t / sg[p_t]`` (log clamped at 10), clipped as in
    PPO without dual clip. verl: ``compute_policy_loss_gspo``. The clip ranges default to
    ``clip_range`` when only it is given, else to the paper's ``3e-4`` / ``4e-4``; the paper
    aggregates with ``seq-mean-token-mean``.
    """

    name = "gspo"
    default_clip = (3e-4, 4e-4)

    class Args(_ClippedLoss.Args):
        loss_agg_mode: LossAggMode = Field("seq-mean-token-mean", description=LOSS_AGG_MODE.description)
        clip_range: float | None = Field(
            None, ge=0, description="epsilon of both sides when clip_range_low/high are not given"
        )

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        token_log_ratio = logprobs - old
        seq_log_ratio = masked_mean(token_log_ratio, mask, dim=-1)
        log_ratio = (logprobs - logprobs.detach() + seq_log_ratio.detach()[:, None]).clamp(max=10.0)
        losses, unclipped, clipped = self.clipped(torch.exp(log_ratio), advantages, mask)
        return self.result(
            self.aggregate(losses, batch),
            token_log_ratio,
            mask,
            ppo_kl_seq=(-seq_log_ratio).mean().item(),
            pg_clipfrac=masked_mean((clipped > unclipped).float(), mask).item(),
            pg_clipfrac_lower=0.0,
        )


class ClipCovPolicyLoss(_ClippedLoss):
    """Clip-Cov (Cui et al. 2025, "The entropy mechanism of RL for reasoning LMs",
    arXiv:2505.22617; verl ``compute_policy_loss_clip_cov``): PPO's clipped surrogate (no
    dual clip, no log-ratio clamp) where a random ``clip_cov_ratio`` share of the tokens (at
    least one) whose centred covariance ``(A - mean A)(logp - mean logp)`` lies in
    ``(clip_cov_lb, clip_cov_ub)`` and that PPO did not clip loses its gradient, which slows
    the entropy collapse. ``pg_clipfrac``: the share of tokens so detached.
    """

    name = "clip_cov"

    class Args(_ClippedLoss.Args):
        clip_cov_ratio: float = Field(0.0002, gt=0, le=1, description="share of the tokens to detach")
        clip_cov_lb: float = Field(1.0, description="lower bound of the covariance of a detachable token")
        clip_cov_ub: float = Field(5.0, description="upper bound of the covariance of a detachable token")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = logprobs - old
        losses, unclipped, clipped = self.clipped(torch.exp(log_ratio), advantages, mask)
        with torch.no_grad():
            detached = logprobs.detach()
            cov = (advantages - masked_mean(advantages, mask)) * (detached - masked_mean(detached, mask))
            args = self.args
            candidate = (mask > 0) & ~(clipped > unclipped) & (cov > args.clip_cov_lb) & (cov < args.clip_cov_ub)
            picked = torch.nonzero(candidate)
            budget = max(int(args.clip_cov_ratio * mask.sum().item()), 1)
            picked = picked[torch.randperm(picked.shape[0], device=picked.device)[:budget]]
            keep = torch.ones_like(mask)
            keep[picked[:, 0], picked[:, 1]] = 0.0
        return self.result(
            self.aggregate(losses * keep, batch), log_ratio, mask, pg_clipfrac=masked_mean(1 - keep, mask).item()
        )


class KLCovPolicyLoss(AggregatedLoss):
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617; verl ``compute_policy_loss_kl_cov``): the
    unclipped surrogate ``-A r``, plus ``ppo_kl_coef * |logp - logp_old|`` on the
    ``kl_cov_ratio`` share (at least one) of the tokens with the largest centred covariance
    ``(A - mean A)(logp - mean logp)``. ``ppo_kl`` here is the mean ``|logp - logp_old|``.
    """

    name = "kl_cov"

    class Args(AggregatedLoss.Args):
        kl_cov_ratio: float = Field(0.0002, gt=0, le=1, description="share of the tokens to penalise")
        ppo_kl_coef: float = Field(0.1, ge=0, description="weight of the |log-ratio| penalty")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = logprobs - old
        losses = -advantages * torch.exp(log_ratio)
        valid = mask > 0
        penalised = torch.zeros_like(valid)
        if valid.any():
            with torch.no_grad():
                adv, logp = advantages[valid], logprobs.detach()[valid]
                cov = (adv - adv.mean()) * (logp - logp.mean())
                top = torch.topk(cov, max(1, int(cov.numel() * self.args.kl_cov_ratio))).indices
                penalised[valid] = torch.zeros_like(cov, dtype=torch.bool).scatter_(0, top, True)
        losses = torch.where(penalised, losses + self.args.ppo_kl_coef * log_ratio.abs(), losses)
        loss = self.aggregate(losses, batch)
        return loss, {"pg_loss": loss.item(), "ppo_kl": masked_mean(log_ratio.abs(), mask).item()}


class GeoMeanPolicyLoss(AggregatedLoss):
    """Geometric-mean policy optimisation (GMPO; Zhao et al. 2025, arXiv:2507.20673; verl
    ``compute_policy_loss_geo_mean``): the ratio of a sequence is the geometric mean of its
    token ratios, each log-ratio clipped to ``[-clip_range_low, clip_range_high]`` on the
    side the advantage's sign makes pessimistic; ``l = -mean_t(A) * exp(mean_t(clipped
    log-ratio))`` per sequence, averaged over the non-empty sequences (verl averages over all
    rows, empty ones included). No ``loss_agg_mode``: the loss is sequence-level.
    """

    name = "geo_mean"
    vanishes_at_zero_advantage = True

    class Args(PluginArgs):
        clip_range: float | None = Field(0.4, ge=0, description="log-ratio clip range (GMPO's 0.4)")
        clip_range_low: float | None = CLIP_LOW
        clip_range_high: float | None = CLIP_HIGH

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        lower, upper = clip_ratio_bounds(self.args, (0.4, 0.4))
        log_ratio = logprobs - old
        sign = torch.sign(advantages)
        bounded = log_ratio.clamp(lower - 1.0, upper - 1.0)
        pessimistic = sign * torch.minimum(sign * log_ratio, sign * bounded)
        lengths = mask.sum(-1)
        ratio = torch.exp(masked_sum(pessimistic, mask, dim=-1) / lengths.clamp(min=1))
        losses = -masked_sum(advantages, mask, dim=-1) / lengths.clamp(min=1) * ratio
        if batch.sample_weights is not None:
            losses = losses * batch.sample_weights.float()
        if batch.rollout_is_weights is not None:  # as verl: the geometric mean of a sequence's weights
            log_weights = torch.log(batch.rollout_is_weights.float() + 1e-10)
            losses = losses * torch.exp(masked_sum(log_weights, mask, dim=-1) / (lengths + 1e-8))
        rows = (lengths > 0).float()
        loss = (losses * rows).sum() / rows.sum().clamp(min=1)
        clipped = (log_ratio != bounded).float()
        return self.result(
            loss,
            log_ratio,
            mask,
            pg_clipfrac=masked_mean(clipped * (advantages > 0), mask).item(),
            pg_clipfrac_lower=masked_mean(clipped * (advantages < 0), mask).item(),
        )


class SAPOPolicyLoss(AggregatedLoss):
    """Soft adaptive policy optimisation (Gao et al. 2025, arXiv:2511.20347; verl
    ``compute_policy_loss_sapo``): a smooth gate instead of the hard clip,
    ``l = -f(r) A`` with ``f(r) = 4 / tau * sigmoid(tau (r - 1))``, ``tau = tau_pos`` for
    ``A > 0`` and ``tau_neg`` otherwise, so the gradient weight ``4 sig (1 - sig) r`` peaks at
    ``r = 1`` and decays off-policy on both sides. Follows verl: Trinity-RFT 0.6.0 instead
    weights ``-A logp`` by ``sg[f(r)]``, which grows with ``r`` and gates nothing. verl
    always aggregates with ``seq-mean-token-mean`` (the default here).
    """

    name = "sapo"
    vanishes_at_zero_advantage = True

    class Args(AggregatedLoss.Args):
        loss_agg_mode: LossAggMode = Field("seq-mean-token-mean", description=LOSS_AGG_MODE.description)
        tau_pos: float = Field(1.0, gt=0, description="gate temperature for positive advantages")
        tau_neg: float = Field(1.05, gt=0, description="gate temperature otherwise (>= tau_pos for stability)")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = clamped_log_ratio(logprobs, old)
        tau = torch.where(advantages > 0, self.args.tau_pos, self.args.tau_neg)
        gate = torch.sigmoid(tau * (torch.exp(log_ratio) - 1.0)) * (4.0 / tau)
        loss = self.aggregate(-gate * advantages, batch)
        return self.result(loss, log_ratio, mask, avg_soft_gate=masked_mean(gate.detach(), mask).item())


class CISPOPolicyLoss(AggregatedLoss):
    """Clipped IS-weight policy optimisation (MiniMax-M1, arXiv:2506.13585).

    ``l = -sg[clip(r, 1 - clip_range_low, 1 + clip_range_high)] * A * logp``: every token keeps
    its gradient, only the importance weight is clipped. verl: ``compute_policy_loss_cispo``.
    ``pg_clipfrac`` is the fraction of tokens whose weight was clipped. Trinity-RFT's
    ``enable_mask_clip`` also drops tokens with ``A > 0`` and ``r > 1 + mask_clip_range_high``
    or ``A < 0`` and ``r < 1 - mask_clip_range_low`` (``unmasked_frac``: the share kept).
    """

    name = "cispo"
    vanishes_at_zero_advantage = True

    class Args(AggregatedLoss.Args):
        clip_range_low: float = Field(1.0, ge=0, description="lower weight clip, 1 - low (1: no lower bound)")
        clip_range_high: float = Field(0.28, ge=0, description="upper weight clip, 1 + high")
        enable_mask_clip: bool = Field(False, description="also drop tokens far out on the advantage's side")
        mask_clip_range_low: float = Field(1.0, ge=0, description="mask below 1 - low for A < 0")
        mask_clip_range_high: float = Field(0.28, ge=0, description="mask above 1 + high for A > 0")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = clamped_log_ratio(logprobs, old)
        ratio = torch.exp(log_ratio).detach()
        weight = ratio.clamp(1.0 - self.args.clip_range_low, 1.0 + self.args.clip_range_high)
        metrics = {"pg_clipfrac": masked_mean((weight != ratio).float(), mask).item()}
        if self.args.enable_mask_clip:
            high = (ratio > 1.0 + self.args.mask_clip_range_high) & (advantages > 0)
            low = (ratio < 1.0 - self.args.mask_clip_range_low) & (advantages < 0)
            weight = torch.where(high | low, 0.0, weight)
            metrics["unmasked_frac"] = masked_mean((~(high | low)).float(), mask).item()
        return self.result(self.aggregate(-weight * advantages * logprobs, batch), log_ratio, mask, **metrics)


class GPGPolicyLoss(AggregatedLoss):
    """Group policy gradient's loss (Chu et al. 2025, arXiv:2504.02546; verl
    ``compute_policy_loss_gpg``): plain REINFORCE on the advantages, ``l = -A * logp``, no
    ratio and no clipping."""

    name = "gpg"
    vanishes_at_zero_advantage = True

    def scale(self) -> float:
        return 1.0

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        advantages = required(batch, "advantages", self.name)
        loss = self.aggregate(-advantages * logprobs.float(), batch) * self.scale()
        return loss, {"pg_loss": loss.item()}


class OPMDPolicyLoss(GPGPolicyLoss):
    """Online policy mirror descent loss (Trinity-RFT ``opmd``; arXiv:2509.24203).

    ``l = -A * logp / (1 + tau)``: a REINFORCE-style loss on OPMD advantages, scaled by the
    strength ``tau`` of the KL regulariser towards the previous policy.
    """

    name = "opmd"

    class Args(GPGPolicyLoss.Args):
        tau: float = Field(1.0, ge=0, description="strength of the regulariser towards the previous policy")

    def scale(self) -> float:
        return 1.0 / (1.0 + self.args.tau)


class ImportanceSamplingLoss(AggregatedLoss):
    """Importance-sampled policy gradient without clipping (Trinity-RFT
    ``importance_sampling``, the loss of on-policy distillation): ``l = -A * r`` with the
    log-ratio clamped to [-20, 20]."""

    name = "importance_sampling"
    vanishes_at_zero_advantage = True

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = clamped_log_ratio(logprobs, old)
        ratio = torch.exp(log_ratio)
        loss = self.aggregate(-advantages * ratio, batch)
        return self.result(loss, log_ratio, mask, ratio_mean=masked_mean(ratio.detach(), mask).item())


class SPPOPolicyLoss(AggregatedLoss):
    """sPPO (Vaswani et al. 2021, arXiv:2108.05828; Trinity-RFT ``sppo``): the log-ratio as the
    surrogate, ``l = -A * (logp - logp_old)``, on the tokens whose ratio lies in
    ``[1 / (1 + epsilon), 1 + epsilon]`` (0 elsewhere)."""

    name = "sppo"
    vanishes_at_zero_advantage = True

    class Args(AggregatedLoss.Args):
        epsilon: float = Field(0.3, gt=0, description="the ratio's trust range [1/(1+eps), 1+eps]")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = logprobs - old
        ratio = torch.exp(log_ratio.detach())
        inside = (ratio >= 1 / (1 + self.args.epsilon)) & (ratio <= 1 + self.args.epsilon)
        loss = self.aggregate(-advantages * log_ratio * inside, batch)
        return loss, {"pg_loss": loss.item(), "pg_clipfrac": masked_mean((~inside).float(), mask).item()}


class TOPRPolicyLoss(AggregatedLoss):
    """Tapered off-policy REINFORCE (Le Roux et al. 2025, arXiv:2503.14286; Trinity-RFT ``topr``).

    ``l = -sg[alpha] * A * logp`` with ``alpha = 1`` where ``A > advantage_threshold`` and the
    importance ratio truncated to [0, 1] elsewhere, so bad off-policy samples cannot blow up.
    The ratio is the token's (``ratio_level: token``, Trinity-RFT) or the sequence's
    ``exp(sum_t(logp - logp_old))`` (``sequence``, the paper). ``pg_clipfrac``: share of the
    tokens whose ratio was truncated.
    """

    name = "topr"
    vanishes_at_zero_advantage = True

    class Args(AggregatedLoss.Args):
        advantage_threshold: float = Field(0.0, description="advantages at or below it are tapered")
        ratio_level: Literal["token", "sequence"] = Field("token", description="the ratio that tapers")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = logprobs.detach() - old
        if self.args.ratio_level == "sequence":
            log_ratio = masked_sum(log_ratio, mask, dim=-1)[:, None].expand_as(mask)
        tapered = advantages <= self.args.advantage_threshold
        alpha = torch.where(tapered, torch.exp(log_ratio.clamp(max=0.0)), 1.0)
        return self.result(
            self.aggregate(-alpha * advantages * logprobs, batch),
            logprobs.detach() - old,
            mask,
            avg_alpha=masked_mean(alpha, mask).item(),
            pg_clipfrac=masked_mean((tapered & (log_ratio > 0)).float(), mask).item(),
        )


class M2POPolicyLoss(AggregatedLoss):
    """Second-moment trust policy optimisation (M2PO; Zheng et al. 2025, arXiv:2510.01161;
    Trinity-RFT ``m2po``): ``l = -M A r`` aggregated over all valid tokens (token-mean), where
    the mask ``M`` drops, among the tokens PPO's clip would act on (``A > 0, r > 1`` or
    ``A < 0, r < 1``), those with the largest ``(log r)^2`` until the mean second moment of
    the rest is at most ``m2_threshold`` (Algorithm 1). ``r``'s log is clamped to
    ``+-log_ratio_clip`` in the forward pass only.

    The mask is chosen over the whole step's batch, as upstream does: the trainer's
    ``prepare`` runs the actor over the batch (one no-grad forward pass) and stores it as
    ``batch.m2po_mask``; a batch without one (an engine called directly) is masked over the
    rows the loss is given.
    """

    name = "m2po"
    vanishes_at_zero_advantage = True

    class Args(PluginArgs):
        m2_threshold: float = Field(0.04, ge=0, description="bound on the mean squared log-ratio")
        loss_agg_mode: Literal["token-mean"] = Field("token-mean", description="the paper's token mean")
        log_ratio_clip: float = Field(20.0, gt=0, description="forward-pass clamp of the log-ratio")

    def prepare(self, batch: Batch, current_logprobs: Callable[[Batch], torch.Tensor]) -> tuple[Batch, Metrics]:
        logprobs, old, advantages, mask = self.inputs(current_logprobs(batch), batch)
        keep, metrics = self.mask(logprobs - old, advantages, mask)
        return batch.with_fields(m2po_mask=keep), {f"m2po/{k}": v for k, v in metrics.items()}

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        log_ratio = logprobs - old
        metrics: Metrics = {}
        if batch.m2po_mask is None:
            keep, metrics = self.mask(log_ratio.detach(), advantages, mask)
        else:
            keep = batch.m2po_mask.bool()
        limit = self.args.log_ratio_clip
        stable = log_ratio + (log_ratio.clamp(-limit, limit) - log_ratio).detach()
        ratio = torch.exp(stable)
        loss = self.aggregate(torch.where(keep, -advantages * ratio, 0.0), batch)
        return self.result(loss, stable, mask, ratio_mean=masked_mean(ratio.detach(), mask).item(), **metrics)

    def mask(
        self, log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Metrics]:
        """M2PO's Algorithm 1: the tokens kept (bool ``[B, R]``) and the masking metrics."""
        valid = mask > 0
        trust = valid & (((advantages > 0) & (log_ratio > 0)) | ((advantages < 0) & (log_ratio < 0)))
        moments = log_ratio.square()[trust]
        keep = valid.clone()
        kept = torch.ones_like(moments, dtype=torch.bool)
        before = moments.mean().item() if moments.numel() else 0.0
        if moments.numel() and before > self.args.m2_threshold:
            ordered, order = torch.sort(moments, stable=True)
            running = ordered.cumsum(0) / torch.arange(1, ordered.numel() + 1, device=ordered.device)
            kept[order[int((running <= self.args.m2_threshold).sum()) :]] = False
            keep[trust] = kept
        n_valid = max(int(valid.sum()), 1)
        return keep, {
            "m2_before": before,
            "m2_after": moments[kept].mean().item() if kept.any() else 0.0,
            "masked_fraction": int((~kept).sum()) / n_valid,
            "trust_region_fraction": moments.numel() / n_valid,
        }


class RECPolicyLoss(AggregatedLoss):
    """The REC family (Yao et al. 2025, "Group-relative REINFORCE is secretly an off-policy
    algorithm", arXiv:2509.24203; Trinity-RFT ``rec``): ``l = -A' * logp * [in range]``
    (+ regulariser), token-mean (``seq-mean-token-mean`` for ``gspo-one-side``).

    ``clip_mode`` decides which tokens train, by the detached ratio ``r``: ``none`` all;
    ``two-side`` ``1 - eps_low <= r <= 1 + eps_high``; ``one-side`` ``r <= 1 + eps_high``
    for ``A >= 0`` or ``r >= 1 - eps_low`` for ``A <= 0``; ``gspo-one-side`` the same with
    the sequence's length-normalised ratio; ``ring`` the two-side band or, beyond the outer
    ranges, ``r <= 1 - eps_low'`` for ``A >= 0`` and ``r >= 1 + eps_high'`` for ``A <= 0``.
    ``weight`` makes ``A'``: ``A`` (none), ``A r`` (importance_sampling), ``A s``
    (gspo_importance_sampling), ``A exp(A / temp)`` (advantage). ``regularizer`` adds
    ``coef * (logp - logp_old)^2`` (k2) or subtracts ``coef * logp`` (forward-kl).
    """

    name = "rec"

    class Args(PluginArgs):
        epsilon_low: float = Field(0.2, gt=0, le=1, description="inner lower range: 1 - eps_low")
        epsilon_high: float = Field(0.2, gt=0, description="inner upper range: 1 + eps_high")
        epsilon_low_prime: float = Field(0.6, gt=0, le=1, description="ring's outer lower range")
        epsilon_high_prime: float = Field(2.0, gt=0, description="ring's outer upper range")
        clip_mode: Literal["none", "one-side", "gspo-one-side", "two-side", "ring"] = Field(
            "none", description="which tokens train, by their ratio"
        )
        weight: Literal["none", "importance_sampling", "gspo_importance_sampling", "advantage"] = Field(
            "none", description="how the advantage is reweighted"
        )
        regularizer: Literal["none", "k2", "forward-kl"] = Field("none", description="an extra regulariser")
        regularizer_coef: float = Field(0.0, ge=0, description="weight of the regulariser")
        temp: float = Field(1.0, gt=0, description="temperature of the advantage weight")

    @property
    def loss_agg_mode(self) -> str:
        return "seq-mean-token-mean" if self.args.clip_mode == "gspo-one-side" else "token-mean"

    @property
    def vanishes_at_zero_advantage(self) -> bool:  # type: ignore[override]
        return self.args.regularizer == "none" or self.args.regularizer_coef == 0

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs, old, advantages, mask = self.inputs(logprobs, batch)
        args = self.args
        ratio = torch.exp(logprobs - old).detach()
        seq_ratio = torch.exp(masked_mean(logprobs.detach() - old, mask, dim=-1))[:, None]
        positive, negative = advantages >= 0, advantages <= 0
        low, high = 1 - args.epsilon_low, 1 + args.epsilon_high
        if args.clip_mode == "two-side":
            inside = (ratio >= low) & (ratio <= high)
        elif args.clip_mode == "one-side":
            inside = (positive & (ratio <= high)) | (negative & (ratio >= low))
        elif args.clip_mode == "gspo-one-side":
            inside = (positive & (seq_ratio <= high)) | (negative & (seq_ratio >= low))
        elif args.clip_mode == "ring":
            inside = (
                ((ratio >= low) & (ratio <= high))
                | (positive & (ratio <= 1 - args.epsilon_low_prime))
                | (negative & (ratio >= 1 + args.epsilon_high_prime))
            )
        else:
            inside = torch.ones_like(mask, dtype=torch.bool)
        weighted = {
            "none": advantages,
            "importance_sampling": advantages * ratio,
            "gspo_importance_sampling": advantages * seq_ratio,
            "advantage": advantages * torch.exp(advantages / args.temp),
        }[args.weight]
        losses = -weighted * logprobs * inside
        if args.regularizer == "forward-kl":
            losses = losses - args.regularizer_coef * logprobs
        elif args.regularizer == "k2":
            losses = losses + args.regularizer_coef * (logprobs - old).square()
        loss = self.aggregate(losses, batch)
        return loss, {"pg_loss": loss.item(), "pg_clipfrac": masked_mean((~inside).float(), mask).item()}
