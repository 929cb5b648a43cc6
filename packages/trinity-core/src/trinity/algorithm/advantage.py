"""Advantage functions: fill ``batch.advantages`` and ``batch.returns`` (``[B, R]``, 0 off the mask).

The sequence score of a row is ``token_level_rewards.sum(-1)`` when the batch has token-level
rewards (e.g. after a KL reward penalty), else ``rewards``. Group estimators group rows by
``group_ids`` (one task's repeats). All statistics run in float32 with scatter/index ops.

Intentional difference from verl and Trinity-RFT: in every group-baseline estimator a group
of one gets advantage 0 (both give it its score against a baseline of 0, e.g. GRPO
``score / (1 + eps)``); a lone sample has no baseline, so it carries no signal. The
``*_verl`` forms (``grpo_verl``, ``opmd_verl``, ``asymre_verl``) keep verl's handling.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Literal

from pydantic import Field

from trinity.algorithm.base import AdvantageFn, Metrics
from trinity.algorithm.utils import (
    group_index,
    group_max,
    group_rank,
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
from trinity.config.base import PluginArgs

torch = lazy_module("torch")

EPSILON = Field(1e-6, gt=0, description="added to the std before dividing, so equal rewards give 0, not NaN")
NORM_BY_STD = Field(True, description="divide by the group's reward std (false: Dr. GRPO, arXiv:2503.20783)")


def normalised(
    scores: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor, epsilon: float, by_scale: bool = True
) -> torch.Tensor:
    """``(scores - mean) / (scale + epsilon)``, or ``scores - mean`` when not ``by_scale``."""
    return (scores - mean) / (scale + epsilon) if by_scale else scores - mean


def batch_std(scores: torch.Tensor) -> torch.Tensor:
    """The unbiased std of all ``scores`` (Trinity-RFT's ``std_cal_level: batch``); 1 for one score."""
    return scores.std() if scores.numel() > 1 else torch.ones_like(scores)


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


def advantage_metrics(scores: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> Metrics:
    return {"score_mean": scores.mean().item(), "advantage_mean": masked_mean(advantages, mask).item()}


def keep_rows(batch: Batch, keep: torch.Tensor, index: torch.Tensor, refill: bool) -> tuple[Batch, Metrics]:
    """The rows of ``batch`` where ``keep``, whole groups at a time (``index`` = dense group of
    each row). With ``refill`` each dropped group is replaced by a copy of a kept group drawn
    at random (Polaris, hkunlp.github.io/blog/2025/Polaris), so the batch keeps its size."""
    n_groups = int(index.max()) + 1 if index.numel() else 0
    kept_groups = torch.unique(index[keep])
    dropped = n_groups - int(kept_groups.numel())
    rows = torch.nonzero(keep).squeeze(-1)
    if refill and dropped and kept_groups.numel():
        drawn = kept_groups[torch.randint(0, kept_groups.numel(), (dropped,), device=index.device)]
        copies = [torch.nonzero(index == group).squeeze(-1) for group in drawn.tolist()]
        rows = torch.cat([rows, *copies])
    metrics = {"filtered_count": float(int((~keep).sum())), "skipped_group_ratio": dropped / max(n_groups, 1)}
    return batch.select(rows), metrics


class _OutcomeAdvantage(AdvantageFn):
    """A per-sequence advantage broadcast over the response tokens (advantages == returns)."""

    def scores(self, batch: Batch) -> torch.Tensor:
        """``[B]`` score of each row the advantage is computed from."""
        return sequence_scores(batch)

    @abstractmethod
    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        """``[B]`` advantage of each row from its score ``[B]``."""

    def token_advantages(self, scores: torch.Tensor, batch: Batch, mask: torch.Tensor) -> torch.Tensor:
        """``[B, R]`` advantages: the row's advantage on each of its tokens."""
        return self.sequence_advantages(scores, batch)[:, None] * mask

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            scores = self.scores(batch)
            advantages = self.token_advantages(scores, batch, mask)
        return batch.with_fields(advantages=advantages, returns=advantages), advantage_metrics(scores, advantages, mask)


class _GroupAdvantage(_OutcomeAdvantage):
    """A baseline from the row's group (``group_ids``): groups of one get ``lone(score)``."""

    @abstractmethod
    def group_advantages(
        self, scores: torch.Tensor, count: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, batch: Batch
    ) -> torch.Tensor:
        """``[B]`` advantages from the scores and their group's size, mean and unbiased std."""

    def lone(self, scores: torch.Tensor) -> torch.Tensor:
        """The advantage of a row alone in its group: 0 (no baseline, no signal)."""
        return torch.zeros_like(scores)

    def sequence_advantages(self, scores: torch.Tensor, batch: Batch) -> torch.Tensor:
        count, mean, std = group_stats(scores, batch.group_ids)
        return torch.where(count > 1, self.group_advantages(scores, count, mean, std, batch), self.lone(scores))


class GAEAdvantage(AdvantageFn):
    """PPO's generalised advantage estimation (Schulman et al. 2016, arXiv:1506.02438).

    ``delta_t = r_t + gamma * V_{t'} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t'}``,
    where ``t'`` is the next masked token (tokens off the mask, e.g. tool output, are skipped);
    returns ``A + V``; advantages whitened over the batch. Same as verl's
    ``compute_gae_advantage_return``, solved by a log-depth scan instead of a loop over tokens.
    Needs ``batch.values`` (a critic).
    """

    class Args(PluginArgs):
        gamma: float = Field(1.0, ge=0, le=1, description="discount factor")
        lam: float = Field(1.0, ge=0, le=1, description="GAE lambda: bias-variance trade-off of the estimate")

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        if batch.values is None:
            raise ValueError("advantage_fn 'ppo' (GAE) needs batch.values from a critic")
        gamma, lam = self.args.gamma, self.args.lam
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
        return batch.with_fields(advantages=advantages, returns=returns), advantage_metrics(
            sequence_scores(batch), advantages, mask
        )


class GroupNormalisedAdvantage(_GroupAdvantage):
    """``(s_i - mean_g) / (std_g + epsilon)``, or ``s_i - mean_g`` without std normalisation."""

    class Args(PluginArgs):
        epsilon: float = EPSILON
        norm_adv_by_std: bool = NORM_BY_STD

    def group_advantages(self, scores, count, mean, std, batch):
        return normalised(scores, mean, self.scale(scores, std), self.args.epsilon, self.args.norm_adv_by_std)

    def scale(self, scores: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """What the centred scores are divided by (before ``epsilon``): the group's std."""
        return std


class GRPOAdvantage(GroupNormalisedAdvantage):
    """GRPO group-normalised advantage (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300).

    ``A_i = (s_i - mean_g) / (std_g + epsilon)`` over the rows of ``i``'s group ``g``
    (unbiased std); ``norm_adv_by_std=False`` gives ``s_i - mean_g`` (Dr. GRPO,
    arXiv:2503.20783). verl: ``compute_grpo_outcome_advantage``. Groups of one get 0.

    Trinity-RFT's options: ``std_cal_level: batch`` divides by the std of the whole batch's
    scores (group mean, batch std: arXiv:2508.08221); ``std_threshold`` drops the groups whose
    std is at most the threshold (and groups of one) from the batch, and with
    ``duplicate_experiences`` refills them by copies of kept groups (Polaris);
    ``rank_penalty`` scales each score by ``1 - rank / n * rank_penalty``, ``rank`` the row's
    place (0 = least likely) by mean old logprob within its group of ``n`` (the unlikeliness
    reward, He et al. 2025, arXiv:2506.02355). Trinity-RFT uses the penalised scores only for
    the group's mean and std and the raw reward in the numerator; here the penalised score is
    the row's score throughout, as the paper defines the reward.
    """

    class Args(GroupNormalisedAdvantage.Args):
        std_cal_level: Literal["group", "batch"] = Field("group", description="where the std comes from")
        std_threshold: float | None = Field(
            None, ge=0, description="drop groups whose reward std is at most this (and groups of one)"
        )
        duplicate_experiences: bool = Field(False, description="refill dropped groups with copies of kept ones")
        rank_penalty: float | None = Field(
            None, ge=0, le=1, description="penalise likely correct answers by their rank in the group"
        )

    def scores(self, batch: Batch) -> torch.Tensor:
        scores = sequence_scores(batch)
        if self.args.rank_penalty is None:
            return scores
        if batch.old_logprobs is None:
            raise ValueError("grpo's rank_penalty needs batch.old_logprobs")
        likelihood = masked_mean(batch.old_logprobs.float(), batch.response_mask.float(), dim=-1)
        count, _, _ = group_stats(scores, batch.group_ids)
        return scores * (1 - group_rank(likelihood, batch.group_ids) / count * self.args.rank_penalty)

    def scale(self, scores: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        return batch_std(scores) if self.args.std_cal_level == "batch" else std

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        batch, metrics = super().__call__(batch)
        if self.args.std_threshold is None:
            return batch, metrics
        count, _, std = group_stats(self.scores(batch), batch.group_ids)
        keep = (count > 1) & (std > self.args.std_threshold)
        batch, kept = keep_rows(batch, keep, group_index(batch.group_ids)[0], self.args.duplicate_experiences)
        return batch, {**metrics, **kept}


class GRPOVerlAdvantage(GroupNormalisedAdvantage):
    """GRPO exactly as verl computes it (``compute_grpo_outcome_advantage``): a group of one has
    mean 0 and std 1, so its advantage is ``score / (1 + epsilon)`` (``score`` without std
    normalisation). Trinity-RFT's ``grpo_verl``."""

    def lone(self, scores: torch.Tensor) -> torch.Tensor:
        return scores / (1 + self.args.epsilon) if self.args.norm_adv_by_std else scores


class RLOOAdvantage(_GroupAdvantage):
    """REINFORCE leave-one-out (Ahmadian et al. 2024, arXiv:2402.14740; Kool et al. 2019).

    ``A_i = s_i - mean_{j != i} s_j = n / (n - 1) * (s_i - mean_g)`` over ``i``'s group of
    size ``n``. verl: ``compute_rloo_outcome_advantage``. Groups of one get 0.
    """

    def group_advantages(self, scores, count, mean, std, batch):
        return (scores - mean) * count / (count - 1).clamp(min=1)


class REINFORCEPlusPlusBaselineAdvantage(_GroupAdvantage):
    """REINFORCE++ with a group baseline (Hu 2025, arXiv:2501.03262): ``s_i - mean_g`` on every
    token, then whitened over all masked tokens of the batch. verl:
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``. Groups of one get 0 before
    whitening."""

    def group_advantages(self, scores, count, mean, std, batch):
        return scores - mean

    def token_advantages(self, scores, batch, mask):
        return masked_whiten(super().token_advantages(scores, batch, mask), mask) * mask


class OPOAdvantage(_GroupAdvantage):
    """On-policy RL with the optimal baseline (Hao et al. 2025, arXiv:2505.23585): the baseline
    is the group's length-weighted mean score, ``b_g = sum_j |y_j| s_j / sum_j |y_j|``,
    ``A_i = s_i - b_g``. verl: ``compute_opo_outcome_advantage``. Groups of one get 0."""

    def group_advantages(self, scores, count, mean, std, batch):
        lengths = batch.response_mask.float().sum(-1)
        index, n_groups = group_index(batch.group_ids)
        weighted = group_sum(lengths * scores, index, n_groups) / group_sum(lengths, index, n_groups).clamp(min=1)
        return scores - weighted[index]


class GPGAdvantage(_GroupAdvantage):
    """Group policy gradient (Chu et al. 2025, arXiv:2504.02546): ``A_i = alpha * (s_i - mean_g)
    / f_norm`` with ``alpha = B / #{rows with a nonzero score}``, which rescales the batch
    for the rows that carry signal. verl: ``compute_gpg_outcome_advantage``. Groups of one
    get 0."""

    class Args(PluginArgs):
        f_norm: float = Field(1.0, gt=0, description="divisor of the centred scores")

    def group_advantages(self, scores, count, mean, std, batch):
        alpha = scores.numel() / torch.count_nonzero(scores).clamp(min=1)
        return alpha * (scores - mean) / self.args.f_norm


class GRPOPassKAdvantage(_GroupAdvantage):
    """Pass@k training (Chen et al. 2025, arXiv:2503.19595; verl
    ``compute_grpo_passk_outcome_advantage``): only the best row of each group gets an
    advantage, ``r_max - r_second`` (divided by ``std_g + epsilon`` with ``norm_adv_by_std``),
    the others 0. The first row of the maximum wins a tie (then ``r_max == r_second``: 0).
    verl refuses groups of one; they get 0 here."""

    Args = GroupNormalisedAdvantage.Args

    def group_advantages(self, scores, count, mean, std, batch):
        index, n_groups = group_index(batch.group_ids)
        rows = torch.arange(scores.numel(), device=scores.device)
        best = group_max(scores, index, n_groups)[index]
        first = torch.full((n_groups,), scores.numel(), device=scores.device).scatter_reduce(
            0, index[scores == best], rows[scores == best], "amin"
        )[index]
        is_first = rows == first
        second = group_max(torch.where(is_first, -torch.inf, scores), index, n_groups)[index]
        gap = best - second
        if self.args.norm_adv_by_std:
            gap = gap / (std + self.args.epsilon)
        return torch.where(is_first, gap, torch.zeros_like(scores))


class OPMDAdvantage(_GroupAdvantage):
    """Online policy mirror descent advantage (Trinity-RFT ``opmd``; Yao et al. 2025,
    arXiv:2509.24203).

    ``A_i = s_i - b_g`` with the group baseline ``b_g = mean_g(s)`` (``opmd_baseline="mean"``)
    or the soft baseline ``b_g = tau * log mean_g exp(s / tau)`` (``"logavgexp"``), the
    optimum of the KL-regularised objective with temperature ``tau``. Groups of one get 0.
    """

    class Args(PluginArgs):
        opmd_baseline: Literal["mean", "logavgexp"] = Field("mean", description="the group baseline")
        tau: float = Field(1.0, gt=0, description="temperature of the logavgexp baseline")

    def group_advantages(self, scores, count, mean, std, batch):
        if self.args.opmd_baseline == "mean":
            return scores - mean
        tau = self.args.tau
        index, n_groups = group_index(batch.group_ids)
        top = group_max(scores / tau, index, n_groups)[index]
        lse = group_sum(torch.exp(scores / tau - top), index, n_groups)[index].log() + top
        return scores - tau * (lse - count.log())


class OPMDVerlAdvantage(OPMDAdvantage):
    """``opmd`` with verl's handling of a group of one (Trinity-RFT ``opmd_verl``): its baseline
    is 0, so its advantage is its score."""

    def lone(self, scores: torch.Tensor) -> torch.Tensor:
        return scores


class AsymREAdvantage(_GroupAdvantage):
    """Asymmetric REINFORCE (Arnal et al. 2025, arXiv:2506.20520; Trinity-RFT ``asymre``).

    ``A_i = s_i - (mean_g(s) + baseline_shift)``: a baseline shifted below the group mean
    (``baseline_shift < 0``) weights positive samples more. Groups of one get 0.
    """

    class Args(PluginArgs):
        baseline_shift: float = Field(-0.1, description="added to the group mean to form the baseline")

    def group_advantages(self, scores, count, mean, std, batch):
        return scores - mean - self.args.baseline_shift


class AsymREVerlAdvantage(AsymREAdvantage):
    """``asymre`` with verl's handling of a group of one (Trinity-RFT ``asymre_verl``): its
    baseline is 0 (no shift), so its advantage is its score."""

    def lone(self, scores: torch.Tensor) -> torch.Tensor:
        return scores


class RECAdvantage(_GroupAdvantage):
    """The advantage of REC (Yao et al. 2025, "Group-relative REINFORCE is secretly an off-policy
    algorithm", arXiv:2509.24203; Trinity-RFT ``rec``): ``A_i = s_i - mean_g``, divided by the
    group's population std ``+ epsilon`` with ``std_normalize``.

    ``drop: balance`` first drops, at random, as many below-mean rows as a group has more of
    them than rows at or above its mean (advantage 0), and takes mean and std over the rows
    kept. Groups of one get 0.
    """

    class Args(PluginArgs):
        epsilon: float = EPSILON
        std_normalize: bool = Field(False, description="divide by the group's (population) reward std")
        drop: Literal["balance"] | None = Field(None, description="'balance': drop surplus negative samples")

    def group_advantages(self, scores, count, mean, std, batch):
        keep = torch.ones_like(scores)
        if self.args.drop == "balance":
            index, n_groups = group_index(batch.group_ids)
            negative = scores < mean
            surplus = (2 * group_sum(negative.float(), index, n_groups) - group_sum(keep, index, n_groups))[index]
            order = group_rank(torch.where(negative, torch.rand_like(scores), torch.inf), batch.group_ids)
            keep = (~(negative & (order < surplus))).float()
        _, mean, std = group_stats(scores, batch.group_ids, weights=keep, unbiased=False)
        return normalised(scores, mean, std, self.args.epsilon, self.args.std_normalize) * keep


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

    class Args(PluginArgs):
        gamma: float = Field(1.0, ge=0, le=1, description="discount factor")

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            returns = masked_discounted_sum(token_rewards(batch), mask, self.args.gamma) * mask
            advantages = masked_whiten(returns, mask) * mask
        return batch.with_fields(advantages=advantages, returns=returns), advantage_metrics(
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
        return batch.with_fields(advantages=advantages, returns=returns), advantage_metrics(
            sequence_scores(batch), advantages, mask
        )
