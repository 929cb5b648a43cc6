"""The policy losses beyond PPO, by hand (verl's and Trinity-RFT's recorded outputs on a realistic
batch: test_verl_reference.py, test_trinity_rft_reference.py)."""

from __future__ import annotations

import math

import pytest
import torch
from test_policy_loss import loss_and_grad

from trinity.algorithm.policy_loss import (
    ClipCovPolicyLoss,
    GeoMeanPolicyLoss,
    GSPOPolicyLoss,
    KLCovPolicyLoss,
    M2POPolicyLoss,
    PPOPolicyLoss,
    SAPOPolicyLoss,
    SPPOPolicyLoss,
)

E = math.exp


def test_gspo_clip_range_alone_sets_both_sides(make_batch):
    # sequence log-ratio 0.2 (s = 1.2214), A = 1: clip_range 0.1 alone clips s at 1.1
    batch = make_batch([[1, 1]], old_logprobs=[[-1.0, -1.0]], advantages=[[1.0, 1.0]])
    loss, grad, metrics = loss_and_grad(GSPOPolicyLoss(clip_range=0.1), [[-0.9, -0.7]], batch)
    assert loss == pytest.approx(-1.1) and metrics["pg_clipfrac"] == 1.0 and torch.equal(grad, torch.zeros(1, 2))
    loss, _, _ = loss_and_grad(GSPOPolicyLoss(clip_range=0.1, clip_range_high=0.5), [[-0.9, -0.7]], batch)
    assert loss == pytest.approx(-E(0.2), rel=1e-6)  # the explicit side wins over clip_range


def test_ppo_sequence_masking_and_policy_gradient_fallback(make_batch):
    # old 0, logp -0.5: the sequence's KL 0.5 > 0.1, so its negative token drops; the positive one
    # keeps max(-0.6065, -0.8) = -0.6065
    batch = make_batch([[1, 1]], old_logprobs=[[0.0, 0.0]], advantages=[[-1.0, 1.0]])
    fn = PPOPolicyLoss(enable_sequence_masking=True, delta_sequence_masking=0.1, clip_ratio_c=None)
    loss, grad, metrics = loss_and_grad(fn, [[-0.5, -0.5]], batch)
    assert loss == pytest.approx(-E(-0.5) / 2) and metrics["seq_mask/masked_tokens"] == 0.5
    # ratio 1 with the gradient of logp: d(-A * r)/dlogp = -A, token mean
    loss, grad, _ = loss_and_grad(PPOPolicyLoss(fallback_to_policy_gradient=True), [[-0.5, -3.0]], batch)
    assert loss == 0.0
    torch.testing.assert_close(grad, torch.tensor([[0.5, -0.5]]))


def test_clip_cov_detaches_its_share_of_the_covariance_outliers(make_batch):
    # 8 tokens on-policy (ratio 1, nothing clipped), covariance of every token in (lb, ub): a random
    # 25% of them (2 tokens) lose their gradient
    logprobs = [[-1.0, -2.0, -3.0, -4.0], [-4.0, -3.0, -2.0, -1.0]]
    batch = make_batch([[1, 1, 1, 1]] * 2, old_logprobs=logprobs, advantages=[[2.0, 1.0, -1.0, -2.0]] * 2)
    fn = ClipCovPolicyLoss(clip_cov_ratio=0.25, clip_cov_lb=-10.0, clip_cov_ub=10.0)
    torch.manual_seed(0)
    loss, grad, metrics = loss_and_grad(fn, logprobs, batch)
    detached = grad == 0
    assert int(detached.sum()) == 2 and metrics["pg_clipfrac"] == 0.25
    advantages = torch.tensor([[2.0, 1.0, -1.0, -2.0]] * 2)
    torch.testing.assert_close(grad, torch.where(detached, 0.0, -advantages / 8))
    assert loss == pytest.approx(float(-(advantages * ~detached).sum() / 8))


def test_kl_cov_penalises_the_largest_covariance(make_batch):
    # 4 tokens, kl_cov_ratio 0.25: one penalised. Centred A (1.5, -0.5, -0.5, -0.5), centred logp
    # (0.75, 0.25, -0.25, -0.75) (logp -1, -1.5, -2, -2.5): largest product at token 0
    logprobs = [[-1.0, -1.5, -2.0, -2.5]]
    old = [[-1.2, -1.5, -2.0, -2.5]]
    batch = make_batch([[1, 1, 1, 1]], old_logprobs=old, advantages=[[2.0, 0.0, 0.0, 0.0]])
    loss, grad, metrics = loss_and_grad(KLCovPolicyLoss(kl_cov_ratio=0.25, ppo_kl_coef=0.5), logprobs, batch)
    r0 = E(0.2)
    assert loss == pytest.approx((-2 * r0 + 0.5 * 0.2) / 4)
    torch.testing.assert_close(grad, torch.tensor([[(-2 * r0 + 0.5) / 4, 0.0, 0.0, 0.0]]))
    assert metrics["ppo_kl"] == pytest.approx(0.05)


