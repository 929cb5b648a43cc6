"""Losses on demonstrations: SFT and its token-weighted forms, DPO on preference pairs, and the
mixed losses that train rollouts by RL and expert rows (``batch.is_expert``) by SFT.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

from pydantic import Field

from trinity.algorithm.base import Metrics, PolicyLossFn
from trinity.algorithm.policy_loss import AggregatedLoss, PPOPolicyLoss, required
from trinity.algorithm.utils import LossAggMode, masked_sum
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs, derived

torch = lazy_module("torch")
F = lazy_module("torch.nn.functional")


class SFTLoss(AggregatedLoss):
    """Supervised fine-tuning: negative log-likelihood ``l = -logp`` of the response tokens."""

    name = "sft"

    def token_weights(self, logprobs: torch.Tensor) -> torch.Tensor | float:
        """A detached weight per token (1 for plain SFT)."""
        return 1.0

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        logprobs = logprobs.float()
        loss = self.aggregate(-self.clamped(logprobs) * self.token_weights(logprobs.detach()), batch)
        return loss, {f"{self.name}_loss": loss.item()}

    def clamped(self, logprobs: torch.Tensor) -> torch.Tensor:
        return logprobs


class SFTISLoss(SFTLoss):
    """SFT weighted by the token's own probability, ``l = -sg[p] * logp`` (CHORD's importance-
    sampled SFT; Zhang et al. 2025, arXiv:2508.11408; Trinity-RFT ``sft_is``): tokens the
    policy already finds unlikely pull less."""

    name = "sft_is"

    def token_weights(self, logprobs: torch.Tensor) -> torch.Tensor:
        return logprobs.exp()


class SFTPhiLoss(SFTLoss):
    """SFT weighted by ``phi(p) = p (1 - p)`` (CHORD's token-wise weighting, arXiv:2508.11408;
    Trinity-RFT ``sft_phi``): ``l = -sg[phi(p)] * min(logp, log cutoff_prob)``, which damps
    both tokens the policy is sure of and tokens far from it."""

    name = "sft_phi"

    class Args(SFTLoss.Args):
        cutoff_prob: float = Field(1.0, gt=0, le=1, description="logp is capped at log(cutoff_prob)")

    def token_weights(self, logprobs: torch.Tensor) -> torch.Tensor:
        prob = logprobs.exp()
        return prob * (1 - prob)

    def clamped(self, logprobs: torch.Tensor) -> torch.Tensor:
        if self.args.cutoff_prob < 1.0:
            return logprobs.clamp(max=math.log(self.args.cutoff_prob))
        return logprobs


class DPOLoss(PolicyLossFn):
    """Direct preference optimisation (Rafailov et al. 2023, arXiv:2305.18290; TRL's
    ``DPOTrainer`` for ``label_smoothing``, the cDPO variant).

    Rows come in pairs, chosen at even and rejected at odd index. With sequence log-ratios
    ``h = sum_t(logp - logp_ref)``, ``z = beta * (h_chosen - h_rejected)`` and
    ``loss = mean(-(1 - ls) * log sigmoid(z) - ls * log sigmoid(-z))``. Needs
    ``batch.ref_logprobs``. Metrics: ``dpo_loss``, ``chosen_reward``, ``rejected_reward``
    (``beta * h``), ``accuracy`` (share of pairs with ``z > 0``).
    """

    class Args(PluginArgs):
        beta: float = Field(0.1, gt=0, description="inverse temperature of the implicit reward")
        label_smoothing: float = Field(0.0, ge=0, le=0.5, description="assumed share of flipped labels (cDPO)")

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        if batch.batch_size % 2:
            raise ValueError(f"dpo needs chosen/rejected row pairs, got {batch.batch_size} rows")
        mask = batch.response_mask.float()
        ref = required(batch, "ref_logprobs", "dpo")
        rewards = self.args.beta * masked_sum(logprobs.float() - ref, mask, dim=-1)
        chosen, rejected = rewards[0::2], rewards[1::2]
        margin = chosen - rejected
        smoothing = self.args.label_smoothing
        loss = (-(1 - smoothing) * F.logsigmoid(margin) - smoothing * F.logsigmoid(-margin)).mean()
        return loss, {
            "dpo_loss": loss.item(),
            "chosen_reward": chosen.mean().item(),
            "rejected_reward": rejected.mean().item(),
            "accuracy": (margin > 0).float().mean().item(),
        }


class _MixedLoss(PolicyLossFn):
    """``(1 - mu) * ppo(rollout rows) + mu * sft(expert rows)``; subclasses decide ``mu``."""

    class Args(PPOPolicyLoss.Args):
        grpo_loss_agg_mode: LossAggMode | None = Field(None, description="the RL part's own loss_agg_mode")
        sft_loss_agg_mode: LossAggMode | None = Field(None, description="the SFT part's own loss_agg_mode")
        # Trinity-RFT's trainer fills these (its micro-batch bookkeeping); here each part is weighed by its own
        # rows and tokens in the batch, so trinity derives them: a value in the file is replaced, with a warning.
        use_dynamic_bsz: bool | None = derived(None, "Trinity-RFT's dynamic batching flag")
        ppo_mini_batch_size: int = derived(1, "Trinity-RFT's mini-batch size", ge=1)
        ppo_micro_batch_size_per_gpu: int = derived(1, "Trinity-RFT's micro-batch size", ge=1)
        ngpus_trainer: int = derived(1, "Trinity-RFT's trainer GPUs", ge=1)
        train_batch_size_usual: int = derived(1, "Trinity-RFT's rollout rows per batch", ge=1)
        train_batch_size_expert: int = derived(1, "Trinity-RFT's expert rows per batch", ge=1)

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        ppo_args = self.args.model_dump(include=set(PPOPolicyLoss.Args.model_fields))
        ppo_args["loss_agg_mode"] = self.args.grpo_loss_agg_mode or self.args.loss_agg_mode
        self.rl = PPOPolicyLoss(**ppo_args)
        self.sft = self.sft_loss(self.args.sft_loss_agg_mode or self.args.loss_agg_mode)

    def sft_loss(self, loss_agg_mode: str) -> SFTLoss:
        """The loss of the expert rows."""
        return SFTLoss(loss_agg_mode=loss_agg_mode)

    @abstractmethod
    def mu(self, batch: Batch) -> float:
        """The SFT part's weight for this batch."""

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        mask = batch.response_mask.float()
        if batch.is_expert is None:
            expert = torch.zeros(batch.batch_size, dtype=torch.bool, device=mask.device)
        else:
            expert = batch.is_expert.bool()
        mu = self.mu(batch)
        loss = logprobs.new_zeros((), dtype=torch.float32)
        rl_metrics: Metrics = {}
        sft_metrics: Metrics = {}
        if not expert.all():
            rl_loss, rl_metrics = self.rl(logprobs, batch.with_fields(response_mask=mask * ~expert[:, None]))
            loss = loss + (1 - mu) * rl_loss
        if expert.any():
            sft_loss, sft_metrics = self.sft(logprobs, batch.with_fields(response_mask=mask * expert[:, None]))
            loss = loss + mu * sft_loss
        metrics = {f"usual/{k}": v for k, v in rl_metrics.items()}
        metrics.update({f"expert/{k}": v for k, v in sft_metrics.items()})
        return loss, {**metrics, "pg_loss": loss.item(), "mu": mu}


