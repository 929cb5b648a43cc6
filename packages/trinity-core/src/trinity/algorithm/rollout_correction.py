"""Rollout correction (verl 0.9's ``rollout_corr_helper``): the rollout engine's logprobs and the
trainer's differ (bf16 vs fp32 kernels, stale weights), so the policy gradient is off-policy.

With ``log r = logp_train - logp_rollout`` per token: importance weights (``rollout_is``, TIS or
IcePop), rejection of tokens or sequences by a divergence statistic (``rollout_rs``) and off-policy
metrics under ``rollout_corr/``. *Decoupled* mode corrects the whole batch once before advantages
(``RolloutCorrector.apply_to_batch``); *bypass* mode corrects inside the loss, per micro-batch
(``RolloutCorrector.bypass_loss``). Semantics, presets and modes: ``docs/algorithms.md``; checked
to 1e-5 against verl's recorded outputs (``tests/algorithm/test_rollout_correction.py``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trinity.algorithm.base import Metrics
from trinity.algorithm.utils import agg_loss
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.schema import (
    RolloutCorrectionConfig,
    parse_is_threshold,
    parse_rs_options,
    parse_rs_thresholds,
)

if TYPE_CHECKING:
    from trinity.config.schema import Config

torch = lazy_module("torch")

SAFETY_BOUND = 20.0
"""Log-ratios are clamped to +-20 before ``exp`` (verl's bound)."""
PREFIX = "rollout_corr/"


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """verl's ``masked_mean``: ``sum(v * m) / (sum(m) + 1e-8)`` (NaN off the mask ignored)."""
    kept = torch.where(mask.bool(), values, 0.0) * mask
    total = kept.sum() if dim is None else kept.sum(dim)
    return total / ((mask.sum() if dim is None else mask.sum(dim)) + 1e-8)


def _sum(values: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(dim)


def _masked_extreme(values: torch.Tensor, mask: torch.Tensor, largest: bool) -> float:
    fill = -math.inf if largest else math.inf
    filled = values.masked_fill(~mask.bool(), fill)
    return float(filled.max() if largest else filled.min())


def _spread(values: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> float:
    """verl's std of a statistic clamped to ``[low, high]`` (0 with at most one token)."""
    if mask.sum() <= 1:
        return 0.0
    clamped = values.clamp(min=low, max=high)
    mean = _mean(clamped, mask)
    return float(torch.sqrt(torch.clamp(_mean(clamped.square(), mask) - mean.square(), min=0.0)))


def is_weights(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    level: str = "token",
    threshold: float | str = 2.0,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, Metrics]:
    """Importance weights ``[B, R]`` (0 off the mask, no gradient) and their ``rollout_is_*``
    metrics; verl's ``compute_rollout_correction_weights``."""
    if level not in ("token", "sequence"):
        raise ValueError(f"rollout_is must be 'token' or 'sequence', not {level!r}")
    log_ratio, mask = _wide(log_ratio.detach()), _wide(mask)
    upper, lower = parse_is_threshold(threshold)
    if level == "token":
        log_stat = log_ratio
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        log_stat = _sum(log_ratio, mask)[:, None]
        raw = torch.exp(log_stat.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    metrics = _is_metrics(weights, raw, log_stat, mask, level, upper, lower)
    if lower is not None:
        metrics["rollout_is_oob_ratio"] = float(_mean(((raw < lower) | (raw > upper)).to(mask.dtype), mask))
    if batch_normalize:
        if level == "token":
            mean = _mean(weights, mask)
        else:
            rows = (mask.sum(-1) > 0).to(weights.dtype)
            mean = (_mean(weights, mask, dim=-1) * rows).sum() / rows.sum().clamp_min(1e-8)
        if mean > 1e-8:
            weights = weights / mean
            metrics["rollout_is_batch_norm_factor"] = float(mean)
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


def _is_metrics(
    weights: torch.Tensor,
    raw: torch.Tensor,
    log_stat: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    upper: float,
    lower: float | None,
) -> Metrics:
    """verl's ``compute_is_metrics``."""
    if not mask.any():
        raise ValueError("rollout correction needs at least one response token")
    lower = 1.0 / upper if lower is None else lower
    metrics: Metrics = {"rollout_is_mean": float(_mean(weights, mask))}
    if level == "sequence":
        metrics["rollout_is_max"] = math.exp(min(float(log_stat.max()), SAFETY_BOUND))
        metrics["rollout_is_min"] = math.exp(float(log_stat.min()))
        metrics["rollout_is_ratio_fraction_high"] = float((log_stat > math.log(upper)).float().mean())
        metrics["rollout_is_ratio_fraction_low"] = float((log_stat < math.log(lower)).float().mean())
    else:
        metrics["rollout_is_ratio_fraction_high"] = float(_mean((raw > upper).to(mask.dtype), mask))
        metrics["rollout_is_ratio_fraction_low"] = float(_mean((raw < lower).to(mask.dtype), mask))
        metrics["rollout_is_max"] = _masked_extreme(weights, mask, largest=True)
        metrics["rollout_is_min"] = _masked_extreme(weights, mask, largest=False)
    metrics["rollout_is_std"] = _spread(weights, mask, 0.0, upper)
    bounded = weights.clamp(min=0.0, max=upper)
    normalised = bounded / (_mean(bounded, mask) + 1e-8)
    metrics["rollout_is_eff_sample_size"] = 1.0 / float(_mean(normalised.square(), mask))
    rows = _mean(weights, mask, dim=-1)
    metrics["rollout_is_seq_mean"] = float(rows.mean())
    metrics["rollout_is_seq_std"] = float(rows.std()) if rows.numel() > 1 else 0.0
    metrics["rollout_is_seq_max"] = float(rows.max())
    metrics["rollout_is_seq_min"] = float(rows.min())
    metrics["rollout_is_seq_max_deviation"] = float((rows - 1.0).abs().max())
    raw_rows = _mean(raw, mask, dim=-1)
    metrics["rollout_is_seq_fraction_high"] = float((raw_rows > upper).float().mean())
    metrics["rollout_is_seq_fraction_low"] = float((raw_rows < lower).float().mean())
    return metrics


def _sequence_stat(option: str, token_stat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if option.startswith("seq_sum"):
        return _sum(token_stat, mask)
    if option.startswith("seq_mean"):
        return _mean(token_stat, mask, dim=-1)
    peak = token_stat.masked_fill(~mask.bool(), -math.inf).max(dim=-1).values
    return torch.where(peak == -math.inf, torch.zeros_like(peak), peak)


def rejection_mask(
    log_ratio: torch.Tensor, mask: torch.Tensor, options: str, threshold: float | str | None
) -> tuple[torch.Tensor, Metrics]:
    """The response mask with rejected tokens/sequences zeroed and the ``rollout_rs_*`` metrics;
    verl's ``compute_rollout_rejection_mask`` (every criterion must pass)."""
    if threshold is None:
        raise ValueError("rollout_rs needs rollout_rs_threshold")
    if log_ratio.shape[0] == 0:
        return mask, {}
    names = parse_rs_options(options)
    bounds = parse_rs_thresholds(names, threshold)
    log_ratio, wide_mask = _wide(log_ratio.detach()), _wide(mask)
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    token_stats = {"k1": -safe, "k2": 0.5 * safe.square(), "k3": torch.exp(safe) - 1.0 - safe}
    valid = wide_mask.bool()
    rows_valid = wide_mask.sum(-1) > 0
    combined = torch.ones_like(wide_mask)
    metrics: Metrics = {}
    for name in names:
        lower, upper = bounds[name]
        ratio_bounds = name.endswith("k1")
        high = math.log(upper) if ratio_bounds else upper
        low = math.log(lower) if ratio_bounds else 0.0
        token_stat = token_stats[name[-2:]]
        if name.startswith("token"):
            per_seq = None
            stat = token_stat
        else:
            per_seq = _sequence_stat(name, token_stat, wide_mask)
            stat = per_seq[:, None].expand_as(wide_mask)
        keep = stat <= high
        if ratio_bounds:
            keep = keep & (stat >= low)
        metrics.update(_rs_metrics(name, stat, wide_mask, rows_valid, per_seq, high, low, ratio_bounds))
        keep_mask = keep.to(wide_mask.dtype)
        combined = combined * keep_mask
        kept_rows = (~(~keep & valid)).all(dim=-1).to(wide_mask.dtype)
        metrics[f"rollout_rs_{name}_masked_fraction"] = float(_mean(1 - keep_mask, wide_mask))
        rows = rows_valid.to(wide_mask.dtype)
        metrics[f"rollout_rs_{name}_seq_masked_fraction"] = (
            float(((1.0 - kept_rows) * rows).sum() / rows.sum()) if rows.sum() > 0 else 0.0
        )
    metrics["rollout_rs_masked_fraction"] = float(_mean(1 - combined, wide_mask))
    metrics["rollout_rs_seq_masked_fraction"] = float((~((combined > 0.5) & valid) & valid).any(-1).float().mean())
    return (mask * combined).to(mask.dtype), metrics


def _rs_metrics(
    name: str,
    stat: torch.Tensor,
    mask: torch.Tensor,
    rows_valid: torch.Tensor,
    per_seq: torch.Tensor | None,
    high: float,
    low: float,
    lower_bound: bool,
) -> Metrics:
    """verl's ``compute_rs_metrics`` of one criterion."""
    if not mask.any():
        raise ValueError("rollout correction needs at least one response token")
    prefix = f"rollout_rs_{name}"
    seq = (per_seq if per_seq is not None else _mean(stat, mask, dim=-1))[rows_valid]
    by_sequence = per_seq is not None and seq.numel() > 0
    metrics: Metrics = {f"{prefix}_mean": float(_mean(stat, mask))}
    if by_sequence:
        metrics[f"{prefix}_max"], metrics[f"{prefix}_min"] = float(seq.max()), float(seq.min())
        metrics[f"{prefix}_fraction_high"] = float((seq > high).float().mean())
        metrics[f"{prefix}_fraction_low"] = float((seq < low).float().mean()) if lower_bound else 0.0
    else:
        metrics[f"{prefix}_max"] = _masked_extreme(stat, mask, largest=True)
        metrics[f"{prefix}_min"] = _masked_extreme(stat, mask, largest=False)
        metrics[f"{prefix}_fraction_high"] = float(_mean((stat > high).to(mask.dtype), mask))
        metrics[f"{prefix}_fraction_low"] = float(_mean((stat < low).to(mask.dtype), mask)) if lower_bound else 0.0
    metrics[f"{prefix}_std"] = _spread(stat, mask, low if lower_bound else 0.0, high)
    if seq.numel() > 0:
        metrics[f"{prefix}_seq_mean"] = float(seq.mean())
        metrics[f"{prefix}_seq_std"] = float(seq.std()) if seq.numel() > 1 else 0.0
        metrics[f"{prefix}_seq_max"], metrics[f"{prefix}_seq_min"] = float(seq.max()), float(seq.min())
        metrics[f"{prefix}_seq_max_deviation"] = float(seq.abs().max())
        metrics[f"{prefix}_seq_fraction_high"] = float((seq > high).float().mean())
        if lower_bound:
            metrics[f"{prefix}_seq_fraction_low"] = float((seq < low).float().mean())
    else:
        for key in ("mean", "std", "max", "min", "max_deviation", "fraction_high", "fraction_low"):
            metrics[f"{prefix}_seq_{key}"] = 0.0
    return metrics


def offpolicy_metrics(old: torch.Tensor, rollout: torch.Tensor | None, mask: torch.Tensor) -> Metrics:
    """KL, perplexities and chi-square between the trainer's and the rollout's logprobs (verl's
    ``compute_offpolicy_metrics``; no prefix)."""
    if not mask.any():
        raise ValueError("rollout correction needs at least one response token")
    old, mask = _wide(old.detach()), _wide(mask)
    train_mean = _mean(old, mask, dim=-1)
    metrics: Metrics = {
        "training_ppl": float(torch.exp(-train_mean).mean()),
        "training_log_ppl": float((-train_mean).mean()),
    }
    if rollout is None:
        return metrics
    rollout = _wide(rollout.detach())
    log_ratio = old - rollout
    metrics["kl"] = float(_mean(rollout - old, mask))
    metrics["k3_kl"] = float(_mean(torch.exp(log_ratio) - log_ratio - 1, mask))
    rollout_mean = _mean(rollout, mask, dim=-1)
    metrics["rollout_ppl"] = float(torch.exp(-rollout_mean).mean())
    metrics["rollout_log_ppl"] = float((-rollout_mean).mean())
    diff = rollout_mean - train_mean
    metrics["log_ppl_diff"] = float(diff.mean())
    metrics["log_ppl_abs_diff"] = float(diff.abs().mean())
    metrics["log_ppl_diff_max"] = float(diff.max())
    metrics["log_ppl_diff_min"] = float(diff.min())
    metrics["ppl_ratio"] = float(torch.exp(diff).mean())
    rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    metrics["chi2_token"] = float(_mean(rho.square(), mask) - 1.0)
    seq_log = _sum(log_ratio, mask).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    metrics["chi2_seq"] = float(torch.exp(2.0 * seq_log).mean() - 1.0)
    return metrics


def correct(
    old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, settings: RolloutCorrectionConfig
) -> tuple[torch.Tensor | None, torch.Tensor, Metrics]:
    """``(weights or None, response mask after rejection, rollout_corr/* metrics)`` of the trainer's
    logprobs ``old`` against the rollout's; verl's ``compute_rollout_correction_and_rejection_mask``."""
    if not mask.any():
        raise ValueError("rollout correction needs at least one response token")
    if old.shape != rollout.shape or old.shape != mask.shape:
        raise ValueError(f"logprob shapes {tuple(old.shape)}, {tuple(rollout.shape)} and mask {tuple(mask.shape)}")
    log_ratio = old.detach() - rollout.detach()
    metrics: Metrics = {}
    weights = None
    if settings.rollout_is is not None and settings.rollout_is_threshold is not None:
        weights, is_metrics = is_weights(
            log_ratio, mask, settings.rollout_is, settings.rollout_is_threshold, settings.rollout_is_batch_normalize
        )
        metrics.update(is_metrics)
    kept = mask.clone()
    if settings.rollout_rs is not None:
        kept, rs_metrics = rejection_mask(log_ratio, mask, settings.rollout_rs, settings.rollout_rs_threshold)
        metrics.update(rs_metrics)
    metrics.update(offpolicy_metrics(old, rollout, mask))
    return weights, kept, {f"{PREFIX}{key}": value for key, value in metrics.items()}


def token_staleness_metrics(log_ratio: torch.Tensor, mask: torch.Tensor, batch: Batch) -> Metrics:
    """With partial rollout (``batch.token_versions``): the tokens' share and mean ``|log r|`` by how
    many weight versions behind the trainer's each token's sampling weights are,
    ``rollout_corr/token_fraction/staleness_K`` and ``rollout_corr/abs_log_ratio/staleness_K``.
    Each token's rollout logprob is its own weights', so the weights above already correct it alone."""
    if batch.token_versions is None or batch.global_steps is None:
        return {}
    staleness = (batch.global_steps[:, None] - 1 - batch.token_versions).to(log_ratio.device)
    mask = mask.bool()
    total = int(mask.sum())
    metrics: Metrics = {}
    for value in torch.unique(staleness[mask]).tolist():
        tokens = mask & (staleness == value)
        metrics[f"{PREFIX}token_fraction/staleness_{value}"] = int(tokens.sum()) / total
        metrics[f"{PREFIX}abs_log_ratio/staleness_{value}"] = float(log_ratio.detach()[tokens].abs().mean())
    return metrics


def reinforce_loss(
    logprobs: torch.Tensor, batch: Batch, weights: torch.Tensor | None, mode: str
) -> tuple[torch.Tensor, Metrics]:
    """verl's ``compute_policy_loss_reinforce``: ``agg(-A log p w)`` over the (rejection-masked)
    response mask; ``ppo_kl`` is the mean ``logp_rollout - logp`` (the rollout's are ``old_logprobs``)."""
    mask = batch.response_mask.float()
    advantages = torch.where(mask.bool(), batch.advantages.float(), 0.0)
    losses = -advantages * logprobs.float()
    if weights is not None:
        losses = losses * weights.to(losses.dtype)
    if batch.sample_weights is not None:
        losses = losses * batch.sample_weights.float()[:, None]
    loss = agg_loss(losses, mask, mode)
    kl = _mean(batch.old_logprobs.float() - logprobs.detach().float(), mask)
    return loss, {"pg_loss": loss.item(), "ppo_kl": float(kl)}


class RolloutCorrector:
    """``algorithm.rollout_correction`` at work: the trainer's batch correction (decoupled mode)
    and the policy loss of bypass mode."""

    def __init__(self, settings: RolloutCorrectionConfig, bypass: bool) -> None:
        self.settings = settings
        self.bypass = bypass

    @classmethod
    def from_config(cls, config: Config) -> RolloutCorrector | None:
        """The corrector of ``config`` (after the check pass), None without ``rollout_correction``."""
        settings = config.algorithm.rollout_correction
        if settings is None:
            return None
        bypass = settings.bypass_mode if settings.bypass_mode is not None else config.algorithm.bypass_old_logprobs
        return cls(settings, bypass)

    def apply_to_batch(self, batch: Batch) -> tuple[Batch, Metrics]:
        """Decoupled mode: weights into ``batch.rollout_is_weights`` and rejections out of
        ``batch.response_mask``, from the recomputed ``old_logprobs`` against ``rollout_logprobs``.
        Expert rows of a mixed batch (SFT data, no rollout logprobs) are left as they are."""
        if self.bypass or not batch.batch_size:
            return batch, {}
        if batch.rollout_logprobs is None or batch.old_logprobs is None:
            raise ValueError(
                "algorithm.rollout_correction needs the rollout engine's logprobs in the experiences "
                "(Experience.logprobs)"
            )
        rows = torch.ones(batch.batch_size, dtype=torch.bool)
        if batch.is_expert is not None:
            rows = ~batch.is_expert.bool().cpu()
        if not rows.any() or not batch.response_mask[rows].any():
            return batch, {}
        mask = batch.response_mask[rows]
        weights, kept, metrics = correct(batch.old_logprobs[rows], batch.rollout_logprobs[rows], mask, self.settings)
        log_ratio = batch.old_logprobs[rows] - batch.rollout_logprobs[rows]
        metrics.update(token_staleness_metrics(log_ratio, mask, batch.select(torch.nonzero(rows).squeeze(-1))))
        new_mask = batch.response_mask.clone()
        new_mask[rows] = kept.to(new_mask.dtype)
        changes: dict[str, Any] = {"response_mask": new_mask}
        if weights is not None:
            all_weights = torch.ones_like(batch.response_mask, dtype=torch.float32)
            all_weights[rows] = weights.float()
            changes["rollout_is_weights"] = all_weights
        return batch.with_fields(**changes), metrics

    def bypass_loss(self, policy: Any, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        """Bypass mode's policy loss on a micro-batch (verl's ``bypass_mode`` loss): the correction
        of the current logprobs against the rollout's (``old_logprobs``), then ``ppo_clip`` (the
        configured policy loss, no weights) or ``reinforce`` (``-w A log p``) under the rejection mask."""
        mask = batch.response_mask
        if not mask.any():
            return policy(logprobs, batch)
        with torch.no_grad():
            weights, kept, metrics = correct(logprobs.detach(), batch.old_logprobs, mask, self.settings)
            metrics.update(token_staleness_metrics(logprobs.detach() - batch.old_logprobs, mask, batch))
        masked = batch.with_fields(response_mask=kept.to(mask.dtype))
        if self.settings.loss_type == "reinforce":
            mode = getattr(policy, "loss_agg_mode", None) or "token-mean"
            loss, pg_metrics = reinforce_loss(logprobs, masked, weights, mode)
        else:
            loss, pg_metrics = policy(logprobs, masked)
        return loss, {**pg_metrics, **metrics}
