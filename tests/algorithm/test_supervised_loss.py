"""CHORD's SFT weightings and its scheduled mix, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from test_policy_loss import loss_and_grad

from trinity.algorithm.supervised_loss import MIXCHORDPolicyLoss, SFTISLoss, SFTPhiLoss, chord_mu

LN = math.log


def test_sft_is_and_phi_by_hand(make_batch):
    batch = make_batch([[1, 1]])
    # p = 0.5, 0.25: -sg[p] logp; gradient -p
    loss, grad, metrics = loss_and_grad(SFTISLoss(), [[LN(0.5), LN(0.25)]], batch)
    assert loss == pytest.approx((0.5 * LN(2) + 0.25 * LN(4)) / 2) and metrics["sft_is_loss"] == pytest.approx(loss)
    torch.testing.assert_close(grad, torch.tensor([[-0.25, -0.125]]))
    # phi = p (1 - p) = 0.25, 0.1875; cutoff 0.4 caps log 0.5 at log 0.4 (no gradient there)
    loss, grad, _ = loss_and_grad(SFTPhiLoss(cutoff_prob=0.4), [[LN(0.5), LN(0.25)]], batch)
    assert loss == pytest.approx((-0.25 * LN(0.4) - 0.1875 * LN(0.25)) / 2)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -0.1875 / 2]]))


@pytest.mark.parametrize(
    "step, mu", [(0, 0.0), (1, 0.25), (2, 0.5), (4, 0.3), (6, 0.1), (50, 0.1)]
)  # warm-up 2 steps to 0.5, then a half cosine over 4 steps to 0.1: at 4, 0.4 * (1 + cos(pi/2)) / 2 + 0.1
def test_chord_mu_schedule(step, mu):
    assert chord_mu(step, warmup=2, decay=4, peak=0.5, valley=0.1) == pytest.approx(mu)


def test_mix_chord_by_hand(make_batch):
    # step 1 of warm-up 2 to 0.5: mu 0.25. Rollout row: ratio 1, A = 2 -> PPO loss -2.
    # Expert row: p = 0.5, phi = 0.25: sft_phi loss 0.25 * ln 2
    batch = make_batch(
        [[1, 1], [1, 0]], old_logprobs=[[-1.0, -1.0], [0.0, 0.0]], advantages=[[2.0, 2.0], [0.0, 0.0]],
        is_expert=[False, True], global_steps=[1, 1],
    )  # fmt: skip
    fn = MIXCHORDPolicyLoss(mu_warmup_steps=2, mu_decay_steps=4, mu_peak=0.5, mu_valley=0.1)
    loss, grad, metrics = loss_and_grad(fn, [[-1.0, -1.0], [LN(0.5), 9.0]], batch)
    assert metrics["mu"] == 0.25 and "expert/sft_phi_loss" in metrics
    assert loss == pytest.approx(0.75 * -2 + 0.25 * 0.25 * LN(2))
    torch.testing.assert_close(grad, torch.tensor([[-0.75, -0.75], [-0.25 * 0.25, 0.0]]))
    plain = MIXCHORDPolicyLoss(enable_phi_function=False, mu_valley=0.25, mu_peak=0.25)
    loss, _, _ = loss_and_grad(plain, [[-1.0, -1.0], [LN(0.5), 9.0]], batch)
    assert loss == pytest.approx(0.75 * -2 + 0.25 * LN(2))
    with pytest.raises(ValueError, match="global_steps"):
        fn(torch.zeros(2, 2), batch.with_fields(global_steps=None))
