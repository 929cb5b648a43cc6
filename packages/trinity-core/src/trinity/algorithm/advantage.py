"""Advantage functions: fill ``batch.advantages`` and ``batch.returns`` (``[B, R]``, 0 off the mask).

The sequence score of a row is ``token_level_rewards.sum(-1)`` when the batch has token-level
rewards (e.g. after a KL reward penalty), else ``rewards``. Group estimators group rows by
``group_ids`` (one task's repeats). All statistics run in float32 with scatter/index ops.

Intentional difference from verl: in every group-baseline estimator a group of one gets
advantage 0 (verl gives GRPO singletons ``score / (1 + eps)`` and RLOO singletons ``score``);
a lone sample has no baseline, so it carries no signal.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

from trinity.algorithm.base import AdvantageFn, Metrics
from trinity.algorithm.utils import (
    group_index,
    group_stats,
    group_sum,
    has_holes,
    last_token_index,
    masked_discounted_sum,
    masked_mean,
    masked_whiten,
    reverse_scan,
)
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module

torch = lazy_module("torch")


def sequence_scores(batch: Batch) -> torch.Tensor:
    """``[B]`` float32 score of each row (token-level rewards summed, else ``rewards``)."""
    if batch.token_level_rewards is not None:
        return (batch.token_level_rewards.float() * batch.response_mask.float()).sum(-1)
    return batch.rewards.float()


def token_rewards(batch: Batch) -> torch.Tensor:
    """``[B, R]`` float32 token-level rewards: the batch's own, else the sequence reward on the
    last response token (nothing for an empty response)."""
    if batch.token_level_rewards is not None:
        return batch.token_level_rewards.float()
    mask = batch.response_mask.float()
    placed = batch.rewards.float() * (mask.sum(-1) > 0)
    return torch.zeros_like(mask).scatter_(1, last_token_index(mask)[:, None], placed[:, None])


def _metrics(scores: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> Metrics:
    return {"score_mean": scores.mean().item(), "advantage_mean": masked_mean(advantages, mask).item()}


def _grpo(scores: torch.Tensor, group_ids: torch.Tensor, epsilon: float, norm_by_std: bool) -> torch.Tensor:
    count, mean, std = group_stats(scores, group_ids)
    centred = scores - mean
    if norm_by_std:
        centred = centred / (std + epsilon)
    return torch.where(count > 1, centred, torch.zeros_like(centred))


class _OutcomeAdvantage(AdvantageFn):
    """A per-sequence advantage broadcast over the response tokens (advantages == returns)."""

    @abstractmethod
    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        """``[B]`` advantage of each row from its score ``[B]``."""

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            scores = sequence_scores(batch)
            advantages = self.sequence_advantages(scores, batch)[:, None] * mask
        return batch.with_fields(advantages=advantages, returns=advantages), _metrics(scores, advantages, mask)


class GAEAdvantage(AdvantageFn):
    """PPO's generalised advantage estimation (Schulman et al. 2016, arXiv:1506.02438).

    ``delta_t = r_t + gamma * V_{t'} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t'}``,
    where ``t'`` is the next masked token (tokens off the mask, e.g. tool output, are skipped);
    returns ``A + V``; advantages whitened over the batch. Same as verl's
    ``compute_gae_advantage_return``, solved by a log-depth scan instead of a loop over tokens.
    Needs ``batch.values`` (a critic).
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"gamma": 1.0, "lam": 1.0}

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        if batch.values is None:
            raise ValueError("advantage_fn 'ppo' (GAE) needs batch.values from a critic")
        gamma, lam = float(self.args["gamma"]), float(self.args["lam"])
        mask = batch.response_mask.float()
        with torch.no_grad():
            values = batch.values.float()
            # value of the next masked token (0 past the end); a plain shift unless the mask has holes
            carried = reverse_scan(1 - mask, mask * values) if has_holes(mask) else mask * values
            next_values = torch.nn.functional.pad(carried[:, 1:], (0, 1))
            deltas = token_rewards(batch) + gamma * next_values - values
            advantages = masked_discounted_sum(deltas, mask, gamma * lam)
            returns = (advantages + values) * mask
            advantages = masked_whiten(advantages, mask) * mask
        return batch.with_fields(advantages=advantages, returns=returns), _metrics(
            sequence_scores(batch), advantages, mask
        )


class GRPOAdvantage(_OutcomeAdvantage):
    """GRPO group-normalised advantage (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300).

    ``A_i = (s_i - mean_g) / (std_g + epsilon)`` over the rows of ``i``'s group ``g``
    (unbiased std); ``norm_adv_by_std=False`` gives ``s_i - mean_g`` (Dr. GRPO,
    arXiv:2503.20783). verl: ``compute_grpo_outcome_advantage``. Groups of one get 0.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"epsilon": 1e-6, "norm_adv_by_std": True}

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        return _grpo(scores, batch.group_ids, self.args["epsilon"], self.args["norm_adv_by_std"])


class StepWiseGRPOAdvantage(_OutcomeAdvantage):
    """GRPO for multi-step workflows (Trinity-RFT ``step_wise_grpo``, after rLLM).

    Each run (``batch.run_ids``) is scored by the reward of its last step (largest
    ``step_ids``); runs of one task are normalised as in ``grpo``:
    ``A_run = (s_run - mean_g) / (std_g + epsilon)``, and every step of the run gets
    ``A_run`` (divided by the run's number of steps with ``enable_step_norm``).
    Without run ids every row is its own run, which reduces to ``grpo``.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"epsilon": 1e-6, "norm_adv_by_std": True, "enable_step_norm": False}

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        size, device = batch.batch_size, scores.device
        rows = torch.arange(size, device=device)
        run_ids = batch.run_ids if batch.run_ids is not None else rows
        steps = batch.step_ids if batch.step_ids is not None else torch.zeros_like(rows)
        run, n_runs = group_index(run_ids)
        last_step = torch.full((n_runs,), -1, dtype=steps.dtype, device=device).scatter_reduce(0, run, steps, "amax")
        # one row per run: the first row holding the run's last step
        is_last = steps == last_step[run]
        first_last = torch.full((n_runs,), size, dtype=torch.long, device=device).scatter_reduce(
            0, run[is_last], rows[is_last], "amin"
        )
        run_advantages = _grpo(
            scores[first_last], batch.group_ids[first_last], self.args["epsilon"], self.args["norm_adv_by_std"]
        )
        advantages = run_advantages[run]
        if self.args["enable_step_norm"]:
            advantages = advantages / group_sum(torch.ones_like(scores), run, n_runs)[run]
        return advantages


