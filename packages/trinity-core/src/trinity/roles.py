"""The roles of a run: each builds its explorer or trainer and runs it, in a Ray actor or, in a
single-process run (``cluster.single_process``), in a thread of ``trinity run``'s own process.

The launcher starts them (``RayRole``, where the placement put them; or ``LocalRole``) and waits
on their calls; both hand back ``concurrent.futures.Future``s.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from concurrent import futures
from concurrent.futures import Future
from typing import Any

from trinity.config.schema import Config
from trinity.placement import Placement, where_am_i
from trinity.runtime import quiet_console

logger = logging.getLogger(__name__)


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


class RayRole:
    """A role as a Ray actor named ``name`` in ``namespace``, on the node and GPUs ``placement``
    gave it; ``concurrency`` 2 lets a call (``stop``) in while ``run`` runs."""

    def __init__(self, role: type[Role], name: str, namespace: str, placement: Placement, concurrency: int = 1):
        import ray

        actor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=concurrency)(role)
        self.actor_class = actor.options(name=name, namespace=namespace, **placement.options(name))
        self.actor: Any = None

    def start(self, *args: Any) -> None:
        self.actor = self.actor_class.remote(*args)

    def call(self, method: str) -> Future:
        return self.actor.call.remote(method).future()

    def planned_steps(self) -> Future:
        return self.actor.planned_steps.remote().future()

    def where(self) -> Future:
        """Answered once the role started (its node, for the summary and a lost node's error)."""
        return self.actor.where.remote().future()

    def stop(self) -> None:
        self.actor.stop.remote()

    def kill(self) -> None:
        import ray

        ray.kill(self.actor)


_THREADS: list[threading.Thread] = []
"""The threads of this process's ``LocalRole``s."""


def roles_ran_here() -> bool:
    """Whether a ``LocalRole`` ran in this process (a single-process run)."""
    return bool(_THREADS)


class LocalRole:
    """A role in a thread of this process (a single-process run): it builds the role once the role
    ``after`` it has built (or failed to), then runs the launcher's call. Building one at a time:
    transformers' model loading is not thread-safe (a model loaded beside another came out on the
    meta device). Its thread is a daemon: a run that failed or was stopped ends with the process,
    as a killed actor would."""

    def __init__(self, role: type[Role], name: str, after: LocalRole | None = None) -> None:
        self.role_class, self.name, self.after = role, name, after
        self.built: Future = Future()
        self.args: tuple[Any, ...] = ()

    def start(self, *args: Any) -> None:
        self.args = args

    def call(self, method: str) -> Future:
        result: Future = Future()

        def work() -> None:
            if self.after:
                futures.wait([self.after.built])
            try:
                role = self.role_class(*self.args)
                self.built.set_result(role)
                result.set_result(role.call(method))
            except BaseException as exc:  # the launcher reports it as the role's failure
                logger.exception("%s failed", self.name)
                for future in (self.built, result):
                    if not future.done():
                        future.set_exception(exc)

        thread = threading.Thread(target=work, name=self.name, daemon=True)
        _THREADS.append(thread)
        thread.start()
        return result

    def planned_steps(self) -> Future:
        return self._once_built(lambda role: role.planned_steps())

    def where(self) -> Future:
        return self._once_built(
            lambda _: {
                "node_id": "",
                "gpu_ids": [],
                "node": f"{socket.gethostname()} (this process)",
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
        )

    def stop(self) -> None:
        self.built.add_done_callback(lambda built: built.exception() or built.result().stop())

    def kill(self) -> None:
        """Nothing to do: a thread cannot be killed; the process's end ends it."""

    def _once_built(self, answer: Any) -> Future:
        future: Future = Future()

        def done(built: Future) -> None:
            if built.exception():
                future.set_exception(built.exception())
            else:
                future.set_result(answer(built.result()))

        self.built.add_done_callback(done)
        return future
