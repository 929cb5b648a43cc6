"""The torch.distributed world of the verl engine and the processes that make it up.

A world of one is the trainer actor's own process (an in-memory store: no port bound). A world of
N is N Ray actors, one per rank (``RankGroup``): rank 0 names a free port on its node, every rank
joins the TCP store there with the usual variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``) set for verl's workers, and the trainer calls each rank's methods through Ray.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch


@dataclass(frozen=True)
class World:
    """Where one process sits in the engine's world."""

    rank: int = 0
    size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500  # read by verl's workers; bound only when size > 1


def init_process_group(backend: str, world: World = World()) -> None:
    """Join ``world`` (unless a process group is set up already); verl's workers read the usual
    torch.distributed variables, which are set to it."""
    if torch.distributed.is_initialized():
        return
    variables = {
        "RANK": world.rank,
        "WORLD_SIZE": world.size,
        "LOCAL_RANK": 0,  # a rank sees one device: its own GPU (Ray sets the visible one) or the CPU
        "LOCAL_WORLD_SIZE": 1,
        "MASTER_ADDR": world.master_addr,
        "MASTER_PORT": world.master_port,
    }
    os.environ.update({name: str(value) for name, value in variables.items()})
    if world.size == 1:
        store = torch.distributed.HashStore()
        torch.distributed.init_process_group(backend, store=store, rank=0, world_size=1)
        return
    torch.distributed.init_process_group(
        backend,
        init_method=f"tcp://{world.master_addr}:{world.master_port}",
        rank=world.rank,
        world_size=world.size,
        timeout=timedelta(minutes=30),
    )


class _RankActor:
    """A Ray actor holding one rank: built empty, so rank 0 can name the rendezvous first."""

    def __init__(self) -> None:
        self.rank: Any = None

    def rendezvous(self) -> tuple[str, int]:
        """This node's address and a port free on it, for rank 0's TCP store."""
        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            return ray.util.get_node_ip_address(), probe.getsockname()[1]

    def start(self, factory: Callable[[World], Any], world: World, threads: int | None) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.rank = factory(world)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.rank, method)(*args)


class RankGroup:
    """The ranks of one engine; ``call`` runs a method on every rank and returns the results in
    rank order. One rank lives in this process; more are Ray actors (one GPU each, or on a CPU
    one process each, sharing the cores)."""

    def __init__(self, factory: Callable[[World], Any], size: int) -> None:
        self.size = size
        self.local: Any = None
        self.actors: list[Any] = []
        if size == 1:
            self.local = factory(World())
            return
        import ray

        cuda = torch.cuda.is_available()
        resources = {"num_gpus": 1} if cuda else {"num_cpus": 0}
        actor = ray.remote(max_restarts=0, **resources)(_RankActor)
        self.actors = [actor.remote() for _ in range(size)]
        addr, port = ray.get(self.actors[0].rendezvous.remote())
        threads = None if cuda else max(1, (os.cpu_count() or 1) // size)
        self._gather(
            [a.start.remote(factory, World(rank, size, addr, port), threads) for rank, a in enumerate(self.actors)]
        )

    def call(self, method: str, *args: Any) -> list[Any]:
        if self.local is not None:
            return [getattr(self.local, method)(*args)]
        import ray

        refs = [ray.put(arg) for arg in args]  # one copy in the object store for all ranks
        return self._gather([a.call.remote(method, *refs) for a in self.actors])

    @staticmethod
    def _gather(refs: list[Any]) -> list[Any]:
        """The results of ``refs``; a rank's error is raised as soon as it comes, not after the
        other ranks time out waiting for it in a collective."""
        import ray

        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
        return ray.get(refs)

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
