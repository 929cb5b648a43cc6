"""Interfaces of the algorithm functions: what training engines call and plugins implement.

Each function is built from its config args (``algorithm.<kind>_args``), validated by its declared
``Args`` model, and works on ``[B, R]`` response-aligned tensors of a ``Batch``; it returns its
result and a dict of plain-float metrics named without prefix (the engine adds ``actor/``). The
conventions the built-in functions keep (masks, ``loss_agg_mode``, dtypes, how the loss terms add
up) are in ``docs/algorithms.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from trinity.common.batch import Batch
from trinity.config.base import PluginArgs

if TYPE_CHECKING:
    import torch

Metrics = dict[str, float]


class AlgorithmFn(ABC):  # noqa: B024 - the abstract methods live on each kind
    """Common base: construction from args, validated by the class's ``Args`` model."""

    Args: ClassVar[type[PluginArgs]] = PluginArgs

    def __init__(self, **args: Any) -> None:
        self.args = self.Args.model_validate(args)

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """Every argument with its default (what the config pass fills in)."""
        return cls.Args().model_dump()

    @property
    def loss_agg_mode(self) -> str | None:
        """How the function aggregates over tokens and rows (engines weight micro-batches by it)."""
        return getattr(self.args, "loss_agg_mode", None)


class AdvantageFn(AlgorithmFn):
    """Fills ``batch.advantages`` (and ``batch.returns``) from rewards/values."""

    needs_entropy_scores: ClassVar[bool] = False
    """The engine fills ``batch.entropy_scores`` first (the entropy-aware ``clipb``, ``clipv``)."""

    @abstractmethod
    def __call__(self, batch: Batch) -> tuple[Batch, Metrics]: ...


class PolicyLossFn(AlgorithmFn):
    """The actor's loss from current logprobs ``[B, R]`` and the batch."""

    vanishes_at_zero_advantage: ClassVar[bool] = False
    """Whether every per-token term is a multiple of its token's advantage, whatever the logprobs:
    a row whose advantages are all 0 then adds nothing to the gradient, and the torch engine runs
    it without one (under GRPO, a group whose samples all scored alike)."""

    @abstractmethod
    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]: ...

    def prepare(self, batch: Batch, current_logprobs: Callable[[Batch], torch.Tensor]) -> tuple[Batch, Metrics]:
        """Trainer side, once per step before the engine splits the batch: what the loss needs
        from the whole batch (``m2po``'s mask); ``current_logprobs`` runs the actor over it."""
        return batch, {}


class KLFn(AlgorithmFn):
    """KL between current and reference logprobs: as a reward penalty or as a loss."""

    @abstractmethod
    def apply_to_reward(self, batch: Batch) -> tuple[Batch, Metrics]:
        """Subtract ``kl_coef * kl`` from token-level rewards (``kl_penalty_fn``)."""

    @abstractmethod
    def calculate_kl_loss(self, logprobs: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]:
        """``kl_coef * aggregated kl`` as a loss term (``kl_loss_fn``)."""

    @property
    def loss_has_gradient(self) -> bool:
        """Whether ``calculate_kl_loss`` adds to the gradient (not without a KL term or at ``kl_coef`` 0)."""
        return True


class EntropyLossFn(AlgorithmFn):
    """A loss term from per-token entropy ``[B, R]`` (negative coef * entropy to encourage it)."""

    @abstractmethod
    def __call__(self, entropy: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, Metrics]: ...


class SampleStrategy(AlgorithmFn):
    """Trainer side: turns experiences read from the buffer into the training batch."""

    @abstractmethod
    def sample(self, experiences: list, step: int, current_version: int) -> tuple[Batch, Metrics]: ...

    def expert_reads(self, train_batch_size: int) -> tuple[str, int] | None:
        """``(auxiliary buffer name, rows)``: how much of each batch the trainer reads from expert
        data in ``buffer.trainer_input.auxiliary_buffers`` (tagged ``info["is_expert"]``) instead
        of rollouts; None for rollouts only."""
        return None


class ExperienceOperator(AlgorithmFn):
    """Explorer side: one step of the experience pipeline (``data_processor.experience_pipeline``),
    applied to a step's experiences before they are written (filters, reward shaping)."""

    @abstractmethod
    def process(self, experiences: list) -> tuple[list, Metrics]:
        """The experiences to keep (changed in place where the operator shapes them) and metrics."""

    @property
    def refill_rounds(self) -> int:
        """How many more batches of tasks the explorer may run in a step to make up for the task
        groups this operator drops (0: none)."""
        return 0

    def close(self) -> None:  # noqa: B027 - most operators hold nothing
        """At the end of exploring: release what the operator holds."""


@dataclass(frozen=True)
class AlgorithmType:
    """An algorithm: defaults for the functions above and what it needs to run.

    The config pass fills every unset ``algorithm.<fn>`` from the type and every fn's args
    from the fn's ``default_args()``. ``summary`` and ``paper`` document the type (the
    algorithm table of ``docs/algorithms.md`` lists them).
    """

    name: str
    summary: str
    """What the algorithm optimises, in one sentence."""
    paper: str
    """Where it comes from: authors, year, arXiv id (or the reference implementation)."""
    advantage_fn: str = "ppo"
    policy_loss_fn: str = "ppo"
    kl_penalty_fn: str = "none"
    kl_loss_fn: str = "k2"
    entropy_loss_fn: str = "default"
    sample_strategy: str = "default"
    use_critic: bool = False
    use_reference: bool = False
    """The policy loss itself reads reference logprobs (``dpo``). A KL function needs them too,
    so the engines load a reference only when ``needs_reference`` says so."""
    requires_repeat_times_gt_1: bool = False
    repeat_times: int | None = None
    """Forced repeat_times (``dpo`` uses 2), or None to keep the config's."""
    recommended_repeat_times: int | None = None
    """The rollouts per task upstream's preset suggests (documentation only: the config's
    ``repeat_times`` is kept, as in Trinity-RFT, whose default of 1 is never replaced)."""
    data_schema: str = "rollout"
    """``rollout`` (explorer experiences), ``dpo`` (chosen/rejected), ``sft`` (prompt/response)
    or ``cpt`` (plain text, every token trains)."""
    compute_advantage_in_trainer: bool = True
    """False: the loss reads no advantages (SFT-like types), so the trainer applies neither the
    KL reward penalty nor the advantage function."""

    def needs_reference(self, kl_loss_fn: str | None, kl_penalty_fn: str | None) -> bool:
        """Whether the training engine loads a frozen reference model: the loss reads it, or
        a KL function (loss or reward penalty) is on. GRPO with ``kl_loss_fn: none`` has none,
        which saves a model's memory and a forward pass per step (as in verl)."""
        return self.use_reference or bool({kl_loss_fn, kl_penalty_fn} - {None, "none"})
