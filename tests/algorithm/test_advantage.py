"""Advantage functions against values worked out by hand from their formulas."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from trinity.algorithm.advantage import (
    AsymREAdvantage,
    GAEAdvantage,
    GRPOAdvantage,
    OPMDAdvantage,
    REINFORCEAdvantage,
    REINFORCEPlusPlusAdvantage,
    ReMaxAdvantage,
    RLOOAdvantage,
)
from trinity.algorithm.multi_step import StepWiseGRPOAdvantage
from trinity.algorithm.utils import masked_whiten, reverse_scan
from trinity.plugins import Kind, get_registry, resolve

# rows 0-2: task 0 with rewards 1, 0, 1; rows 3-4: task 1 with 0, 1; row 5 alone (reward 2)
REWARDS = [1.0, 0.0, 1.0, 0.0, 1.0, 2.0]
GROUPS = [0, 0, 0, 1, 1, 2]
MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1], [1, 1, 1]]
S3 = 1 / math.sqrt(3)  # (1/3) / std(1, 0, 1) with std = sqrt(1/3)


def outcome(fn, make_batch, rewards=REWARDS, groups=GROUPS, mask=MASK, **fields) -> torch.Tensor:
    batch, _ = fn(make_batch(mask, rewards, groups, **fields))
    assert torch.equal(batch.advantages, batch.returns)
    return batch.advantages


def broadcast(values: list[float], mask=MASK) -> torch.Tensor:
    return torch.tensor(values)[:, None] * torch.tensor(mask, dtype=torch.float32)


@pytest.mark.parametrize(
    "fn, expected",
    [
        (GRPOAdvantage(), [S3, -2 * S3, S3, -math.sqrt(0.5), math.sqrt(0.5), 0.0]),
        (GRPOAdvantage(norm_adv_by_std=False), [1 / 3, -2 / 3, 1 / 3, -0.5, 0.5, 0.0]),
        (RLOOAdvantage(), [0.5, -1.0, 0.5, -1.0, 1.0, 0.0]),
        (OPMDAdvantage(), [1 / 3, -2 / 3, 1 / 3, -0.5, 0.5, 0.0]),
        (AsymREAdvantage(baseline_shift=-0.1), [1 / 3 + 0.1, -2 / 3 + 0.1, 1 / 3 + 0.1, -0.4, 0.6, 0.0]),
        (REINFORCEAdvantage(), REWARDS),
        (StepWiseGRPOAdvantage(), [S3, -2 * S3, S3, -math.sqrt(0.5), math.sqrt(0.5), 0.0]),
    ],
    ids=["grpo", "grpo-no-std", "rloo", "opmd", "asymre", "reinforce", "step_wise_grpo-single-steps"],
)
def test_outcome_advantages_by_hand(make_batch, fn, expected):
    # std uses epsilon 1e-6: compare at 1e-5
    torch.testing.assert_close(outcome(fn, make_batch), broadcast(expected), atol=1e-5, rtol=0)


def test_opmd_logavgexp_baseline(make_batch):
    # group (0, 1), tau 1: b = log((e^0 + e^1) / 2) = 0.620115
    # group (1, 0, 1), tau 2: b = 2 log((2 e^0.5 + 1) / 3) = 2 log(1.432481) = 0.718815
    fn = OPMDAdvantage(opmd_baseline="logavgexp", tau=1.0)
    adv = outcome(fn, make_batch, rewards=[0.0, 1.0], groups=[7, 7], mask=[[1], [1]])
    torch.testing.assert_close(adv[:, 0], torch.tensor([-0.620115, 0.379885]), atol=1e-5, rtol=0)
    fn = OPMDAdvantage(opmd_baseline="logavgexp", tau=2.0)
    adv = outcome(fn, make_batch, rewards=[1.0, 0.0, 1.0], groups=[0, 0, 0], mask=[[1]] * 3)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.281185, -0.718815, 0.281185]), atol=1e-5, rtol=0)
    with pytest.raises(ValidationError, match="opmd_baseline"):
        OPMDAdvantage(opmd_baseline="max")


@pytest.mark.parametrize(
    "fn", [GRPOAdvantage(), RLOOAdvantage(), OPMDAdvantage(), AsymREAdvantage(), StepWiseGRPOAdvantage()]
)
def test_groups_of_one_and_all_equal_rewards_give_zero(make_batch, fn):
    adv = outcome(fn, make_batch, rewards=[3.0, 0.5, 0.5, 0.5], groups=[9, 4, 4, 4], mask=[[1, 1]] * 4)
    expected = torch.zeros(4, 2)
    if isinstance(fn, AsymREAdvantage):  # the shifted baseline leaves -shift on equal rewards
        expected[1:] = 0.1
    assert torch.equal(adv, expected)


def test_group_ids_need_not_be_dense(make_batch):
    dense = outcome(GRPOAdvantage(), make_batch)
    sparse = outcome(GRPOAdvantage(), make_batch, groups=[1000, 1000, 1000, -5, -5, 42])
    assert torch.equal(dense, sparse)


def test_scores_come_from_token_level_rewards_when_present(make_batch):
    # token-level rewards (e.g. after a KL penalty) sum to 2 and 0: group mean 1, std sqrt(2)
    tlr = [[0.5, 1.5], [0.0, 0.0]]
    adv = outcome(GRPOAdvantage(), make_batch, rewards=[0.0, 0.0], groups=[0, 0], mask=[[1, 1]] * 2,
                  token_level_rewards=tlr)  # fmt: skip
    torch.testing.assert_close(adv[:, 0], torch.tensor([1, -1]) / math.sqrt(2), atol=1e-5, rtol=0)


def test_empty_responses_produce_zeros_not_nan(make_batch):
    mask = [[0, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]]
    for fn in (GRPOAdvantage(), RLOOAdvantage(), REINFORCEPlusPlusAdvantage(), GAEAdvantage()):
        batch = make_batch(mask, [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], values=torch.ones(4, 3))
        out, metrics = fn(batch)
        assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all()
        assert (out.advantages[[0, 2]] == 0).all()
        assert all(math.isfinite(v) for v in metrics.values())
    out, _ = REINFORCEPlusPlusAdvantage()(make_batch([[0, 0]], [1.0], [0]))
    assert torch.equal(out.advantages, torch.zeros(1, 2))


def test_gae_by_hand(make_batch):
    # gamma 0.9, lam 0.8, values (0.5, 0.2, 0.4), reward 1 on the last token:
    # deltas: t2 = 1 - 0.4 = 0.6; t1 = 0.9*0.4 - 0.2 = 0.16; t0 = 0.9*0.2 - 0.5 = -0.32
    # A2 = 0.6; A1 = 0.16 + 0.72*0.6 = 0.592; A0 = -0.32 + 0.72*0.592 = 0.10624
    # row 2 skips the tool token t1 (value 9 ignored): A2 = 0.6; A0 = (0.9*0.4 - 0.5) + 0.72*0.6 = 0.292
    batch = make_batch([[1, 1, 1], [1, 0, 1]], [1.0, 1.0], [0, 1], values=[[0.5, 0.2, 0.4], [0.5, 9.0, 0.4]])
    out, _ = GAEAdvantage(gamma=0.9, lam=0.8)(batch)
    raw = torch.tensor([[0.10624, 0.592, 0.6], [0.292, 0.0, 0.6]])
    torch.testing.assert_close(out.returns, (raw + batch.values) * batch.response_mask, atol=1e-6, rtol=0)
    # whitened over the 5 masked tokens: mean 0.438048, unbiased var
    mean = (0.10624 + 0.592 + 0.6 + 0.292 + 0.6) / 5
    var = sum((v - mean) ** 2 for v in (0.10624, 0.592, 0.6, 0.292, 0.6)) / 4
    torch.testing.assert_close(out.advantages, (raw - mean) / math.sqrt(var + 1e-8) * batch.response_mask)
    # the first row alone has no holes in its mask (a shortcut path): same returns
    alone, _ = GAEAdvantage(gamma=0.9, lam=0.8)(batch.select([0]))
    torch.testing.assert_close(alone.returns, out.returns[:1])
    with pytest.raises(ValueError, match="values"):
        GAEAdvantage()(make_batch([[1]], [1.0], [0]))


def test_reinforce_plus_plus_by_hand(make_batch):
    # gamma 0.5, dense rewards (1, 2, 3): G = (1 + 0.5*(2 + 0.5*3), 2 + 0.5*3, 3) = (2.75, 3.5, 3)
    # with the middle token off the mask its reward and discount are skipped: G0 = 1 + 0.5*3 = 2.5
    batch = make_batch([[1, 1, 1], [1, 0, 1]], [0.0, 0.0], [0, 1], token_level_rewards=[[1, 2, 3], [1, 2, 3]])
    out, _ = REINFORCEPlusPlusAdvantage(gamma=0.5)(batch)
    returns = torch.tensor([[2.75, 3.5, 3.0], [2.5, 0.0, 3.0]])
    torch.testing.assert_close(out.returns, returns)
    torch.testing.assert_close(out.advantages, masked_whiten(returns, batch.response_mask) * batch.response_mask)
    alone, _ = REINFORCEPlusPlusAdvantage(gamma=0.5)(batch.select([0]))  # no holes: the constant-discount path
    torch.testing.assert_close(alone.returns, returns[:1])


def test_remax_by_hand(make_batch):
    # reward 2 placed on the last token, greedy baseline 0.5: returns 2 up to the last token
    batch = make_batch([[1, 1, 0], [0, 0, 0]], [2.0, 1.0], [0, 1], reward_baselines=[0.5, 0.25])
    out, _ = ReMaxAdvantage()(batch)
    torch.testing.assert_close(out.returns, torch.tensor([[2.0, 2.0, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(out.advantages, torch.tensor([[1.5, 1.5, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        ReMaxAdvantage()(make_batch([[1]], [1.0], [0]))


def test_step_wise_grpo_broadcasts_the_last_step(make_batch):
    # task 0: run A (steps 1, 0 in shuffled order, last reward 1), run B (steps 0-2, last reward 0)
    # the runs' last-step scores (1, 0): mean 0.5, std sqrt(0.5) -> A = +-0.707107 on every step
    rewards = [1.0, 5.0, 3.0, 3.0, 0.0, 2.0]
    kwargs = {"run_ids": [10, 10, 11, 11, 11, 12], "step_ids": [1, 0, 0, 1, 2, 0]}
    mask = [[1, 1]] * 6
    groups = [0, 0, 0, 0, 0, 1]
    adv = outcome(StepWiseGRPOAdvantage(), make_batch, rewards, groups, mask, **kwargs)[:, 0]
    a = math.sqrt(0.5)
    torch.testing.assert_close(adv, torch.tensor([a, a, -a, -a, -a, 0.0]), atol=1e-5, rtol=0)
    adv = outcome(StepWiseGRPOAdvantage(enable_step_norm=True), make_batch, rewards, groups, mask, **kwargs)[:, 0]
    torch.testing.assert_close(adv, torch.tensor([a / 2, a / 2, -a / 3, -a / 3, -a / 3, 0.0]), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "fn",
    [GRPOAdvantage(), RLOOAdvantage(), GAEAdvantage(gamma=0.99, lam=0.95), REINFORCEPlusPlusAdvantage(gamma=0.9)],
    ids=["grpo", "rloo", "gae", "reinforceplusplus"],
)
def test_bf16_inputs_give_float32_advantages(make_batch, fn):
    gen = torch.Generator().manual_seed(3)
    mask = (torch.rand(8, 16, generator=gen) > 0.2).float()
    rewards, values = torch.randn(8, generator=gen), torch.randn(8, 16, generator=gen)
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    out32, _ = fn(make_batch(mask, rewards, groups, values=values))
    out16, _ = fn(make_batch(mask, rewards, groups, dtype=torch.bfloat16, values=values))
    assert out16.advantages.dtype == torch.float32
    torch.testing.assert_close(out16.advantages, out32.advantages, atol=0.05, rtol=0.02)


def test_reverse_scan_matches_a_loop_on_long_sequences():
    # R = 1024 with a small discount (0.3**1024 underflows any power-based trick) and holes
    gen = torch.Generator().manual_seed(0)
    term = torch.randn(4, 1024, generator=gen, dtype=torch.float64)
    coef = torch.where(torch.rand(4, 1024, generator=gen) > 0.1, 0.3, 1.0).double()
    expected, carry = torch.zeros_like(term), torch.zeros(4, dtype=torch.float64)
    for t in reversed(range(1024)):
        carry = term[:, t] + coef[:, t] * carry
        expected[:, t] = carry
    torch.testing.assert_close(reverse_scan(coef, term), expected, rtol=1e-12, atol=1e-12)
    constant = torch.full_like(coef, 0.3)
    expected = reverse_scan(constant, term)
    torch.testing.assert_close(reverse_scan(0.3, term), expected, rtol=1e-12, atol=1e-12)
    assert expected[:, -1].equal(term[:, -1]) and expected[:, 0].ne(term[:, 0]).all()


def test_args_are_validated():
    with pytest.raises(ValidationError, match="std_normalise"):
        GRPOAdvantage(std_normalise=False)
    with pytest.raises(ValidationError, match="epsilon"):
        GRPOAdvantage(epsilon=0.0)
    with pytest.raises(ValidationError, match="std_cal_level"):
        GRPOAdvantage(std_cal_level="task")
    assert GRPOAdvantage(epsilon="1e-3").args.epsilon == 1e-3  # YAML strings coerce


@pytest.mark.parametrize("name", sorted(get_registry().names(Kind.ADVANTAGE_FN)))
def test_every_advantage_is_finite_and_zero_off_the_mask(make_batch, name):
    """Padding, an empty response, a group of one and garbage (NaN, inf) off the mask."""
    gen = torch.Generator().manual_seed(5)
    mask = torch.ones(7, 4)
    mask[1] = 0
    mask[2, 2:] = 0
    mask[5, 1] = 0  # a hole (a tool turn)
    old = -torch.rand(7, 4, generator=gen)
    garbage = torch.where(mask.bool(), 0.0, math.nan)
    batch = make_batch(
        mask, [1.0, 0.0, 1.0, 2.0, 0.0, 1.0, 3.0], [0, 0, 0, 1, 1, 1, 2], values=torch.randn(7, 4, generator=gen),
        old_logprobs=old + garbage, teacher_logprobs=old - torch.rand(7, 4, generator=gen) + garbage,
        reward_baselines=torch.rand(7, generator=gen), run_ids=[0, 0, 1, 2, 3, 3, 4], step_ids=[0, 1, 0, 0, 0, 1, 0],
        entropy_scores=-torch.rand(7, 4, generator=gen) + garbage, expected_entropy_scores=torch.rand(7, 4) + garbage,
    )  # fmt: skip
    fn = resolve(Kind.ADVANTAGE_FN, name)()
    out, metrics = fn(batch)
    assert out.advantages.dtype == torch.float32 and torch.isfinite(out.advantages).all()
    assert torch.isfinite(out.returns).all() and (out.advantages[out.response_mask == 0] == 0).all()
    assert all(type(v) is float and math.isfinite(v) for v in metrics.values()), metrics
    if name not in ("ppo", "reinforceplusplus", "reinforce", "remax", "on_policy_distill", "jsd", "grpo_verl",
                    "opmd_verl", "asymre_verl", "reinforce_plus_plus_baseline"):  # fmt: skip
        assert (out.advantages[6] == 0).all(), "a group of one has no baseline"
