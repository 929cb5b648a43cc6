"""Weight synchronisation methods: how trainer weights reach the explorer's engines.

The trainer ``publish``es a version after its step ``version``; the explorer asks for
the newest version at least ``min_version`` (waiting up to a timeout, or not at all).

- ``memory``: the state dict goes through Ray's object store; a named actor in the
  experiment's namespace holds the newest reference. Needs one Ray cluster (mode both).
- ``checkpoint``: weights are written as safetensors under ``<job dir>/sync/`` with a
  ``latest.json`` pointer; works between separate processes (async mode) with no actor.
- ``nccl`` (trinity-vllm): a broadcast from the trainer into the vLLM engines' workers.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from trinity.common.files import read_json, write_json
from trinity.common.lazy_import import ray_running
from trinity.config.schema import Config

if TYPE_CHECKING:
    import torch

    from trinity.rollout.client import EngineClient

Fence = Callable[[], AbstractContextManager[None]]
"""What ``SyncMethod.publish`` makes a version visible within (the trainer's reader fence)."""

KEEP_SYNC_DIRS = 2
"""Checkpoint sync keeps this many newest weight directories."""

SYNC_WEIGHTS = "model.safetensors"
"""The one file of a checkpoint-sync version directory."""


@dataclass
class WeightUpdate:
    """One published version: a state dict or a directory for the engines' ``update_weights``,
    or ``loaded`` when the method has put the weights into the engines itself (nccl)."""

    version: int
    state_dict: dict[str, torch.Tensor] | None = None
    path: str | None = None
    loaded: bool = False


class SyncTimeout(TimeoutError):
    """The explorer waited ``sync_timeout`` seconds for a version the trainer did not publish."""


class SyncMethod(ABC):
    """Both sides of one synchronisation channel, built from the experiment config."""

    feeds_new_engines: ClassVar[bool] = True
    """Whether an engine restarted mid-run can take the newest weights from ``fetch`` (nccl's
    process group cannot take in a new member)."""

    def __init__(self, config: Config):
        self.config = config

    @classmethod
    def shared_actors(cls, config: Config) -> list[SharedActor]:
        """The named actors both sides meet through; the launcher starts them fresh for
        each run and kills them at its end."""
        return []

    def connect(self, engines: Sequence[EngineClient]) -> None:  # noqa: B027 (optional hook)
        """Explorer side, once its rollout engines run: a method that loads the engines
        itself (``WeightUpdate.loaded``) sets up its channel into them here."""

    @abstractmethod
    def publish(self, state_dict: dict[str, torch.Tensor], version: int, fence: Fence = nullcontext) -> None:
        """Trainer side: make ``version`` available. ``fence`` (the trainer's reader fence) wraps
        the moment it becomes visible where the channel outlives the run (checkpoint files): a
        stale trainer then fails with ``Fenced`` instead of publishing over its replacement's. A
        channel that ends with the run (memory, nccl: the run's own actors) needs no fence."""

    @abstractmethod
    def fetch(self, min_version: int, timeout: float) -> WeightUpdate | None:
        """Explorer side: the newest version >= ``min_version``, waiting up to ``timeout``.

        ``timeout=0`` does not wait and returns None when nothing new enough exists; else
        nothing by the timeout raises ``SyncTimeout``. (The explorer waits in short slices, between
        which it looks at the trainer's end on the sync signals.)
        """


class CheckpointSync(SyncMethod):
    """Weights through files in the job directory (works across processes and nodes)."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.root = Path(config.checkpoint_job_dir) / "sync"

    def publish(self, state_dict: dict[str, torch.Tensor], version: int, fence: Fence = nullcontext) -> None:
        """A resumed trainer publishes versions again that an explorer may be reading: the file
        is replaced atomically, so a reader has the old file or the new, never a gap."""
        from safetensors.torch import save_file

        target = self.root / f"version_{version}"
        target.mkdir(parents=True, exist_ok=True)
        staged = target / (SYNC_WEIGHTS + ".partial")  # not ``*.safetensors``: no reader takes it
        save_file({k: v.contiguous() for k, v in state_dict.items()}, str(staged))
        with fence():  # the slow write above is outside: the fence holds the buffer's write lock
            os.replace(staged, target / SYNC_WEIGHTS)
            write_json(self.root / "latest.json", {"version": version, "path": str(target)})
        self._prune(keep=target)

    def _prune(self, keep: Path) -> None:
        """Keep ``keep`` and the newest others, newest by publishing time: after a resume, the
        crashed run's higher versions are the old ones."""
        others = [d for d in self.root.glob("version_*") if d != keep]
        for old in sorted(others, key=_mtime)[: max(len(others) - (KEEP_SYNC_DIRS - 1), 0)]:
            shutil.rmtree(old, ignore_errors=True)

    def fetch(self, min_version: int, timeout: float) -> WeightUpdate | None:
        deadline = time.monotonic() + timeout
        while True:
            latest = read_json(self.root / "latest.json")
            if latest and latest["version"] >= min_version:
                return WeightUpdate(latest["version"], path=latest["path"])
            if time.monotonic() >= deadline:
                if timeout > 0:
                    raise SyncTimeout(f"no weights of version >= {min_version} in {self.root} after {timeout:.0f} s")
                return None
            time.sleep(0.05)


class MemorySync(SyncMethod):
    """Weights through Ray's object store, announced by a named actor of the namespace; in a
    single-process run (``cluster.single_process``), through that process's memory."""

    ACTOR_NAME = "trinity_weight_store"

    def __init__(self, config: Config):
        super().__init__(config)
        self.store = find_shared_actor(self.ACTOR_NAME, config.ray_namespace)

    @classmethod
    def shared_actors(cls, config: Config) -> list[SharedActor]:
        return [SharedActor(WeightStore, cls.ACTOR_NAME)]

    def publish(self, state_dict: dict[str, torch.Tensor], version: int, fence: Fence = nullcontext) -> None:
        arrays = _as_arrays(state_dict)
        if isinstance(self.store, LocalActor):  # the arrays view the trainer's weights: a copy is published
            self.store.call("publish", version, [{name: (a.copy(), dtype) for name, (a, dtype) in arrays.items()}])
            return
        import ray

        ray.get(self.store.publish.remote(version, [ray.put(arrays)]))

    def fetch(self, min_version: int, timeout: float) -> WeightUpdate | None:
        if isinstance(self.store, LocalActor):
            found = self.store.call("wait_for", min_version, timeout)
        else:
            import ray

            try:
                found = ray.get(self.store.wait_for.remote(min_version, timeout))
            except ray.exceptions.RayTaskError as exc:
                raise exc.cause from None
            if found is not None:
                found = found[0], [ray.get(found[1][0])]
        if found is None:
            if timeout > 0:
                raise SyncTimeout(f"no weights of version >= {min_version} published after {timeout:.0f} s")
            return None
        version, (arrays,) = found
        return WeightUpdate(version, state_dict=_as_tensors(arrays))


def _as_arrays(state_dict: dict[str, torch.Tensor]) -> dict[str, tuple[Any, str]]:
    """The weights as numpy arrays with their dtypes: Ray stores arrays without copying and
    reads them back zero-copy, where tensors go through pickle (the quickstart's 0.4M weights:
    publish 4.3 ms and fetch 4.8 ms, against 7.5 and 8.3 as tensors). bfloat16, which numpy
    lacks, travels as its int16 bits."""
    import torch

    arrays = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach().cpu()
        bits = tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor
        arrays[name] = (bits.numpy(), str(tensor.dtype).removeprefix("torch."))
    return arrays


def _as_tensors(arrays: dict[str, tuple[Any, str]]) -> dict[str, torch.Tensor]:
    """The tensors of ``_as_arrays``, viewing the object store's read-only memory: the engines
    copy them into their weights and never write them."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return {name: torch.from_numpy(array).view(getattr(torch, dtype)) for name, (array, dtype) in arrays.items()}


SHARED_ACTOR_WAIT = 120.0
"""Seconds a role waits for the launcher to create a shared actor (it starts the roles first)."""


@dataclass(frozen=True)
class SharedActor:
    """A named, CPU-free actor that both sides of a sync method meet through.

    The launcher removes a leftover of an earlier run before explorer and trainer start,
    creates it right after them (so the roles, not it, take the workers Ray prestarts) and
    kills it at the end of the run; each side finds it with ``find_shared_actor``. Without
    Ray (a single-process run) it is a ``LocalActor`` of the process.
    """

    cls: type
    name: str
    args: tuple[Any, ...] = ()

    def remove_leftover(self, namespace: str) -> None:
        if not ray_running():
            leftover = _LOCAL_ACTORS.get((namespace, self.name))
            if leftover:
                leftover.stop()
            return
        import ray

        try:
            ray.kill(ray.get_actor(self.name, namespace=namespace))
        except ValueError:
            pass

    def start(self, namespace: str):
        if not ray_running():
            return LocalActor(self.cls(*self.args), namespace, self.name)
        import ray

        return ray.remote(num_cpus=0)(self.cls).options(name=self.name, namespace=namespace).remote(*self.args)


class LocalActor:
    """A shared actor in this process (a run without Ray): its methods, ``async`` ones included,
    run one at a time on its own event loop, as a Ray actor's would; ``call`` waits for the result."""

    def __init__(self, instance: Any, namespace: str, name: str) -> None:
        self.instance, self.key = instance, (namespace, name)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name=f"actor-{name}", daemon=True).start()
        _LOCAL_ACTORS[self.key] = self

    def call(self, method: str, *args: Any) -> Any:
        async def run() -> Any:
            result = getattr(self.instance, method)(*args)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def stop(self) -> None:
        """Remove it (the launcher, at the end of the run): later callers no longer find it."""
        if _LOCAL_ACTORS.get(self.key) is self:
            del _LOCAL_ACTORS[self.key]
        self.loop.call_soon_threadsafe(self.loop.stop)


