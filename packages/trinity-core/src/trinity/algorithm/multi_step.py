"""Advantages of multi-step (agentic) workflows: one experience per model turn.

Rows of one trajectory share ``batch.run_ids`` and are ordered by ``batch.step_ids``; the
trajectories of one task share ``batch.group_ids``. ``step_wise_grpo`` gives every step its
trajectory's GRPO advantage; ``gigpo`` adds a step-level advantage among the steps that act
from the same environment state (``batch.state_ids``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trinity.algorithm.advantage import (
    EPSILON,
    NORM_BY_STD,
    advantage_metrics,
    batch_std,
    keep_rows,
    normalised,
    sequence_scores,
)
from trinity.algorithm.base import AdvantageFn, Metrics
from trinity.algorithm.utils import group_index, group_stats, group_sum, reverse_scan
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs

torch = lazy_module("torch")


def runs_of(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(run index [B] in 0..N-1, steps [B], order [B])``: ``order`` sorts the rows by run,
    then by step. Without run ids every row is its own run."""
    rows = torch.arange(batch.batch_size, device=batch.rewards.device)
    run, _ = group_index(batch.run_ids if batch.run_ids is not None else rows)
    steps = batch.step_ids if batch.step_ids is not None else torch.zeros_like(rows)
    order = torch.argsort(steps, stable=True)
    return run, steps, order[torch.argsort(run[order], stable=True)]


