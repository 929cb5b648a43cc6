"""The torch.distributed world of the verl engine: one process, the trainer actor's own."""

from __future__ import annotations

import os

import torch


def init_process_group(backend: str) -> None:
    """A world of one with an in-memory store (no port bound, so any number of trainers and
    test processes coexist), unless one is already set up. verl's workers read the usual
    torch.distributed variables; they are set to that world of one where missing."""
    if torch.distributed.is_initialized():
        return
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")  # read by verl's workers, never bound
    if int(os.environ["WORLD_SIZE"]) != 1:
        raise RuntimeError(
            f"trinity-verl runs a world of one process for now; WORLD_SIZE is {os.environ['WORLD_SIZE']}"
        )
    torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
