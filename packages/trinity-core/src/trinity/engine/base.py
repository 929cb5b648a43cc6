"""Interfaces of the engines: rollout (explorer side) and training (trainer side).

The reference engines of trinity-core (transformers / torch, CPU or one GPU) and the
plugin engines (trinity-vllm, trinity-verl) implement these. An engine is built from
the whole ``Config`` plus, for rollout engines, its ``InferenceModelConfig``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from trinity.common.batch import Batch

Metrics = dict[str, float]


@dataclass
class SamplingArgs:
    """Per-call sampling settings; None falls back to the model config."""

    n: int = 1
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    max_tokens: Optional[int] = None
    min_tokens: Optional[int] = None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = True
    seed: Optional[int] = None


@dataclass
class Completion:
    """One sampled response of a prompt."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    text: str
    finish_reason: str
    """``stop`` or ``length``."""
    prompt_truncated: bool = False
    model_version: int = 0


class RolloutEngine(ABC):
    """Generates responses with logprobs; receives new weights from the trainer."""

    model_version: int = 0

    @abstractmethod
    def generate(self, prompts: list[str], args: SamplingArgs) -> list[list[Completion]]:
        """``args.n`` completions for each prompt (raw text, no chat template)."""

    @abstractmethod
    def chat(self, conversations: list[list[dict[str, Any]]], args: SamplingArgs) -> list[list[Completion]]:
        """``args.n`` completions for each conversation, through the chat template."""

    @abstractmethod
    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Logprob of every token given its prefix (first token: 0.0)."""

    @abstractmethod
    def update_weights(self, state_dict: Optional[dict[str, torch.Tensor]] = None, checkpoint_path: Optional[str] = None, version: int = 0) -> None:
        """Load new weights from a state dict or a checkpoint directory; set ``model_version``."""

    def shutdown(self) -> None:
        """Release the engine's resources."""


class TrainingEngine(ABC):
    """Runs the updates of the actor (and critic) with the configured algorithm functions."""

    @abstractmethod
    def train_step(self, batch: Batch) -> Metrics:
        """One optimisation step on ``batch``; returns ``actor/*``, ``critic/*`` metrics."""

    @abstractmethod
    def compute_logprobs(self, batch: Batch) -> torch.Tensor:
        """Current actor logprobs ``[B, R]`` of the batch's responses."""

    @abstractmethod
    def save_checkpoint(self, directory: str, step: int) -> None:
        """Weights (HF format), optimizer and scheduler state under ``directory``."""

    @abstractmethod
    def load_checkpoint(self, directory: str) -> int:
        """Restore from ``directory``; returns the step it was saved at."""

    @abstractmethod
    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The actor's weights as a CPU state dict, for memory/NCCL sync."""
