"""GRPO advantages that spare the policy's entropy: Clip_B and Clip_V (Trinity-RFT ``clipb``,
``clipv``; arXiv:2602.03392).

A policy-gradient step with advantage ``A`` on token ``k`` changes the entropy by about
``-eta A (S_k - N_k)``, with ``S = p (H + log p)`` the sampled token's entropy score and ``N`` its
expectation over the vocabulary (``batch.entropy_scores``, ``batch.expected_entropy_scores``; the
training engine computes both in one recomputation, where Trinity-RFT reads ``S`` from the rollout
logprobs). Negative-advantage tokens whose step would lower the entropy most leave the loss (their
``response_mask`` becomes 0); positive ones always train. Groups of one get advantage 0.
"""

from __future__ import annotations

from abc import abstractmethod

from pydantic import Field

from trinity.algorithm.advantage import GroupNormalisedAdvantage
from trinity.algorithm.base import Metrics
from trinity.algorithm.utils import masked_mean
from trinity.common.batch import Batch
from trinity.common.lazy_import import lazy_module

torch = lazy_module("torch")

MIN_STD = 1e-12
"""Below this spread of the signal over the batch every token is kept."""


def population_std(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population std of ``values`` over the masked tokens of the batch."""
    mean = masked_mean(values, mask)
    return mean, masked_mean((values - mean).square(), mask).sqrt()


class _EntropyClip(GroupNormalisedAdvantage):
    """GRPO advantages, then ``keep`` decides which tokens stay in the loss."""

    needs_entropy_scores = True

    @abstractmethod
    def keep(self, batch: Batch, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """bool ``[B, R]``: the tokens that stay in the loss."""

    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]:
        if batch.entropy_scores is None or batch.expected_entropy_scores is None:
            raise ValueError(f"{type(self).__name__} needs batch.entropy_scores (the training engine fills them)")
        batch, metrics = super().__call__(batch)
        mask = batch.response_mask.float()
        with torch.no_grad():
            kept = mask * self.keep(batch, batch.advantages, mask)
        clipped = mask - kept
        for name, part in (("", mask), ("_pos", batch.advantages > 0), ("_neg", batch.advantages < 0)):
            tokens = mask * part  # the share of these tokens taken out (0 when there are none)
            metrics[f"frac_clipped{name}"] = (clipped * part).sum().item() / max(tokens.sum().item(), 1.0)
        return batch.with_fields(
            response_mask=kept, advantages=batch.advantages * kept, returns=batch.returns * kept
        ), metrics


class ClipBAdvantage(_EntropyClip):
    """Clip_B (Trinity-RFT ``clipb``, arXiv:2602.03392): with ``z = S - mean(S)`` over the batch's
    tokens (population std ``sigma``), a negative-advantage token stays only when ``z >= -mu sigma``;
    zero and positive ones stay."""

    class Args(GroupNormalisedAdvantage.Args):
        mu: float = Field(2.5, gt=0, description="how many stds below the mean entropy score a token may lie")

    def keep(self, batch: Batch, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mean, std = population_std(batch.entropy_scores.float(), mask)
        if std.item() < MIN_STD:
            return torch.ones_like(mask, dtype=torch.bool)
        return (advantages >= 0) | (batch.entropy_scores.float() - mean >= -self.args.mu * std)


class ClipVAdvantage(_EntropyClip):
    """Clip_V (Trinity-RFT ``clipv``, arXiv:2602.03392): with ``D = N - S`` (population std ``sigma``
    over the batch's tokens), a non-positive-advantage token stays only when ``D <= mu sigma``; at
    most ``max_frac`` of the tokens (at least one) are taken out, the negative ones of largest ``D``
    first."""

    class Args(GroupNormalisedAdvantage.Args):
        mu: float = Field(8.5, gt=0, description="how many stds of N - S a token may exceed")
        max_frac: float = Field(1e-4, gt=0, le=1, description="the largest share of the tokens taken out")

    def keep(self, batch: Batch, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        drift = (batch.expected_entropy_scores - batch.entropy_scores).float()
        _, std = population_std(drift, mask)
        if std.item() < MIN_STD:
            return torch.ones_like(mask, dtype=torch.bool)
        within = drift <= self.args.mu * std
        keep = (advantages > 0) | within
        valid = mask > 0
        if (valid & ~keep).sum().item() <= self.args.max_frac * valid.sum().item():
            return keep
        budget = max(int(self.args.max_frac * valid.sum().item()), 1)
        candidates = valid & (advantages < 0) & ~within
        if int(candidates.sum()) <= budget:
            return keep
        top = torch.topk(torch.where(candidates, drift, -torch.inf).flatten(), budget).indices
        keep = keep | candidates
        keep.view(-1)[top] = False
        return keep
