"""Policy losses and loss aggregation against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from trinity.algorithm.policy_loss import (
    CISPOPolicyLoss,
    GSPOPolicyLoss,
    KLCovPolicyLoss,
    OPMDPolicyLoss,
    PPOPolicyLoss,
    RECPolicyLoss,
    TOPRPolicyLoss,
)
from trinity.algorithm.supervised_loss import DPOLoss, MIXPolicyLoss, SFTLoss
from trinity.algorithm.utils import LOSS_AGG_MODES, agg_loss
from trinity.plugins import Kind, get_registry, resolve

LN = math.log


def loss_and_grad(fn, logprobs, batch):
    logprobs = torch.as_tensor(logprobs, dtype=torch.float32).clone().requires_grad_(True)
    loss, metrics = fn(logprobs, batch)
    loss.backward()
    return loss.item(), logprobs.grad, metrics


@pytest.mark.parametrize(
    "mode, expected",
    [("token-mean", 10 / 4), ("seq-mean-token-sum", 10 / 2), ("seq-mean-token-mean", (2 + 4) / 2),
     ("seq-mean-token-sum-norm", 10 / 2 / 3), ("token-sum", 10)],
)  # fmt: skip
def test_agg_loss_modes_by_hand(mode, expected):
    # rows: (1, 2, 3) all kept; (4, x, x) one token; a fully masked row holding NaN
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, math.nan, 7.0], [math.nan, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert agg_loss(loss, mask, mode).item() == pytest.approx(expected)
    assert agg_loss(loss, torch.zeros(3, 3), mode).item() == 0.0
    with pytest.raises(ValueError, match="loss_agg_mode"):
        agg_loss(loss, mask, "token-sum-mean")


def test_ppo_by_hand(make_batch):
    # old logprobs 0, ratios (1.5, 0.5, 4, 1), advantages (1, -1, -1, 2), clip 0.2, dual clip 3:
    # t0: max(-1.5, -1.2) = -1.2 (clipped); t1: max(0.5, 0.8) = 0.8 (clipped);
    # t2: max(4, 1.2) = 4 -> min(4, 3) = 3 (dual clip); t3: -2 (unclipped)
    batch = make_batch([[1, 1, 1, 1]], old_logprobs=[[0.0] * 4], advantages=[[1.0, -1.0, -1.0, 2.0]])
    loss, grad, metrics = loss_and_grad(PPOPolicyLoss(), [[LN(1.5), LN(0.5), LN(4.0), 0.0]], batch)
    assert loss == pytest.approx((-1.2 + 0.8 + 3 - 2) / 4)
    assert metrics["pg_loss"] == pytest.approx(loss)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 4)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 4)
    assert metrics["ppo_kl"] == pytest.approx(-(LN(1.5) + LN(0.5) + LN(4.0)) / 4)
    # only the unclipped token has a gradient: d(-A r)/dlogp / 4 = -2 * 1 / 4
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, 0.0, -0.5]]))


def test_ppo_asymmetric_clip_and_no_dual_clip(make_batch):
    # ratio 1.25 with A = 1: clip_range_high 0.28 leaves it unclipped, the default 0.2 clips it
    # ratio 4 with A = -1 and no dual clip: loss 4
    batch = make_batch([[1, 1]], old_logprobs=[[0.0, 0.0]], advantages=[[1.0, -1.0]])
    logprobs = [[LN(1.25), LN(4.0)]]
    loss, _, metrics = loss_and_grad(PPOPolicyLoss(clip_range_high=0.28, clip_ratio_c=None), logprobs, batch)
    assert loss == pytest.approx((-1.25 + 4.0) / 2)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["pg_clipfrac_lower"] == 0.0
    loss, _, _ = loss_and_grad(PPOPolicyLoss(), logprobs, batch)
    assert loss == pytest.approx((-1.2 + 3.0) / 2)


def test_gspo_by_hand(make_batch):
    # token log-ratios (0.1, 0.3): sequence ratio s = exp(0.2) = 1.221403, A = 1, clip 0.3 wide enough:
    # each token loss -s; seq-mean-token-mean = -s; d/dlogp_t = -s / 2 (gradient through p_t / sg[p_t])
    batch = make_batch([[1, 1, 0]], old_logprobs=[[-1.0, -1.0, 5.0]], advantages=[[1.0, 1.0, 1.0]])
    fn = GSPOPolicyLoss(clip_range_low=0.3, clip_range_high=0.3)
    loss, grad, metrics = loss_and_grad(fn, [[-0.9, -0.7, 0.0]], batch)
    s = math.exp(0.2)
    assert loss == pytest.approx(-s, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-s / 2, -s / 2, 0.0]]))
    assert metrics["pg_clipfrac"] == 0.0
    # with the paper's tiny ranges the ratio is clipped at 1 + 4e-4: the loss is flat
    loss, grad, metrics = loss_and_grad(GSPOPolicyLoss(), [[-0.9, -0.7, 0.0]], batch)
    assert loss == pytest.approx(-(1 + 4e-4)) and metrics["pg_clipfrac"] == 1.0
    assert torch.equal(grad, torch.zeros(1, 3))


def test_cispo_by_hand(make_batch):
    # ratios (2, 0.5), A = (1, -1), clip_range_high 0.28, clip_range_low 0.2: weights sg(1.28), sg(0.8)
    # loss = mean(-1.28 * 1 * logp0, -0.8 * -1 * logp1); grads (-1.28 / 2, 0.8 / 2)
    batch = make_batch([[1, 1]], old_logprobs=[[-2.0, -1.0]], advantages=[[1.0, -1.0]])
    logprobs = [[-2.0 + LN(2.0), -1.0 + LN(0.5)]]
    loss, grad, metrics = loss_and_grad(CISPOPolicyLoss(clip_range_low=0.2), logprobs, batch)
    assert loss == pytest.approx((-1.28 * logprobs[0][0] + 0.8 * logprobs[0][1]) / 2)
    torch.testing.assert_close(grad, torch.tensor([[-0.64, 0.4]]))
    assert metrics["pg_clipfrac"] == 1.0


def test_opmd_sft_and_topr_by_hand(make_batch):
    batch = make_batch([[1, 1]], old_logprobs=[[-1.0, -1.0]], advantages=[[2.0, 2.0]])
    loss, grad, _ = loss_and_grad(OPMDPolicyLoss(tau=3.0), [[-0.5, -1.5]], batch)
    assert loss == pytest.approx(-2 * (-0.5 - 1.5) / 2 / 4)  # -A logp / (1 + tau), token mean
    torch.testing.assert_close(grad, torch.full((1, 2), -2 / 2 / 4))
    loss, grad, metrics = loss_and_grad(SFTLoss(), [[-0.5, -1.5]], batch)
    assert loss == pytest.approx(1.0) and metrics["sft_loss"] == pytest.approx(1.0)
    # TOPR, sequence ratio (the paper): row 0 positive (weight 1); row 1 negative with sequence
    # log-ratio +0.4 (truncated to 1); row 2 negative with sequence log-ratio -0.4 (weight e^-0.4)
    batch = make_batch([[1, 1]] * 3, old_logprobs=[[-1.0, -1.0]] * 3, advantages=[[1.0] * 2, [-1.0] * 2, [-1.0] * 2])
    logprobs = [[-1.0, -1.0], [-0.8, -0.8], [-1.2, -1.2]]
    loss, grad, metrics = loss_and_grad(TOPRPolicyLoss(ratio_level="sequence"), logprobs, batch)
    w = math.exp(-0.4)
    assert loss == pytest.approx((2 * 1.0 + 2 * -0.8 + 2 * w * -1.2) / 6)
    torch.testing.assert_close(grad, torch.tensor([[-1.0] * 2, [1.0] * 2, [w] * 2]) / 6)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 6)
    # token ratio (Trinity-RFT): row 2's tokens each have log-ratio -0.2, weight e^-0.2
    loss, grad, _ = loss_and_grad(TOPRPolicyLoss(), logprobs, batch)
    w = math.exp(-0.2)
    assert loss == pytest.approx((2 * 1.0 + 2 * -0.8 + 2 * w * -1.2) / 6)
    torch.testing.assert_close(grad, torch.tensor([[-1.0] * 2, [1.0] * 2, [w] * 2]) / 6)


def test_dpo_by_hand(make_batch):
    # chosen: sum(logp - ref) = 2, rejected: -1, beta 0.1 -> z = 0.3; loss = log(1 + e^-0.3) = 0.554355
    batch = make_batch([[1, 1], [1, 0]], ref_logprobs=[[-2.0, -2.0], [-1.0, 7.0]])
    logprobs = [[-1.0, -1.0], [-2.0, 0.0]]
    loss, grad, metrics = loss_and_grad(DPOLoss(), logprobs, batch)
    assert loss == pytest.approx(math.log1p(math.exp(-0.3)), rel=1e-6)
    assert metrics["chosen_reward"] == pytest.approx(0.2) and metrics["rejected_reward"] == pytest.approx(-0.1)
    assert metrics["accuracy"] == 1.0
    # d loss / d logp_chosen = -beta * sigmoid(-z) = -0.1 * 0.425557
    sig = 1 / (1 + math.exp(0.3))
    torch.testing.assert_close(grad, torch.tensor([[-0.1 * sig] * 2, [0.1 * sig, 0.0]]))
    loss, _, _ = loss_and_grad(DPOLoss(label_smoothing=0.2), logprobs, batch)
    assert loss == pytest.approx(0.8 * math.log1p(math.exp(-0.3)) + 0.2 * math.log1p(math.exp(0.3)), rel=1e-6)
    with pytest.raises(ValueError, match="pairs"):
        DPOLoss()(torch.zeros(3, 2), make_batch([[1, 1]] * 3, ref_logprobs=torch.zeros(3, 2)))


def test_mix_by_hand(make_batch):
    # row 0 rollout: ratio 1, A = 2 -> PPO loss -2; row 1 expert: logp log(0.5) -> SFT loss 0.693147
    # mu 0.25: 0.75 * -2 + 0.25 * 0.693147
    batch = make_batch(
        [[1, 1], [1, 0]],
        old_logprobs=[[-1.0, -1.0], [0.0, 0.0]],
        advantages=[[2.0, 2.0], [0.0, 0.0]],
        is_expert=[False, True],
    )
    loss, grad, metrics = loss_and_grad(MIXPolicyLoss(mu=0.25), [[-1.0, -1.0], [LN(0.5), 9.0]], batch)
    assert loss == pytest.approx(0.75 * -2 + 0.25 * LN(2))
    assert metrics["usual/pg_loss"] == pytest.approx(-2) and metrics["expert/sft_loss"] == pytest.approx(LN(2))
    torch.testing.assert_close(grad, torch.tensor([[-0.75, -0.75], [-0.25, 0.0]]))
    # all rows expert: no old logprobs needed, SFT only
    sft_only = make_batch([[1, 1]], is_expert=[True])
    loss, _, metrics = loss_and_grad(MIXPolicyLoss(mu=0.25), [[LN(0.5), LN(0.5)]], sft_only)
    assert loss == pytest.approx(0.25 * LN(2)) and "usual/pg_loss" not in metrics


def test_sample_weights_scale_rows(make_batch):
    batch = make_batch([[1, 1], [1, 1]], old_logprobs=torch.zeros(2, 2), advantages=[[1.0, 1.0], [3.0, 3.0]])
    weighted = batch.with_fields(sample_weights=torch.tensor([1.0, 0.0]))
    loss, _, _ = loss_and_grad(PPOPolicyLoss(), torch.zeros(2, 2), weighted)
    assert loss == pytest.approx(-1.0 * 2 / 4)  # row 1 weighs 0, token mean still over 4 tokens


ALL_LOSSES = [resolve(Kind.POLICY_LOSS_FN, name)() for name in sorted(get_registry().names(Kind.POLICY_LOSS_FN))]
"""Every registered policy loss with its default args."""


def random_batch(make_batch, mask, dtype=torch.float32, seed=0, spread=0.3):
    """Current logprobs and a batch around them: old and reference logprobs ``spread`` away."""
    gen = torch.Generator().manual_seed(seed)
    size, length = mask.shape
    old = -torch.rand(size, length, generator=gen) * 2
    return old + spread * torch.randn(size, length, generator=gen), make_batch(
        mask,
        old_logprobs=old,
        ref_logprobs=old + spread * torch.randn(size, length, generator=gen),
        advantages=torch.randn(size, length, generator=gen),
        is_expert=torch.arange(size) % 3 == 0,
        global_steps=torch.full((size,), 3),
        dtype=dtype,
    )


@pytest.mark.parametrize("fn", ALL_LOSSES, ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_empty_rows_and_masked_garbage_give_finite_loss_and_grads(make_batch, fn, mode):
    if "loss_agg_mode" in fn.default_args():
        try:
            fn = type(fn)(loss_agg_mode=mode)
        except ValidationError:  # m2po takes token-mean only
            pytest.skip(f"{type(fn).__name__} does not aggregate by {mode}")
    mask = torch.ones(6, 5)
    mask[1] = 0
    mask[4, 2:] = 0
    logprobs, batch = random_batch(make_batch, mask)
    for field in (batch.old_logprobs, batch.advantages, batch.ref_logprobs):
        field[1] = math.nan  # nothing off the mask may leak in
        field[4, 2:] = math.inf
    logprobs = logprobs.requires_grad_(True)
    loss, metrics = fn(logprobs, batch)
    loss.backward()
    assert math.isfinite(loss.item()) and all(type(v) is float and math.isfinite(v) for v in metrics.values())
    assert torch.isfinite(logprobs.grad).all()
    assert (logprobs.grad[1] == 0).all() and (logprobs.grad[4, 2:] == 0).all()
    empty_loss, _ = fn(logprobs, batch.with_fields(response_mask=torch.zeros(6, 5)))
    assert empty_loss.item() == pytest.approx(0.0, abs=1e-6) or isinstance(fn, DPOLoss)


VANISHING = [fn for fn in ALL_LOSSES if fn.vanishes_at_zero_advantage]
KEEPING = [KLCovPolicyLoss(kl_cov_ratio=0.5), RECPolicyLoss(regularizer="k2", regularizer_coef=0.1), SFTLoss()]
"""Losses with a term of their own: a row of zero advantages still has a gradient."""


@pytest.mark.parametrize("fn", VANISHING + KEEPING, ids=lambda f: type(f).__name__)
def test_a_loss_declared_to_vanish_at_zero_advantage_gives_those_rows_no_gradient(make_batch, fn):
    """What lets the torch engine run such rows without a backward pass: off-policy ratios
    (clipping, masks and gates acting) and every other row's advantages random."""
    logprobs, batch = random_batch(make_batch, torch.ones(6, 5), spread=0.5)
    batch.advantages[[0, 3]] = 0.0
    logprobs = logprobs.requires_grad_(True)
    fn(logprobs, batch)[0].backward()
    assert (logprobs.grad[[0, 3]] == 0).all() == fn.vanishes_at_zero_advantage
    assert (logprobs.grad[[1, 2, 4, 5]] != 0).any()
    assert {type(f).__name__ for f in VANISHING} >= {"PPOPolicyLoss", "GSPOPolicyLoss", "CISPOPolicyLoss"}


