"""The Ray actors of the roles: each builds its explorer or trainer inside the actor and runs it.

The launcher starts them (``role_actor``) where the placement put them, and waits on their calls.
"""

from __future__ import annotations

from typing import Any

from trinity.config.schema import Config
from trinity.placement import Placement, where_am_i
from trinity.runtime import quiet_console


class Role:
    """A role's Ray actor: it builds the explorer or trainer in the actor and runs its methods.

    A plain class in between, because Ray runs an actor whose class has any ``async`` method
    as an async actor (its methods on Ray's event loop), and the explorer drives its own loop.
    Process lists show the subclass (``ray::ExplorerRole.call``).
    """

    def __init__(self, config: Config, threads: int | None, verbose: bool = True) -> None:
        if not verbose:
            quiet_console()
        self.role = self.build(config, threads)

    @staticmethod
    def build(config: Config, threads: int | None) -> Any:
        raise NotImplementedError

    def call(self, method: str) -> Any:
        return getattr(self.role, method)()

    def planned_steps(self) -> int | None:
        """The steps the role will run; None when it runs to the end of its data."""
        return self.role.planned_steps()

    def where(self) -> dict[str, Any]:
        return where_am_i()


class ExplorerRole(Role):
    @staticmethod
    def build(config: Config, threads: int | None) -> Any:
        from trinity.explorer.explorer import Explorer

        return Explorer(config, threads)


class TrainerRole(Role):
    @staticmethod
    def build(config: Config, threads: int | None) -> Any:
        from trinity.trainer.trainer import Trainer

        return Trainer(config, threads)

    def stop(self) -> None:
        self.role.request_stop()


def role_actor(role: type[Role], name: str, namespace: str, placement: Placement, concurrency: int = 1):
    """``role`` as a Ray actor class named ``name`` in ``namespace``, on the node and GPUs
    ``placement`` gave it; ``concurrency`` 2 lets a call (``stop``) in while ``run`` runs."""
    import ray

    actor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=concurrency)(role)
    return actor.options(name=name, namespace=namespace, **placement.options(name))