def test_geo_mean_by_hand(make_batch):
    # log-ratios (0.5, -0.1), A = 1: the pessimistic clipped ones (0.4, -0.1); ratio e^0.15;
    # the clipped token has no gradient, the other d/dlogp = -e^0.15 / 2. An empty row is left out.
    batch = make_batch([[1, 1], [0, 0]], old_logprobs=[[0.0, 0.0]] * 2, advantages=[[1.0, 1.0]] * 2)
    loss, grad, metrics = loss_and_grad(GeoMeanPolicyLoss(clip_range=0.4), [[0.5, -0.1], [3.0, 3.0]], batch)
    assert loss == pytest.approx(-E(0.15), rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -E(0.15) / 2], [0.0, 0.0]]))
    assert metrics["pg_clipfrac"] == 0.5 and metrics["pg_clipfrac_lower"] == 0.0


def test_sapo_gate_by_hand(make_batch):
    # at r = 1: gate 4 / tau * sigmoid(0) = 2 / tau; its gradient weight 4 sig (1 - sig) r = 1
    batch = make_batch([[1], [1]], old_logprobs=[[0.0], [0.0]], advantages=[[1.0], [-1.0]])
    loss, grad, _ = loss_and_grad(SAPOPolicyLoss(tau_neg=1.05), [[0.0], [0.0]], batch)
    assert loss == pytest.approx((-2.0 + 2 / 1.05) / 2, rel=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-0.5], [0.5]]))
    # far off-policy (r = e^3) the gate saturates: almost no gradient
    _, grad, _ = loss_and_grad(SAPOPolicyLoss(), [[3.0], [0.0]], batch)
    assert abs(grad[0, 0].item()) < 0.05


def test_m2po_masks_the_largest_second_moments(make_batch):
    # log-ratios (0.5, 0.1, -0.3, 0.2), A (1, 1, -1, -1): tokens 0-2 are in the trust region, squares
    # 0.25, 0.01, 0.09 (mean 0.1167 > 0.05); sorted prefix means 0.01, 0.05, 0.1167: keep two, mask token 0
    batch = make_batch([[1, 1, 1, 1]], old_logprobs=[[0.0] * 4], advantages=[[1.0, 1.0, -1.0, -1.0]])
    loss, grad, metrics = loss_and_grad(M2POPolicyLoss(m2_threshold=0.05), [[0.5, 0.1, -0.3, 0.2]], batch)
    assert loss == pytest.approx((-E(0.1) + E(-0.3) + E(0.2)) / 4)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -E(0.1), E(-0.3), E(0.2)]]) / 4)
    assert metrics["m2_before"] == pytest.approx(0.35 / 3) and metrics["m2_after"] == pytest.approx(0.05)
    assert metrics["masked_fraction"] == 0.25 and metrics["trust_region_fraction"] == 0.75
    loss, _, metrics = loss_and_grad(M2POPolicyLoss(m2_threshold=1.0), [[0.5, 0.1, -0.3, 0.2]], batch)
    assert metrics["masked_fraction"] == 0.0  # under the bound: nothing masked


def test_sppo_by_hand(make_batch):
    # ratios e^0.1 (inside [1/1.3, 1.3]) and e^0.5 (outside): -A (logp - old) on the first only
    batch = make_batch([[1, 1]], old_logprobs=[[0.0, 0.0]], advantages=[[2.0, 2.0]])
    loss, grad, metrics = loss_and_grad(SPPOPolicyLoss(), [[0.1, 0.5]], batch)
    assert loss == pytest.approx(-0.1) and metrics["pg_clipfrac"] == 0.5
    torch.testing.assert_close(grad, torch.tensor([[-1.0, 0.0]]))


def test_m2po_masks_over_the_whole_batch_then_accumulates_exactly(make_batch):
    """The trainer's prepare picks the mask over the step's batch; micro-batches of one row then
    add up (weighted by their token shares) to the loss of the whole batch."""
    current = torch.tensor([[0.5, 0.1], [-0.3, 0.2], [0.05, -0.4], [0.3, 0.3]])
    batch = make_batch([[1, 1]] * 4, old_logprobs=torch.zeros(4, 2), advantages=[[1.0, 1.0], [-1.0, -1.0]] * 2)
    fn = M2POPolicyLoss(m2_threshold=0.05)
    prepared, metrics = fn.prepare(batch, lambda rows: current[: rows.batch_size])
    assert metrics["m2po/masked_fraction"] > 0
    whole, _ = fn(current, prepared)
    parts = [fn(current[i : i + 1], prepared.select([i]))[0] * 2 / 8 for i in range(4)]
    assert sum(parts).item() == pytest.approx(whole.item())
    alone = [fn(current[i : i + 1], batch.select([i]))[0] * 2 / 8 for i in range(4)]
    assert sum(alone).item() != pytest.approx(whole.item())  # each row masked on its own: not Algorithm 1
