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
    arXiv:2306.13649, in ms-swift's log-space form): ``A_t = -kl_coef * JSD_t``.

    With ``s``, ``t`` the student's and teacher's logprobs of the sampled token (each divided
    by ``temperature``), ``beta = lambda_coef`` and the mixture
    ``log m = logsumexp(s + log(1 - beta), t + log beta)``:
    ``JSD = beta * (t - log m) + (1 - beta) * (s - log m)``; ``beta = 0`` gives ``s - t``
    (KL(student || teacher)), ``beta = 1`` gives ``t - s``. ``chunk_size`` (Trinity-RFT's
    memory knob) is accepted and has no effect: the computation here is elementwise.
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

    def divergence(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        """Per-token JSD of the sampled tokens (see the class docstring)."""
        beta = self.args.lambda_coef
        if beta == 0:
            return student - teacher
        if beta == 1:
            return teacher - student
        mixture = torch.logaddexp(student + math.log1p(-beta), teacher + math.log(beta))
        return beta * (teacher - mixture) + (1 - beta) * (student - mixture)

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        mask = batch.response_mask.float()
        with torch.no_grad():
            student, teacher = _student_and_teacher(batch, "jsd")
            jsd = self.divergence(student / self.args.temperature, teacher / self.args.temperature) * mask
            advantages = -self.args.kl_coef * jsd
        return batch.with_fields(advantages=advantages, returns=advantages), _distill_metrics(
            jsd, advantages, mask, "jsd"
        )
