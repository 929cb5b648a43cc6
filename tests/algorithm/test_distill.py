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


def jsd_advantage(s: float, t: float, beta: float) -> float:
    """The JSD's policy-gradient weight of a sampled token: reverse KL at beta 0, forward KL at 1."""
    if beta == 0:
        return t - s
    if beta == 1:
        return math.exp(t - s) - 1
    m = math.log((1 - beta) * math.exp(s) + beta * math.exp(t))
    return (1 - beta) * (m - s)


@pytest.mark.parametrize("beta", [0.0, 0.25, 0.5, 1.0])
def test_jsd_by_hand(make_batch, beta):
    batch = make_batch(MASK, old_logprobs=STUDENT, teacher_logprobs=TEACHER)
    out, _ = JSDAdvantage(lambda_coef=beta, kl_coef=3.0, temperature=2.0)(batch)
    expected = [[3.0 * jsd_advantage(s / 2, t / 2, beta) * m for s, t, m in zip(*rows, strict=True)]
                for rows in zip(STUDENT, TEACHER, MASK, strict=True)]  # fmt: skip
    torch.testing.assert_close(out.advantages, torch.tensor(expected), atol=1e-6, rtol=1e-6)


def divergence(student: torch.Tensor, teacher: torch.Tensor, beta: float) -> torch.Tensor:
    """The generalised JSD of two distributions over a vocabulary; the pure KLs at beta 0 and 1."""
    if beta == 0:
        return (student * (student.log() - teacher.log())).sum()
    if beta == 1:
        return (teacher * (teacher.log() - student.log())).sum()
    mixture = (1 - beta) * student + beta * teacher
    kl = lambda p: (p * (p.log() - mixture.log())).sum()  # noqa: E731
    return beta * kl(teacher) + (1 - beta) * kl(student)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 0.9, 1.0])
def test_jsd_advantages_are_the_divergences_policy_gradient(make_batch, beta):
    """Summed over the vocabulary, each token's advantage times its score (the policy gradient of
    the student's sampling) is minus the gradient of the divergence: the student moves towards
    the teacher. Trinity-RFT's -JSD_t is >= 0 for every token and does not (its gradient differs)."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(9, generator=generator, requires_grad=True)
    teacher = torch.softmax(2 * torch.randn(9, generator=generator), 0)
    (exact,) = torch.autograd.grad(divergence(torch.softmax(logits, 0), teacher, beta), logits)
    vocab = torch.arange(9)
    student = torch.log_softmax(logits, 0)
    batch = make_batch([[1] * 9], old_logprobs=[student.tolist()], teacher_logprobs=[teacher.log().tolist()])
    advantages = JSDAdvantage(lambda_coef=beta)(batch)[0].advantages[0]
    policy_gradient = (student.exp().detach() * advantages * student[vocab]).sum()
    (estimated,) = torch.autograd.grad(policy_gradient, logits, retain_graph=True)
    torch.testing.assert_close(estimated, -exact, atol=1e-5, rtol=1e-4)
    if 0 < beta < 1:
        s, t = student.detach(), teacher.log()
        m = torch.logaddexp(s + math.log1p(-beta), t + math.log(beta))
        trinity_rft = -(beta * (t - m) + (1 - beta) * (s - m))
        assert (trinity_rft >= 0).all()
        (theirs,) = torch.autograd.grad((student.exp().detach() * trinity_rft * student).sum(), logits)
        assert not torch.allclose(theirs, -exact, atol=1e-3)
