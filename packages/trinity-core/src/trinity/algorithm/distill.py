"""Distillation advantages: the teacher's log-probabilities of the student's own samples.

The workflow stores the teacher's logprobs of each response token in
``Experience.teacher_logprobs`` (``on_policy_distill_workflow`` does); ``batch.old_logprobs``
are the student's sampling logprobs. A per-token advantage then trains the student towards
the teacher with an ordinary policy loss (``ppo``, or ``importance_sampling`` without clipping).
"""

from __future__ import annotations

import logging
import math

from pydantic import Field

from trinity.algorithm.base import AdvantageFn, Metrics
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module
from trinity.config.base import PluginArgs

torch = lazy_module("torch")

logger = logging.getLogger(__name__)


def _student_and_teacher(batch: Batch, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 student (old) and teacher logprobs, 0 off the response mask."""
    if batch.teacher_logprobs is None or batch.old_logprobs is None:
        raise ValueError(
            f"advantage_fn {name!r} needs batch.teacher_logprobs (Experience.teacher_logprobs, written by a "
            "distillation workflow such as on_policy_distill_workflow) and the student's old_logprobs"
        )
    mask = batch.response_mask.bool()
    return torch.where(mask, batch.old_logprobs.float(), 0.0), torch.where(mask, batch.teacher_logprobs.float(), 0.0)


def _distill_metrics(divergence: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, name: str) -> Metrics:
    per_row = (divergence * mask).sum(-1)
    return {
        f"{name}/mean": per_row.mean().item(),
        f"{name}/std": per_row.std().item() if per_row.numel() > 1 else 0.0,
        "advantages/mean": advantages.sum(-1).mean().item(),
    }


class OnPolicyDistillAdvantage(AdvantageFn):
    """On-policy distillation (Agarwal et al. 2024, GKD, arXiv:2306.13649; Thinking Machines'
    Tinker recipe; Trinity-RFT ``on_policy_distill``): the reverse-KL reward per token,
    ``A_t = kl_coef * (logp_teacher_t - logp_student_t)``. Metric ``kl/mean``: the summed
    ``logp_student - logp_teacher`` per response, averaged."""

    class Args(PluginArgs):
        kl_coef: float = Field(1.0, gt=0, description="scale of the per-token reverse-KL advantage")

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            student, teacher = _student_and_teacher(batch, "on_policy_distill")
            advantages = self.args.kl_coef * (teacher - student) * mask
        metrics = _distill_metrics(student - teacher, advantages, mask, "kl")
        return batch.with_fields(advantages=advantages, returns=advantages), metrics


class JSDAdvantage(AdvantageFn):
    """Jensen-Shannon distillation (Trinity-RFT ``jsd``; the generalised JSD of GKD,
    arXiv:2306.13649): the student minimises ``JSD = beta KL(teacher||M) + (1 - beta)
    KL(student||M)``, ``M = beta teacher + (1 - beta) student``.

    The advantage of a sampled token is the JSD's own policy gradient: with ``s``, ``t`` the
    student's and teacher's logprobs (each divided by ``temperature``) and
    ``log m = logaddexp(s + log(1 - beta), t + log beta)``, ``A_t = kl_coef (1 - beta) (log m - s)``
    (``E_student[A grad log p] = -grad JSD`` exactly). ``beta = 0`` is the reverse
    KL(student||teacher), ``A_t = kl_coef (t - s)`` (``on_policy_distill``); ``beta = 1`` the
    forward KL(teacher||student), ``A_t = kl_coef (exp(t - s) - 1)``.

    Trinity-RFT's advantage is ``-kl_coef * JSD_t`` with ``JSD_t = beta (t - log m) + (1 - beta)
    (s - log m)``: the teacher's term without its importance weight. That is >= 0 for every
    token (log m >= the mixture of logs), so every sampled token is reinforced, most where
    student and teacher disagree in either direction; in the learning matrix the student's
    replies collapsed (reward 0.22 -> 0.00 in 40 steps). ``chunk_size`` (Trinity-RFT's memory
    knob) is accepted and has no effect: the computation here is elementwise.
    """

    class Args(PluginArgs):
        lambda_coef: float = Field(0.5, ge=0, le=1, description="weight beta of the teacher in the mixture")
        kl_coef: float = Field(1.0, gt=0, description="scale of the per-token advantage")
        temperature: float = Field(1.0, gt=0, description="divides both logprobs before the divergence")
        chunk_size: int | None = Field(None, gt=0, description="Trinity-RFT's chunking; no effect here")

    def __init__(self, **args) -> None:
        super().__init__(**args)
        if self.args.chunk_size is not None:
            logger.warning("advantage_fn 'jsd': chunk_size has no effect here (the JSD is computed elementwise)")

    def per_token(self, student: torch.Tensor, teacher: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sampled token: the advantage before ``kl_coef`` (see the class docstring) and an
        unbiased estimate of the divergence under the student's sampling (the metric)."""
        beta = self.args.lambda_coef
        if beta == 0:
            return teacher - student, student - teacher
        weight = torch.exp(teacher - student)  # the teacher's importance weight
        if beta == 1:
            return weight - 1, weight * (teacher - student)
        mixture = torch.logaddexp(student + math.log1p(-beta), teacher + math.log(beta))
        divergence = (1 - beta) * (student - mixture) + beta * weight * (teacher - mixture)
        return (1 - beta) * (mixture - student), divergence

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            student, teacher = _student_and_teacher(batch, "jsd")
            advantage, jsd = self.per_token(student / self.args.temperature, teacher / self.args.temperature)
            advantages = self.args.kl_coef * advantage * mask
        return batch.with_fields(advantages=advantages, returns=advantages), _distill_metrics(
            jsd * mask, advantages, mask, "jsd"
        )
