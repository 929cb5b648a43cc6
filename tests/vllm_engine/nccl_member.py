"""One process of a weight group for test_nccl_sync, in a module of its own: spawning it
imports this, not vLLM."""

from __future__ import annotations

import multiprocessing

import torch

from trinity_vllm.nccl import GroupAddress, WeightGroup, meta_of


def member(address: dict, rank: int, weights: dict[str, torch.Tensor], received: multiprocessing.Queue) -> None:
    """Rank 0 sends ``weights``; rank 1 puts what it receives (on the CPU) in ``received``."""
    if address["backend"] == "nccl":
        torch.cuda.set_device(rank)
    group = WeightGroup(GroupAddress(**address), rank)
    if rank == 0:
        group.send(weights)
    else:
        received.put({name: tensor.cpu() for name, tensor in group.receive(meta_of(weights))})