class MIXPolicyLoss(_MixedLoss):
    """RL on rollouts plus SFT on expert data (Trinity-RFT ``mix``; e.g. LUFFY, arXiv:2504.14945).

    ``loss = (1 - mu) * ppo(rows with not is_expert) + mu * sft(rows with is_expert)``, each
    part aggregated over its own tokens of the micro-batch (0 when it has none), with
    ``grpo_loss_agg_mode`` / ``sft_loss_agg_mode`` when set, else ``loss_agg_mode``. Metrics of
    the parts come prefixed ``usual/`` and ``expert/``; ``pg_loss`` is the total, ``mu`` the
    weight used.
    """

    class Args(_MixedLoss.Args):
        mu: float = Field(0.1, ge=0, le=1, description="weight of the SFT part")

    def mu(self, batch: Batch) -> float:
        return self.args.mu


def chord_mu(step: int, warmup: int, decay: int, peak: float, valley: float) -> float:
    """CHORD's schedule of the SFT weight: linear warm-up from 0 to ``peak`` over ``warmup``
    steps, a half cosine from ``peak`` down to ``valley`` over ``decay`` steps, then ``valley``."""
    if step < warmup:
        return step / warmup * peak
    if step >= warmup + decay:
        return valley
    return (peak - valley) * 0.5 * (1 + math.cos(math.pi * (step - warmup) / decay)) + valley


class MIXCHORDPolicyLoss(_MixedLoss):
    """CHORD (Zhang et al. 2025, "On-policy RL meets off-policy experts", arXiv:2508.11408;
    Trinity-RFT ``mix_chord``): ``mix`` with a scheduled SFT weight ``mu`` (``chord_mu`` of
    the batch's training step, ``batch.global_steps``) and, with ``enable_phi_function``,
    the expert rows trained by ``sft_phi`` (CHORD-phi) instead of plain SFT.
    """

    class Args(_MixedLoss.Args):
        mu_warmup_steps: int = Field(0, ge=0, description="steps of the linear warm-up of mu")
        mu_decay_steps: int = Field(0, ge=0, description="steps of the cosine decay of mu")
        mu_peak: float = Field(0.1, ge=0, le=1, description="mu at the end of the warm-up")
        mu_valley: float = Field(0.1, ge=0, le=1, description="mu after the decay")
        enable_phi_function: bool = Field(True, description="train expert rows with sft_phi")

    def sft_loss(self, loss_agg_mode: str) -> SFTLoss:
        return (SFTPhiLoss if self.args.enable_phi_function else SFTLoss)(loss_agg_mode=loss_agg_mode)

    def mu(self, batch: Batch) -> float:
        if batch.global_steps is None:
            raise ValueError("policy_loss_fn 'mix_chord' needs batch.global_steps (set by the sample strategies)")
        args = self.args
        step = int(batch.global_steps.max())
        return chord_mu(step, args.mu_warmup_steps, args.mu_decay_steps, args.mu_peak, args.mu_valley)