class RLOOAdvantage(_OutcomeAdvantage):
    """REINFORCE leave-one-out (Ahmadian et al. 2024, arXiv:2402.14740; Kool et al. 2019).

    ``A_i = s_i - mean_{j != i} s_j = n / (n - 1) * (s_i - mean_g)`` over ``i``'s group of
    size ``n``. verl: ``compute_rloo_outcome_advantage``. Groups of one get 0.
    """

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        count, mean, _ = group_stats(scores, batch.group_ids)
        return torch.where(count > 1, (scores - mean) * count / (count - 1).clamp(min=1), torch.zeros_like(scores))


class OPMDAdvantage(_OutcomeAdvantage):
    """Online policy mirror descent advantage (Trinity-RFT ``opmd``; Yao et al. 2025,
    arXiv:2509.24203).

    ``A_i = s_i - b_g`` with the group baseline ``b_g = mean_g(s)`` (``opmd_baseline="mean"``)
    or the soft baseline ``b_g = tau * log mean_g exp(s / tau)`` (``"logavgexp"``), the
    optimum of the KL-regularised objective with temperature ``tau``. Groups of one get 0.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"opmd_baseline": "mean", "tau": 1.0}

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        count, mean, _ = group_stats(scores, batch.group_ids)
        if self.args["opmd_baseline"] == "mean":
            baseline = mean
        elif self.args["opmd_baseline"] == "logavgexp":
            tau = float(self.args["tau"])
            index, n_groups = group_index(batch.group_ids)
            top = torch.full((n_groups,), -math.inf, device=scores.device).scatter_reduce(
                0, index, scores / tau, "amax"
            )[index]
            lse = group_sum(torch.exp(scores / tau - top), index, n_groups)[index].log() + top
            baseline = tau * (lse - count.log())
        else:
            raise ValueError(f"opmd_baseline must be 'mean' or 'logavgexp', got {self.args['opmd_baseline']!r}")
        return torch.where(count > 1, scores - baseline, torch.zeros_like(scores))


class AsymREAdvantage(_OutcomeAdvantage):
    """Asymmetric REINFORCE (Arnal et al. 2025, arXiv:2506.20520; Trinity-RFT ``asymre``).

    ``A_i = s_i - (mean_g(s) + baseline_shift)``: a baseline shifted below the group mean
    (``baseline_shift < 0``) weights positive samples more. Groups of one get 0.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"baseline_shift": -0.1}

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        count, mean, _ = group_stats(scores, batch.group_ids)
        return torch.where(count > 1, scores - mean - self.args["baseline_shift"], torch.zeros_like(scores))


class REINFORCEAdvantage(_OutcomeAdvantage):
    """Vanilla REINFORCE (Williams 1992): ``A_i = s_i``, no baseline."""

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        return scores


class REINFORCEPlusPlusAdvantage(AdvantageFn):
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): discounted return-to-go, whitened over the batch.

    ``G_t = r_t + gamma * G_{t'}`` (``t'`` the next masked token), ``A = whiten(G)`` over
    all masked tokens of the batch; returns ``G``. verl:
    ``compute_reinforce_plus_plus_outcome_advantage``.
    """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"gamma": 1.0}

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            returns = masked_discounted_sum(token_rewards(batch), mask, float(self.args["gamma"])) * mask
            advantages = masked_whiten(returns, mask) * mask
        return batch.with_fields(advantages=advantages, returns=returns), _metrics(
            sequence_scores(batch), advantages, mask
        )


class ReMaxAdvantage(AdvantageFn):
    """ReMax (Li et al. 2023, arXiv:2310.10505): the reward of the greedy response as baseline.

    ``G_t = sum_{k >= t} r_k`` (undiscounted return-to-go), ``A_t = G_t - b`` with
    ``b = batch.reward_baselines`` (from ``Experience.info["reward_baseline"]``); returns
    ``G``. verl: ``compute_remax_outcome_advantage`` (which leaves ``A`` unmasked).
    """

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        if batch.reward_baselines is None:
            raise ValueError("advantage_fn 'remax' needs batch.reward_baselines (info['reward_baseline'])")
        mask = batch.response_mask.float()
        with torch.no_grad():
            returns = (token_rewards(batch) * mask).flip(-1).cumsum(-1).flip(-1)
            advantages = (returns - batch.reward_baselines.float()[:, None]) * mask
        return batch.with_fields(advantages=advantages, returns=returns), _metrics(
            sequence_scores(batch), advantages, mask
        )