@pytest.mark.parametrize("fn", ALL_LOSSES, ids=lambda f: type(f).__name__)
def test_bf16_inputs(make_batch, fn):
    mask = (torch.rand(6, 8, generator=torch.Generator().manual_seed(1)) > 0.2).float()
    logprobs, batch = random_batch(make_batch, mask)
    _, batch16 = random_batch(make_batch, mask, dtype=torch.bfloat16)
    lp16 = logprobs.to(torch.bfloat16).requires_grad_(True)
    loss16, _ = fn(lp16, batch16)
    loss16.backward()
    assert loss16.dtype == torch.float32 and lp16.grad.dtype == torch.bfloat16
    loss32, _ = fn(logprobs, batch)
    assert loss16.item() == pytest.approx(loss32.item(), abs=0.05, rel=0.05)


@pytest.mark.parametrize("fn", ALL_LOSSES, ids=lambda f: type(f).__name__)
def test_extreme_log_ratios_stay_finite(make_batch, fn):
    """Current and old logprobs 30 nats apart either way (a stale or broken rollout)."""
    mask = torch.ones(6, 4)
    logprobs, batch = random_batch(make_batch, mask)
    batch.old_logprobs[:3] -= 30.0
    batch.old_logprobs[3:] = (batch.old_logprobs[3:] + 30.0).clamp(max=0.0)
    logprobs = logprobs.requires_grad_(True)
    loss, metrics = fn(logprobs, batch)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logprobs.grad).all()
    assert all(type(v) is float and math.isfinite(v) for v in metrics.values())


def test_missing_inputs_are_named(make_batch):
    with pytest.raises(ValueError, match="old_logprobs"):
        PPOPolicyLoss()(torch.zeros(1, 1), make_batch([[1]], advantages=[[1.0]]))
    with pytest.raises(ValueError, match="ref_logprobs"):
        DPOLoss()(torch.zeros(2, 1), make_batch([[1], [1]]))
