"""The group estimators beyond GRPO/RLOO, and GRPO's options, against values worked out by hand.

verl's and Trinity-RFT's recorded outputs on a realistic batch are checked in
test_verl_reference.py and test_trinity_rft_reference.py; these are the edge cases.
"""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm.advantage import (
    AsymREVerlAdvantage,
    GPGAdvantage,
    GRPOAdvantage,
    GRPOPassKAdvantage,
    GRPOVerlAdvantage,
    OPMDVerlAdvantage,
    OPOAdvantage,
    RECAdvantage,
    REINFORCEPlusPlusBaselineAdvantage,
)
from trinity.algorithm.utils import group_rank, masked_whiten

# task 0: rewards 1, 0, 1, 0 (std 0.57735); task 1: 2, 2 (std 0); task 2: 5 alone
REWARDS = [1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 5.0]
GROUPS = [0, 0, 0, 0, 1, 1, 2]


def advantages(fn, make_batch, rewards=REWARDS, groups=GROUPS, mask=None, **fields):
    mask = mask if mask is not None else [[1, 1]] * len(rewards)
    out, metrics = fn(make_batch(mask, rewards, groups, run_ids=list(range(len(rewards))), **fields))
    return out, metrics


def test_grpo_std_threshold_drops_flat_groups_and_groups_of_one(make_batch):
    out, metrics = advantages(GRPOAdvantage(std_threshold=0.0), make_batch)
    assert out.run_ids.tolist() == [0, 1, 2, 3]  # task 1 (std 0) and task 2 (alone) are gone
    a = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(out.advantages[:, 0], torch.tensor([a, -a, a, -a]), atol=1e-5, rtol=0)
    assert metrics["filtered_count"] == 3 and metrics["skipped_group_ratio"] == pytest.approx(2 / 3)
    out, _ = advantages(GRPOAdvantage(std_threshold=0.6), make_batch)  # above task 0's std: nothing left
    assert out.batch_size == 0


def test_grpo_duplicate_experiences_refills_with_whole_kept_groups(make_batch):
    torch.manual_seed(0)
    rewards, groups = [1.0, 0.0, 3.0, 1.0, 2.0, 2.0, 5.0], [0, 0, 1, 1, 2, 2, 3]
    out, _ = advantages(GRPOAdvantage(std_threshold=0.0, duplicate_experiences=True), make_batch, rewards, groups)
    # groups 0 and 1 kept (rows 0-3); two dropped groups come back as two copies of kept groups
    kept = out.run_ids.tolist()
    assert kept[:4] == [0, 1, 2, 3] and len(kept) == 8
    copies = [kept[4:6], kept[6:8]]
    assert all(pair in ([0, 1], [2, 3]) for pair in copies)
    assert torch.equal(out.advantages[4:], torch.cat([out.advantages[p[0] : p[1] + 1] for p in copies]))


def test_grpo_batch_std(make_batch):
    out, _ = advantages(GRPOAdvantage(std_cal_level="batch"), make_batch)
    std = torch.tensor(REWARDS).std()  # the whole batch's, unbiased
    expected = torch.tensor([0.5, -0.5, 0.5, -0.5, 0.0, 0.0, 0.0]) / (std + 1e-6)
    torch.testing.assert_close(out.advantages[:, 0], expected)


def test_grpo_rank_penalty(make_batch):
    # task 0's mean old logprobs -1, -0.5, -0.2, -3: ranks (least likely first) 1, 2, 3, 0 of 4;
    # penalty 0.4: rewards scaled by 1 - rank / 4 * 0.4 = 0.9, 0.8, 0.7, 1 -> scores 0.9, 0, 0.7, 0
    old = [[-1.0, -1.0], [-0.5, -0.5], [-0.2, -0.2], [-3.0, -3.0], [0.0] * 2, [0.0] * 2, [0.0] * 2]
    out, _ = advantages(GRPOAdvantage(rank_penalty=0.4), make_batch, old_logprobs=old)
    scores = torch.tensor([0.9, 0.0, 0.7, 0.0])
    expected = (scores - scores.mean()) / (scores.std() + 1e-6)
    torch.testing.assert_close(out.advantages[:4, 0], expected)
    with pytest.raises(ValueError, match="old_logprobs"):
        advantages(GRPOAdvantage(rank_penalty=0.4), make_batch)


def test_group_rank_ties_in_row_order():
    ranks = group_rank(torch.tensor([3.0, 1.0, 1.0, 0.0, 9.0]), torch.tensor([5, 5, 5, 2, 2]))
    assert ranks.tolist() == [2, 0, 1, 0, 1]