_LOCAL_ACTORS: dict[tuple[str, str], LocalActor] = {}


def find_shared_actor(name: str, namespace: str, timeout: float = SHARED_ACTOR_WAIT):
    """The actor ``name`` of ``namespace``, waiting for the launcher to create it: a Ray actor
    handle, or without Ray the process's ``LocalActor``."""
    deadline = time.monotonic() + timeout
    while True:
        if not ray_running():
            found = _LOCAL_ACTORS.get((namespace, name))
            if found:
                return found
        else:
            import ray

            try:
                return ray.get_actor(name, namespace=namespace)
            except ValueError:
                pass
        if time.monotonic() > deadline:
            raise ValueError(
                f"no actor {name!r} in Ray namespace {namespace!r} after {timeout:.0f} s: "
                "`trinity run` creates it for the run's explorer and trainer"
            ) from None
        time.sleep(0.02)


class WeightStore:
    """Holds the newest published version and its payload (memory sync: the object
    reference of its state dict); explorers wait on it (async actor)."""

    def __init__(self) -> None:
        self.version = -1
        self.payload: list = []
        self.changed = asyncio.Condition()

    async def publish(self, version: int, payload: list) -> None:
        async with self.changed:
            self.version, self.payload = version, payload
            self.changed.notify_all()

    async def wait_for(self, min_version: int, timeout: float) -> tuple[int, list] | None:
        """The newest version and payload once it is >= ``min_version``; None after ``timeout``."""
        async with self.changed:
            if self.version < min_version:
                try:
                    await asyncio.wait_for(self.changed.wait_for(lambda: self.version >= min_version), timeout)
                except asyncio.TimeoutError:
                    return None
            return self.version, self.payload


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