def last_steps(run: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the row that is its run's last step (the last of each run in ``order``)."""
    ordered = run[order]
    last = torch.ones_like(ordered, dtype=torch.bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    return torch.zeros_like(last).scatter_(0, order, last)


def run_groups(run: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """The task group ``[N]`` of each run (a run's rows share one)."""
    return torch.zeros(int(run.max()) + 1, dtype=group_ids.dtype, device=group_ids.device).scatter_(0, run, group_ids)


class StepWiseGRPOAdvantage(AdvantageFn):
    """GRPO for multi-step workflows (Trinity-RFT ``step_wise_grpo``, after rLLM).

    Each run is scored by the reward of its last step (largest ``step_ids``); the runs of a
    task are normalised as in ``grpo``, ``A_run = (s_run - mean_g) / (std_g + epsilon)`` (the
    std of all runs of the batch with ``std_cal_level: batch``), and every step of the run gets
    ``A_run`` (divided by the run's number of steps with ``enable_step_norm``). A task with one
    run gets 0. ``std_threshold`` drops every step of the tasks whose run-level std is at most
    the threshold (and of tasks with one run). Without run ids every row is its own run, which
    reduces to ``grpo``.
    """

    class Args(PluginArgs):
        epsilon: float = EPSILON
        norm_adv_by_std: bool = NORM_BY_STD
        enable_step_norm: bool = Field(False, description="divide each step's advantage by its run's length")
        std_cal_level: Literal["group", "batch"] = Field("group", description="where the std comes from")
        std_threshold: float | None = Field(
            None, ge=0, description="drop tasks whose run-level reward std is at most this (and one-run tasks)"
        )

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            scores = sequence_scores(batch)
            run, _, order = runs_of(batch)
            last = torch.nonzero(last_steps(run, order)).squeeze(-1)
            last = last[torch.argsort(run[last])]  # the last row of run 0, 1, ...
            run_scores, groups = scores[last], batch.group_ids[last]
            count, mean, std = group_stats(run_scores, groups)
            scale = batch_std(run_scores) if self.args.std_cal_level == "batch" else std
            run_advantages = normalised(run_scores, mean, scale, self.args.epsilon, self.args.norm_adv_by_std)
            run_advantages = torch.where(count > 1, run_advantages, torch.zeros_like(run_advantages))
            advantages = run_advantages[run]
            if self.args.enable_step_norm:
                advantages = advantages / group_sum(torch.ones_like(scores), run, last.numel())[run]
            advantages = advantages[:, None] * mask
        out = batch.with_fields(advantages=advantages, returns=advantages)
        metrics = advantage_metrics(scores, advantages, mask)
        if self.args.std_threshold is not None:
            keep = ((count > 1) & (std > self.args.std_threshold))[run]
            out, kept = keep_rows(out, keep, group_index(batch.group_ids)[0], refill=False)
            metrics.update(kept)
        return out, metrics


class GiGPOAdvantage(AdvantageFn):
    """Group-in-group policy optimisation for agents (Feng et al. 2025, arXiv:2505.10978;
    Trinity-RFT ``gigpo``): ``A = A_E + omega * A_S`` on every token of a step.

    - Episode level: a run's return ``R = sum_t r_t`` is compared with the other runs of its
      task, ``A_E = (R - mean_g) / (F + epsilon)``, ``F`` the group's std (``fnorm: std``) or 1
      (``fnorm: none``, the paper's choice for agents). A task with one run gets 0 (Trinity-RFT
      compares it with 0).
    - Step level: steps that act from the same environment state (``batch.state_ids``, from
      ``info["env_state_hash"]``; across the whole batch) form an anchor group; each step's
      discounted return ``R_t = sum_{k >= t} gamma^(k-t) r_k`` is normalised the same way
      within it. Steps in no anchor group, or alone in theirs, get ``A_S = 0``.

    Step rewards ``r_t`` are ``info["step_reward"]`` (``batch.step_rewards``; 0 where a step of
    such a run lacks it); a run without any is rewarded on its last step only, with that
    step's reward (workflows that copy the final reward to every step).
    """

    class Args(PluginArgs):
        omega: float = Field(1.0, ge=0, description="weight of the step-level advantage")
        gamma: float = Field(1.0, ge=0, le=1, description="discount of the step-level returns")
        fnorm: Literal["std", "none"] = Field("none", description="normalise by the group's std, or by 1")
        epsilon: float = EPSILON
        step_reward_key: Literal["step_reward"] = Field(
            "step_reward", description="the info key of a step's own reward (batches read this key)"
        )
        env_state_hash_key: Literal["env_state_hash"] = Field(
            "env_state_hash", description="the info key of the state a step acts from (batches read this key)"
        )

    def normalise(self, values: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor | None = None):
        """``(values - mean) / (F + epsilon)`` within groups; 0 for groups of one."""
        count, mean, std = group_stats(values, group_ids, weights=weights)
        scale = std if self.args.fnorm == "std" else torch.ones_like(std)
        return torch.where(count > 1, normalised(values, mean, scale, self.args.epsilon), torch.zeros_like(values))

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            run, _, order = runs_of(batch)
            n_runs = int(run.max()) + 1
            rewards = self.step_rewards(batch, run, order)
            ordered_runs = run[order]
            same_run = torch.zeros_like(rewards)
            same_run[:-1] = (ordered_runs[1:] == ordered_runs[:-1]).float()
            returns = torch.empty_like(rewards)
            returns[order] = reverse_scan(self.args.gamma * same_run, rewards[order])
            episode = self.normalise(group_sum(rewards, run, n_runs), run_groups(run, batch.group_ids))[run]
            step = torch.zeros_like(episode)
            anchored = torch.zeros_like(episode, dtype=torch.bool)
            if batch.state_ids is not None:
                anchored = batch.state_ids >= 0
                step = torch.where(anchored, self.normalise(returns, batch.state_ids, anchored.float()), step)
            advantages = (episode + self.args.omega * step)[:, None] * mask
        metrics = advantage_metrics(sequence_scores(batch), advantages, mask)
        anchors = batch.state_ids[anchored] if anchored.any() else anchored.new_zeros(0, dtype=torch.long)
        _, sizes = torch.unique(anchors, return_counts=True)
        metrics.update(
            {
                "anchor_groups": float(sizes.numel()),
                "anchor_group_hit_ratio": (sizes > 1).float().mean().item() if sizes.numel() else 0.0,
                "mean_abs_episode_advantage": episode.abs().mean().item(),
                "mean_abs_step_advantage": step.abs().mean().item(),
            }
        )
        return batch.with_fields(advantages=advantages, returns=advantages), metrics

    @staticmethod
    def step_rewards(batch: Batch, run: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        """``[B]`` immediate reward of each step (see the class docstring)."""
        final = torch.where(last_steps(run, order), batch.rewards.float(), torch.zeros_like(batch.rewards.float()))
        if batch.step_rewards is None:
            return final
        given = ~torch.isnan(batch.step_rewards)
        run_has = group_sum(given.float(), run, int(run.max()) + 1)[run] > 0
        return torch.where(run_has, torch.nan_to_num(batch.step_rewards.float(), nan=0.0), final)