def test_verl_forms_keep_a_lone_score(make_batch):
    out, _ = advantages(GRPOVerlAdvantage(), make_batch)
    assert out.advantages[6, 0].item() == pytest.approx(5 / (1 + 1e-6))
    out, _ = advantages(GRPOVerlAdvantage(norm_adv_by_std=False), make_batch)
    assert out.advantages[6, 0].item() == 5.0
    for fn in (OPMDVerlAdvantage(), AsymREVerlAdvantage(baseline_shift=-0.5)):
        out, _ = advantages(fn, make_batch)
        assert out.advantages[6, 0].item() == 5.0  # baseline 0, no shift
    out, _ = advantages(GRPOAdvantage(), make_batch)
    assert out.advantages[6, 0].item() == 0.0


def test_passk_rewards_only_the_best_row(make_batch):
    # task 0: the first 1 wins (ties in row order), gap to the second best 1 is 0;
    # a group 1, 3, 0: the 3 gets (3 - 1) / std(1, 3, 0)
    rewards, groups = [1.0, 0.0, 1.0, 0.0, 1.0, 3.0, 0.0, 5.0], [0, 0, 0, 0, 1, 1, 1, 2]
    out, _ = advantages(GRPOPassKAdvantage(), make_batch, rewards, groups)
    std = torch.tensor([1.0, 3.0, 0.0]).std()
    expected = torch.zeros(8)
    expected[5] = 2 / (std + 1e-6)
    torch.testing.assert_close(out.advantages[:, 0], expected)
    out, _ = advantages(GRPOPassKAdvantage(norm_adv_by_std=False), make_batch, rewards, groups)
    assert out.advantages[:, 0].tolist() == [0.0] * 5 + [2.0, 0.0, 0.0]


def test_opo_weights_the_baseline_by_length(make_batch):
    # lengths 1, 3 with scores 4, 0: baseline (1*4 + 3*0) / 4 = 1; an all-empty group gives 0, not NaN
    out, _ = advantages(OPOAdvantage(), make_batch, [4.0, 0.0, 1.0, 2.0], [0, 0, 1, 1],
                        mask=[[1, 0, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0]])  # fmt: skip
    assert out.advantages[0, 0].item() == 3.0 and out.advantages[1].tolist() == [-1.0] * 3
    assert torch.isfinite(out.advantages).all() and (out.advantages[2:] == 0).all()


def test_gpg_rescales_by_the_rows_with_signal(make_batch):
    # 7 rows, 5 nonzero scores: alpha 7/5; A = alpha * (s - mean_g) / f_norm
    out, _ = advantages(GPGAdvantage(f_norm=2.0), make_batch)
    expected = 7 / 5 * torch.tensor([0.5, -0.5, 0.5, -0.5, 0.0, 0.0, 0.0]) / 2
    torch.testing.assert_close(out.advantages[:, 0], expected)


def test_reinforce_plus_plus_baseline(make_batch):
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0], [1, 1], [1, 1], [1, 1]], dtype=torch.float32)
    out, _ = advantages(REINFORCEPlusPlusBaselineAdvantage(), make_batch, mask=mask)
    centred = torch.tensor([0.5, -0.5, 0.5, -0.5, 0.0, 0.0, 0.0])[:, None] * mask
    torch.testing.assert_close(out.advantages, masked_whiten(centred, mask) * mask)


def test_rec_advantage_balance_drop(make_batch):
    # a group 1, 0, 0, 0: one row at or above the mean 0.25 and three below: two of them drop at
    # random (advantage 0); mean and population std over the two kept
    torch.manual_seed(0)
    out, metrics = advantages(RECAdvantage(drop="balance", std_normalize=True), make_batch, [1.0, 0, 0, 0], [0] * 4)
    adv = out.advantages[:, 0]
    assert adv[0].item() == pytest.approx(0.5 / (0.5 + 1e-6))  # kept: 1 and one 0, mean 0.5, std 0.5
    assert sorted(adv[1:].tolist()) == pytest.approx([-1.0, 0.0, 0.0], abs=1e-5)
    # without a drop: mean 0.25, no std normalisation
    out, _ = advantages(RECAdvantage(), make_batch, [1.0, 0, 0, 0], [0] * 4)
    assert out.advantages[:, 0].tolist() == [0.75, -0.25, -0.25, -0.25]
