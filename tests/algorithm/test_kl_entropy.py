"""KL estimators (reward penalty, loss, adaptive coefficient) and entropy losses by hand."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm.entropy import DefaultEntropyLoss, MixEntropyLoss, NoEntropyLoss
from trinity.algorithm.kl import K1, K2, K3, AbsKL, CorrectedK3, LowVarKL, NoKL
from trinity.plugins import Kind, resolve

E = math.e


@pytest.mark.parametrize(
    "fn, expected",
    [
        # d = logp - ref = (1, -1, 30, -30)
        (K1(), [1.0, -1.0, 30.0, -30.0]),
        (K2(), [0.5, 0.5, 450.0, 450.0]),
        (AbsKL(), [1.0, 1.0, 30.0, 30.0]),
        # k3 = exp(-d) - 1 + d, with -d clamped to +-20 and the result to +-10 (verl's k3 and
        # low_var_kl alike; unclamped, d = -30 would give e^30 - 31 = 1.07e13)
        (K3(), [1 / E, E - 2, 10.0, 10.0]),
        (LowVarKL(), [1 / E, E - 2, 10.0, 10.0]),
    ],
    ids=["k1", "k2", "abs", "k3", "low_var_kl"],
)
def test_estimators_by_hand(fn, expected):
    logprobs = torch.tensor([[0.0, -1.0, 0.0, -30.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.0, 0.0, -30.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(fn.kl(logprobs, ref), torch.tensor([expected], dtype=torch.float64), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name, base", [("k1+", "k1"), ("kl+", "k1"), ("k3+", "k3"), ("low_var_kl+", "k3"),
                                        ("abs+", "abs")])  # fmt: skip
def test_straight_through_forms_take_k2_gradients(name, base):
    # d = (1, -2, 30): value of the base estimator, gradient d (that of d^2 / 2)
    logprobs = torch.tensor([[0.0, -2.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, 0.0, -30.0]])
    kl = resolve(Kind.KL_FN, name)().kl(logprobs, ref)
    kl.sum().backward()
    torch.testing.assert_close(kl, resolve(Kind.KL_FN, base)().kl(logprobs, ref))
    torch.testing.assert_close(logprobs.grad, torch.tensor([[1.0, -2.0, 30.0]]))


def test_verl_aliases():
    assert resolve(Kind.KL_FN, "kl") is resolve(Kind.KL_FN, "k1")
    assert resolve(Kind.KL_FN, "mse") is resolve(Kind.KL_FN, "k2")


def test_corrected_k3_by_hand(make_batch):
    # d = logp - ref = 1: k3 = e^-1 - 1 + 1 = 0.367879. Old -0.5: ratio e^0.5 = 1.648721, with gradient.
    # Old -2: ratio e^2 clipped to 2, no gradient through it: 2 * k3, gradient 2 * (1 - e^-1)
    batch = make_batch([[1, 1]], old_logprobs=[[-0.5, -2.0]], ref_logprobs=[[-1.0, -1.0]])
    logprobs = torch.zeros(1, 2, requires_grad=True)
    kl = CorrectedK3().per_token(logprobs, batch)
    kl.sum().backward()
    k3 = math.exp(-1)
    torch.testing.assert_close(kl, torch.tensor([[math.exp(0.5) * k3, 2 * k3]]))
    grads = [math.exp(0.5) * k3 + math.exp(0.5) * (1 - math.exp(-1)), 2 * (1 - math.exp(-1))]
    torch.testing.assert_close(logprobs.grad, torch.tensor([grads]))
    # as a reward penalty the ratio is 1: plain k3
    out, _ = CorrectedK3(kl_coef=1.0).apply_to_reward(batch.with_fields(old_logprobs=torch.zeros(1, 2)))
    torch.testing.assert_close(out.token_level_rewards, torch.tensor([[-k3, -k3]]))


def test_kl_penalty_on_reward_by_hand(make_batch):
    # reward 1 on the last token, old - ref = (0.5, 0.2) on row 0; k1 penalty 0.1 * (0.5, 0.2)
    batch = make_batch(
        [[1, 1, 0], [0, 0, 0]], [1.0, 3.0], [0, 1],
        old_logprobs=[[-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]], ref_logprobs=[[-1.5, -1.2, 4.0], [-1.0, -1.0, -1.0]],
    )  # fmt: skip
    out, metrics = K1(kl_coef=0.1).apply_to_reward(batch)
    torch.testing.assert_close(out.token_level_rewards, torch.tensor([[-0.05, 1 - 0.02, 0.0], [0.0, 0.0, 0.0]]))
    # kl: per-row masked mean (0.35 and 0 for the empty row), then the batch mean
    assert metrics == {"kl": pytest.approx(0.175), "kl_coef": 0.1}
    assert NoKL().apply_to_reward(batch) == (batch, {})


def test_adaptive_kl_coefficient(make_batch):
    # kl 0.35 vs target 0.1: error clipped to 0.2; coef *= 1 + 0.2 * batch_size 2 / horizon 10
    batch = make_batch([[1]] * 2, [0.0, 0.0], [0, 1], old_logprobs=[[0.0], [0.0]], ref_logprobs=[[-0.35], [-0.35]])
    fn = K1(kl_coef=0.1, adaptive=True, target_kl=0.1, horizon=10)
    _, first = fn.apply_to_reward(batch)
    _, second = fn.apply_to_reward(batch)
    assert first["kl_coef"] == 0.1 and second["kl_coef"] == pytest.approx(0.1 * 1.04)
    # kl below target: error -0.5 clipped to -0.2
    fn = K1(kl_coef=0.1, adaptive=True, target_kl=1.0, horizon=10)
    fn.apply_to_reward(batch)
    assert fn.kl_coef == pytest.approx(0.1 * 0.96)


def test_kl_loss_by_hand(make_batch):
    # k2 on d = (1, 2) and a masked token: coef 0.5 * mean(0.5, 2) = 0.625; grad 0.5 * d / 2
    batch = make_batch([[1, 1, 0]], ref_logprobs=[[-1.0, -2.0, 100.0]])
    logprobs = torch.zeros(1, 3, requires_grad=True)
    loss, metrics = K2(kl_coef=0.5).calculate_kl_loss(logprobs, batch)
    loss.backward()
    assert loss.item() == pytest.approx(0.625) and metrics == {"kl_loss": pytest.approx(1.25), "kl_coef": 0.5}
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.25, 0.5, 0.0]]))
    zero, metrics = NoKL(kl_coef=0.5).calculate_kl_loss(logprobs, batch)
    assert zero.item() == 0.0 and metrics == {}
    with pytest.raises(ValueError, match="ref_logprobs"):
        K2().calculate_kl_loss(logprobs, make_batch([[1, 1, 0]]))


def test_entropy_losses_by_hand(make_batch):
    entropy = torch.tensor([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0]])
    batch = make_batch([[1, 1, 0], [1, 1, 1]], is_expert=[False, True])
    # token mean over 5 tokens: 15 / 5 = 3; loss -0.01 * 3
    loss, metrics = DefaultEntropyLoss(entropy_coef=0.01)(entropy, batch)
    assert loss.item() == pytest.approx(-0.03) and metrics["entropy"] == pytest.approx(3.0)
    # mix: the rollout row only, mean 1.5
    loss, metrics = MixEntropyLoss(entropy_coef=0.01)(entropy, batch)
    assert loss.item() == pytest.approx(-0.015) and metrics["entropy"] == pytest.approx(1.5)
    loss, _ = DefaultEntropyLoss(entropy_coef=0.01, loss_agg_mode="seq-mean-token-mean")(entropy, batch)
    assert loss.item() == pytest.approx(-0.01 * (1.5 + 4.0) / 2)
    assert NoEntropyLoss()(entropy, batch)[0].item() == 0.0
    # an all-empty batch: 0, not NaN
    loss, _ = DefaultEntropyLoss(entropy_coef=0.01)(entropy, batch.with_fields(response_mask=torch.zeros(2, 3)))
    assert loss.item() == 0.0
