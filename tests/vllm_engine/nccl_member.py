"""One process of a weight group for test_nccl_sync, in a module of its own: spawning it
imports this, not vLLM."""

from __future__ import annotations

import multiprocessing

import torch

from trinity_vllm.nccl import GroupAddress, WeightGroup, meta_of


def member(address: dict, rank: int, weights: dict[str, torch.Tensor], received: multiprocessing.Queue) -> None:
    """Rank 0 sends ``weights``; rank 1 puts what it receives in ``received`` as plain values
    (name, dtype, nested lists): a tensor put as itself shares its storage through this process,
    which may have exited before the test reads the queue."""
    if address["backend"] == "nccl":
        torch.cuda.set_device(rank)
    group = WeightGroup(GroupAddress(**address), rank)
    if rank == 0:
        group.send(weights)
    else:
        received.put(
            [
                (name, str(tensor.dtype).removeprefix("torch."), tensor.cpu().float().tolist())
                for name, tensor in group.receive(meta_of(weights))
            ]
        )
