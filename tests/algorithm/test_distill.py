"""Distillation advantages by hand (Trinity-RFT's recorded outputs: test_trinity_rft_reference.py)."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm.distill import JSDAdvantage, OnPolicyDistillAdvantage

STUDENT = [[-1.0, -2.0, -0.5], [-0.1, 0.0, 0.0]]
TEACHER = [[-0.5, -3.0, -0.5], [-2.3, 9.0, 9.0]]
MASK = [[1, 1, 1], [1, 0, 0]]


def test_on_policy_distill_by_hand(make_batch):
    batch = make_batch(MASK, old_logprobs=STUDENT, teacher_logprobs=TEACHER)
    out, metrics = OnPolicyDistillAdvantage(kl_coef=2.0)(batch)
    torch.testing.assert_close(out.advantages, torch.tensor([[1.0, -2.0, 0.0], [-4.4, 0.0, 0.0]]))
    # summed student - teacher per response: (-0.5 + 1 + 0) and 2.2; mean 1.35
    assert metrics["kl/mean"] == pytest.approx(1.35)
    with pytest.raises(ValueError, match="teacher_logprobs"):
        OnPolicyDistillAdvantage()(make_batch(MASK, old_logprobs=STUDENT))


def jsd(s: float, t: float, beta: float) -> float:
    """Trinity-RFT's per-token JSD: the pure KL log-ratios at beta 0 and 1 (where the mixture
    formula would give 0), the mixture form between."""
    if beta in (0.0, 1.0):
        return s - t if beta == 0 else t - s
    m = math.log((1 - beta) * math.exp(s) + beta * math.exp(t))
    return beta * (t - m) + (1 - beta) * (s - m)


@pytest.mark.parametrize("beta", [0.0, 0.25, 0.5, 1.0])
def test_jsd_by_hand(make_batch, beta):
    batch = make_batch(MASK, old_logprobs=STUDENT, teacher_logprobs=TEACHER)
    out, _ = JSDAdvantage(lambda_coef=beta, kl_coef=3.0, temperature=2.0)(batch)
    expected = [[-3.0 * jsd(s / 2, t / 2, beta) * m for s, t, m in zip(*rows, strict=True)]
                for rows in zip(STUDENT, TEACHER, MASK, strict=True)]  # fmt: skip
    torch.testing.assert_close(out.advantages, torch.tensor(expected), atol=1e-6, rtol=1e-6)
