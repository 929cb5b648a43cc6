"""Tasks the explorer works on and the experiences it produces.

An Experience is one trajectory: prompt + response token ids, response logprobs, reward
and identity (``EID``). A DPO experience carries ``chosen`` and ``rejected`` responses
instead of one. Experiences become training batches through ``Batch.from_experiences``.
``info``, ``metrics`` and ``messages`` hold plain values (strings, numbers, booleans, None, lists,
dicts; numpy and torch values, sets, tuples and paths are converted): the buffer stores them as
JSON and never pickles (``trinity.buffer.serialization``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


MEDIA_KEYS = frozenset({"pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"})
"""The keys ``Experience.multi_modal_inputs`` may hold (the model inputs a Qwen2-VL-family model takes
beside the tokens): a stored row naming another is refused, not passed to the model."""

TRUNCATED_FROM = "truncated_from"
"""The ``info`` key of a truncated prompt's length in tokens before ``max_prompt_tokens`` cut it."""

TOKEN_VERSIONS = "token_versions"
"""The ``info`` key of the weights' version that sampled each response token (partial rollout: a
response a weight sync interrupted holds tokens of two versions or more; ``model_version`` is its first's)."""


@dataclass(frozen=True)
class EID:
    """Who an experience is: batch (explorer step or taskset name), task, run and step, and
    the explorer that wrote it.

    ``task`` identifies the group of runs on one task (the GRPO group); ``run`` is the
    repeat index; ``step`` the turn within a multi-step workflow. Two explorers feeding one
    trainer count their steps apart: ``explorer`` keeps their groups and ids apart too.
    """

    batch: str = ""
    task: str = ""
    run: int = 0
    step: int = 0
    suffix: str = ""
    explorer: str = ""

    @property
    def group(self) -> str:
        group = f"{self.batch}/{self.task}"
        return f"{self.explorer}:{group}" if self.explorer else group

    @property
    def uid(self) -> str:
        text = f"{self.group}/{self.run}/{self.step}"
        return f"{text}/{self.suffix}" if self.suffix else text


@dataclass
class Experience:
    """One trajectory, as the explorer wrote it and the trainer reads it."""

    tokens: torch.Tensor
    """Prompt + response token ids, 1-D long (DPO: the prompt only)."""
    prompt_length: int
    logprobs: torch.Tensor | None = None
    """Log-probabilities of the response tokens under the rollout model, 1-D float."""
    reward: float | None = None
    token_level_reward: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    action_mask: torch.Tensor | None = None
    """1 for response tokens the model produced (multi-turn: 0 on tool/user turns)."""
    eid: EID = field(default_factory=EID)
    model_version: int = 0
    truncate_status: str | None = None
    """None, ``"prompt_truncated"`` (``info[TRUNCATED_FROM]``: the prompt's length before the cut,
    where the engine reported it) or ``"response_truncated"``."""
    chosen: torch.Tensor | None = None
    """DPO: token ids of the preferred response."""
    rejected: torch.Tensor | None = None
    """DPO: token ids of the rejected response."""
    teacher_logprobs: torch.Tensor | None = None
    """On-policy distillation: a teacher model's log-probabilities of the response tokens."""
    multi_modal_inputs: dict[str, torch.Tensor] | None = None
    """A vision-language prompt's image tensors (``pixel_values``, ``image_grid_thw``), which the
    trainer passes with the tokens; None for text."""
    routed_experts: torch.Tensor | None = None
    """MoE router replay: the experts the rollout routed each token to, int16 ``[len(tokens) - 1,
    MoE layers, top_k]`` (vLLM's ``routed_experts``: every token fed to the model, the last one
    never is); None where the rollout engine recorded none (``trinity.model.moe_routing``)."""
    messages: list[dict[str, Any]] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def response_length(self) -> int:
        return int(self.tokens.numel()) - self.prompt_length

    @property
    def prompt_tokens(self) -> torch.Tensor:
        return self.tokens[: self.prompt_length]

    @property
    def response_tokens(self) -> torch.Tensor:
        return self.tokens[self.prompt_length :]


@dataclass
class Task:
    """One row of a taskset, ready for a workflow."""

    workflow_type: str
    raw: dict[str, Any]
    """The dataset row as read."""
    reward_fn_type: str | None = None
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    rollout_args: dict[str, Any] = field(default_factory=dict)
    format: dict[str, Any] = field(default_factory=dict)
    """The taskset's ``format`` section (prompt_key, response_key, ...)."""
    repeat_times: int = 1
    taskset_name: str = ""
    index: int = 0
    """Row position in the taskset (stable across epochs)."""
    is_eval: bool = False

    @property
    def task_id(self) -> str:
        return f"{self.taskset_name}:{self.index}"
