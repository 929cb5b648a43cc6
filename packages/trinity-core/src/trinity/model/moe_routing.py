"""MoE router replay (R3): record the experts a rollout routed each token to, replay them in training.

Where two experts score nearly alike, rollout and training (another dtype, other kernels) can
route a token differently, and the trainer's logprobs then drift far from the rollout's. R3
(verl's ``router_replay.mode: R3``) makes the trainer's forward use the rollout's experts, their
gate weights recomputed from its own router logits (so the router still learns). The layout is
vLLM's ``routed_experts``: int16 ``[positions, MoE layers, top_k]`` per sequence, every token fed
to the model. Routers are transformers' top-k router modules (Qwen2-MoE, Qwen3-MoE, Mixtral...:
``top_k``, ``num_experts``, a ``weight`` row per expert; output ``(logits, weights, indices)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

UNROUTED = -1
"""An expert index the replay leaves to the model's own routing (padding, positions no rollout routed)."""


def moe_routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's top-k MoE routers in layer order; empty for a dense model."""
    return [
        module
        for module in model.modules()
        if isinstance(getattr(module, "top_k", None), int)
        and isinstance(getattr(module, "num_experts", None), int)
        and isinstance(getattr(module, "weight", None), torch.Tensor)
        and module.weight.shape[0] == module.num_experts
    ]


def require_moe(model: torch.nn.Module, path: str) -> None:
    """A ``ValueError`` naming the key where router replay is on for a model without MoE routers."""
    if not moe_routers(model):
        raise ValueError(
            f"algorithm.enable_router_replay: the model at {path} has no top-k MoE router to record or replay "
            f"({type(model).__name__}, a dense model); set it to false"
        )


class RoutingRecorder:
    """Keeps each forward pass's top-k expert indices of every MoE router of a model, from
    construction to ``remove``: ``steps[i]`` is the ``i``-th forward's ``[layers, tokens, top_k]``,
    tokens in the row-major order of that forward's ``[rows, columns]`` input."""

    def __init__(self, model: torch.nn.Module) -> None:
        routers = moe_routers(model)
        self.steps: list[torch.Tensor] = []
        self._layers: list[torch.Tensor] = []
        self._count = len(routers)
        self._hooks = [router.register_forward_hook(self._keep) for router in routers]

    def _keep(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._layers.append(output[2].to(torch.int16))
        if len(self._layers) == self._count:
            self.steps.append(torch.stack(self._layers).cpu())
            self._layers = []

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()

    def sequences(self, prompt_lengths: list[int], width: int, lengths: list[int], shared: int) -> list[torch.Tensor]:
        """Each row's ``routed_experts`` ``[prompt + response - 1, layers, top_k]`` after a batched
        ``generate`` of rows left-padded to ``width`` columns, whose ``lengths`` response tokens it
        kept; ``shared`` > 1: the first forward ran each prompt's first ``width - 1`` columns once
        for ``shared`` consecutive rows (``shared_prompt_cache``)."""
        rows = len(prompt_lengths)
        steps = [
            step.view(step.shape[0], rows // shared, -1, step.shape[-1]).repeat_interleave(shared, dim=1)
            if i == 0 and shared > 1
            else step.view(step.shape[0], rows, -1, step.shape[-1])
            for i, step in enumerate(self.steps)
        ]
        columns = torch.cat(steps, dim=2).permute(1, 2, 0, 3)  # [rows, columns, layers, top_k]
        return [
            columns[row, width - prompt : width + length - 1].clone()
            for row, (prompt, length) in enumerate(zip(prompt_lengths, lengths, strict=True))
        ]


def _replayed(module: torch.nn.Module, target: torch.Tensor, output: Any) -> tuple[Any, ...]:
    """The router's output with the ``target`` experts ``[tokens, top_k]`` where recorded (its own
    elsewhere), their weights the softmax of its own logits there, renormalised as it does: as its
    ``norm_topk_prob`` says, or, without one (Mixtral always renormalises), as its own weights show."""
    logits, scores, own = output[:3]
    if target.shape[0] != own.shape[0]:
        raise ValueError(f"router replay: {target.shape[0]} recorded positions for {own.shape[0]} routed tokens")
    indices = torch.where((target == UNROUTED).any(-1, keepdim=True), own, target.to(own.dtype))
    weights = torch.softmax(logits, dim=-1, dtype=torch.float).gather(-1, indices)
    renormalise = getattr(module, "norm_topk_prob", None)
    if renormalise is None:
        sums = scores.float().sum(-1)
        renormalise = bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-3))
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return (logits, weights.to(logits.dtype), indices, *output[3:])


@contextmanager
def replay_routing(model: torch.nn.Module, routed_experts: torch.Tensor | None) -> Iterator[None]:
    """Inside the block, ``model``'s forward passes route as ``routed_experts`` ``[rows, columns,
    layers, top_k]`` says (aligned with the forward's ``input_ids``; ``UNROUTED`` rows route as the
    model does); None: as the model does."""
    if routed_experts is None:
        yield
        return
    routers = moe_routers(model)
    if len(routers) != routed_experts.shape[2]:
        raise ValueError(
            f"router replay: the experiences hold routing of {routed_experts.shape[2]} MoE layers, "
            f"the trained model has {len(routers)}"
        )
    flat = routed_experts.flatten(0, 1)  # [rows * columns, layers, top_k], as each router sees tokens
    hooks = [
        router.register_forward_hook(lambda module, args, output, i=i: _replayed(module, flat[:, i], output))
        for i, router in enumerate(routers)
    ]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
