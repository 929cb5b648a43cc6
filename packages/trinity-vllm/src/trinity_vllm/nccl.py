"""``synchronizer.sync_method: nccl``: the trainer broadcasts its weights into the workers of
the vLLM engines over a process group of their own (mode both, ``engine_type: vllm``).

The trainer is rank 0, worker ``r`` of engine ``i`` is ``1 + i * tensor_parallel_size + r``; NCCL on
CUDA tensors where the cluster has GPUs (and the members see CUDA), gloo on CPU tensors otherwise
(one code path, tested on a CPU, across two nodes too). The group is stateless (a TCPStore and the
backend built directly), apart from ``torch.distributed``'s default group. ``NCCLCoordinator``, a
named actor the launcher creates, hosts the store and passes the explorer's requests to the
trainer: ``publish`` never waits, the broadcast happens when the explorer's ``fetch`` asks, and a
failure raises ``NCCLSyncError`` on both sides (how it meets: the package README).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from trinity.plugin_api import (
    Config,
    Fence,
    SharedActor,
    SyncMethod,
    SyncTimeout,
    WeightStore,
    WeightUpdate,
    find_shared_actor,
)

if TYPE_CHECKING:
    from trinity.plugin_api import EngineClient

logger = logging.getLogger(__name__)

COORDINATOR_NAME = "trinity_nccl_coordinator"
_POLL_SECONDS = 30.0
"""How long one wait of the trainer's thread for a request lasts before it waits again."""

TensorMeta = list[tuple[str, str, list[int]]]
"""``(name, dtype name, shape)`` of every tensor of a broadcast, in sending order."""


class NCCLSyncError(RuntimeError):
    """The weight broadcast failed; the message says on which side and why."""


@dataclass(frozen=True)
class GroupAddress:
    """Where and how the members of the weight group meet."""

    host: str
    port: int
    world_size: int
    backend: str
    """``nccl`` (CUDA tensors) or ``gloo`` (CPU tensors)."""
    timeout: float
    """Seconds a member waits for the others, to join or to finish a broadcast."""
    name: str = "rollout_weight_sync"
    """The group's name (``synchronizer.group_name``): its keys in the store, apart from other groups'."""
    bucket_bytes: int = 1024 * 2**20
    """Most bytes of one broadcast (``weight_sync_buffer_size`` MB): tensors of one dtype travel
    together in flat buckets up to it (fewer collectives; a tensor larger goes alone)."""


def uses_cuda(address: GroupAddress) -> bool:
    """Whether this member broadcasts with NCCL: the cluster has GPUs and this process sees CUDA.
    Every member decides alike; a cluster of logical GPUs on CPUs (Ray's ``--num-gpus`` without
    devices: the multi-node tests) takes gloo."""
    return address.backend == "nccl" and torch.cuda.is_available()


class WeightGroup:
    """This process's membership of the weight group, rank 0 sending and the others receiving."""

    def __init__(self, address: GroupAddress, rank: int) -> None:
        try:
            self._join(address, rank)
        except Exception as exc:
            raise NCCLSyncError(
                f"rank {rank} of the weight group ({address.world_size} members, {address.backend} at "
                f"{address.host}:{address.port}): not every member joined within sync_timeout "
                f"({address.timeout:.0f} s): {type(exc).__name__}: {exc}"
            ) from exc

    def _join(self, address: GroupAddress, rank: int) -> None:
        from torch.distributed import PrefixStore, TCPStore

        timeout = timedelta(seconds=address.timeout)
        store = PrefixStore(address.name, TCPStore(address.host, address.port, is_master=False, timeout=timeout))
        self.bucket_bytes = address.bucket_bytes
        if uses_cuda(address):
            from torch.distributed import ProcessGroupNCCL

            options = ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.backend = ProcessGroupNCCL(store, rank, address.world_size, options)
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            from torch.distributed import ProcessGroupGloo

            self.backend = ProcessGroupGloo(store, rank, address.world_size, timeout)
            self.device = torch.device("cpu")
        self.broadcast(torch.zeros(1, device=self.device))  # returns once every member has joined

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Rank 0's ``tensor`` into every other member's ``tensor``, in place."""
        from torch.distributed import BroadcastOptions

        options = BroadcastOptions()
        options.rootRank = 0
        self.backend.broadcast([tensor], options).wait()

    def send(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Rank 0: every tensor, in the order of ``meta_of(state_dict)``, bucket by bucket."""
        tensors = list(state_dict.values())
        for bucket in buckets(meta_of(state_dict), self.bucket_bytes):
            flat = torch.cat([tensors[i].to(self.device).reshape(-1) for i in bucket])
            self.broadcast(flat)
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()  # the sent copies stay alive until sent

    def receive(self, meta: TensorMeta) -> Iterator[tuple[str, torch.Tensor]]:
        """The other ranks: ``(name, tensor)`` as each bucket arrives."""
        for bucket in buckets(meta, self.bucket_bytes):
            sizes = [math.prod(meta[i][2]) for i in bucket]
            flat = torch.empty(sum(sizes), dtype=getattr(torch, meta[bucket[0]][1]), device=self.device)
            self.broadcast(flat)
            for i, part in zip(bucket, flat.split(sizes), strict=True):
                yield meta[i][0], part.view(meta[i][2])


def buckets(meta: TensorMeta, limit_bytes: int) -> list[list[int]]:
    """The tensors of ``meta`` (indexes, in order) grouped into broadcasts: consecutive tensors of one
    dtype while their bytes stay within ``limit_bytes`` (one larger on its own). Both sides compute
    it from the same metadata."""
    groups: list[list[int]] = []
    size, dtype = 0, None
    for i, (_, kind, shape) in enumerate(meta):
        nbytes = math.prod(shape) * torch.empty(0, dtype=getattr(torch, kind)).element_size()
        if not groups or kind != dtype or size + nbytes > limit_bytes:
            groups.append([])
            size, dtype = 0, kind
        groups[-1].append(i)
        size += nbytes
    return groups


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, NCCLSyncError) else f"{type(exc).__name__}: {exc}"


def meta_of(state_dict: dict[str, torch.Tensor]) -> TensorMeta:
    return [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in state_dict.items()]


class NCCLSync(SyncMethod):
    """Both sides of the nccl sync: ``publish`` in the trainer, ``connect``/``fetch`` in the explorer."""

    feeds_new_engines = False  # the group's ranks are fixed when it forms

    def __init__(self, config: Config):
        super().__init__(config)
        import ray

        self._ray = ray
        self.coordinator = find_shared_actor(COORDINATOR_NAME, config.ray_namespace)
        self.address = GroupAddress(**ray.get(self.coordinator.address.remote()))
        # trainer side
        self._latest: tuple[int, dict[str, torch.Tensor]] | None = None
        self._lock = threading.Lock()
        self._server: threading.Thread | None = None
        # explorer side
        self.engines: list[EngineClient] = []
        self._joined = False

    @classmethod
    def shared_actors(cls, config: Config) -> list[SharedActor]:
        model = config.explorer.rollout_model
        address = {
            "world_size": 1 + model.engine_num * model.tensor_parallel_size,
            "backend": "nccl" if config.cluster.node_num * config.cluster.gpu_per_node else "gloo",
            "timeout": float(config.synchronizer.sync_timeout),
            "name": config.synchronizer.group_name,
            "bucket_bytes": model.weight_sync_buffer_size * 2**20,
        }
        # no wait for it here: each side's first call (``address``) waits until its store listens
        return [SharedActor(NCCLCoordinator, COORDINATOR_NAME, (address,))]

    # -- trainer side -------------------------------------------------------------------------

    def publish(self, state_dict: dict[str, torch.Tensor], version: int, fence: Fence = nullcontext) -> None:
        """Keep ``state_dict`` as ``version`` for the explorer's next request; returns at once."""
        with self._lock:
            self._latest = (version, state_dict)
        if self._server is None:
            # CUDA's current device is per thread: the sender uses the training engine's.
            device = torch.cuda.current_device() if uses_cuda(self.address) else None
            self._server = threading.Thread(target=self._serve, args=(device,), name="nccl-weight-sync", daemon=True)
            self._server.start()
        try:
            self._ray.get(self.coordinator.publish.remote(version, []))  # metadata comes with the answer
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.cause from None

    def _serve(self, device: int | None) -> None:
        """Answer the explorer's requests, each with the newest kept version, then broadcast it."""
        if device is not None:
            torch.cuda.set_device(device)
        group: WeightGroup | None = None
        try:
            while True:
                try:
                    if not self._ray.get(self.coordinator.next_request.remote(_POLL_SECONDS)):
                        continue
                except self._ray.exceptions.RayActorError:
                    return  # the run is over: the launcher removed the coordinator
                with self._lock:
                    version, state_dict = self._latest
                self._ray.get(self.coordinator.answer.remote(version, meta_of(state_dict)))
                if group is None:
                    group = WeightGroup(self.address, rank=0)
                started = time.perf_counter()
                group.send(state_dict)
                logger.info("nccl sync: version %d broadcast in %.2f s", version, time.perf_counter() - started)
        except Exception as exc:
            message = f"trainer side: {_describe(exc)}"
            logger.error("nccl sync failed: %s", message)
            self._ray.get(self.coordinator.fail.remote(message))

    # -- explorer side ------------------------------------------------------------------------

    def connect(self, engines: Sequence[EngineClient]) -> None:
        from trinity_vllm.engine import VLLMRolloutEngine

        others = {type(client.engine).__name__ for client in engines} - {VLLMRolloutEngine.__name__}
        if others:
            raise TypeError(
                f"synchronizer.sync_method 'nccl' loads weights into vLLM engines only, not {', '.join(sorted(others))}: "
                "set explorer.rollout_model.engine_type: vllm, or sync_method memory (mode both) or checkpoint"
            )
        self.engines = list(engines)

    def fetch(self, min_version: int, timeout: float) -> WeightUpdate | None:
        """Ask for a version >= ``min_version`` and receive it into every engine."""
        try:
            found = self._ray.get(self.coordinator.request.remote(min_version, timeout))
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.cause from None
        if found is None:
            if timeout > 0:
                raise SyncTimeout(f"no weights of version >= {min_version} published after {timeout:.0f} s")
            return None
        version, meta = found
        started = time.perf_counter()
        try:
            if not self._joined:
                tp = self.config.explorer.rollout_model.tensor_parallel_size
                address = asdict(self.address)
                self._on_engines("init_weight_group", [(address, 1 + i * tp) for i in range(len(self.engines))])
                self._joined = True
            self._on_engines("receive_weights", [(meta, version)] * len(self.engines))
        except Exception as exc:
            message = f"explorer side: {_describe(exc)}"
            self._ray.get(self.coordinator.fail.remote(message))
            raise NCCLSyncError(f"nccl weight sync failed: {message}") from exc
        logger.info("nccl sync: version %d received in %.2f s", version, time.perf_counter() - started)
        return WeightUpdate(version, loaded=True)

    def _on_engines(self, method: str, args: list[tuple]) -> None:
        """``engine.<method>(*args[i])`` on every engine ``i`` at once (a collective needs them all)."""
        calls = [client.call(method, *engine_args) for client, engine_args in zip(self.engines, args, strict=True)]
        for call in calls:
            call.result()


class NCCLCoordinator(WeightStore):
    """Hosts the group's TCPStore and hands the explorer's requests to the trainer (async actor).

    Versions as in memory sync (``WeightStore``); a request, once a version is there, waits
    for the trainer's answer: its newest version and tensor metadata.
    """

    def __init__(self, address: dict[str, Any]) -> None:
        import ray
        from torch.distributed import TCPStore

        super().__init__()
        host = ray.util.get_node_ip_address()
        self.store = TCPStore(
            host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=address["timeout"])
        )
        self._address = {**address, "host": host, "port": self.store.port}
        self.requests: asyncio.Queue[asyncio.Future] = asyncio.Queue()
        self.serving: asyncio.Future | None = None
        self._failure: str | None = None

    async def address(self) -> dict[str, Any]:
        """``GroupAddress`` fields."""
        return self._address

    async def publish(self, version: int, payload: list) -> None:
        """Trainer: ``version`` is there to be asked for; raises once the group has failed."""
        self._check()
        await super().publish(version, payload)

    async def request(self, min_version: int, timeout: float) -> tuple[int, TensorMeta] | None:
        """Explorer: ``(version, meta)`` of the broadcast the trainer starts now, or None when
        no version >= ``min_version`` was published within ``timeout``."""
        self._check()
        if await self.wait_for(min_version, timeout) is None:
            return None
        reply = asyncio.get_running_loop().create_future()
        await self.requests.put(reply)
        try:
            return await asyncio.wait_for(reply, self._address["timeout"])
        except asyncio.TimeoutError:
            raise NCCLSyncError(
                f"the trainer did not answer a request for weights within sync_timeout "
                f"({self._address['timeout']:.0f} s): has its process died?"
            ) from None

    async def next_request(self, timeout: float) -> bool:
        """Trainer: wait up to ``timeout`` for a request; True when one is to be answered."""
        try:
            self.serving = await asyncio.wait_for(self.requests.get(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def answer(self, version: int, meta: TensorMeta) -> None:
        self.serving.set_result((version, meta))
        self.serving = None

    async def fail(self, message: str) -> None:
        """Either side: the group is broken; pending and later requests raise ``message``."""
        self._failure = self._failure or message
        for reply in [self.serving, *self._drain()]:
            if reply is not None and not reply.done():
                reply.set_exception(NCCLSyncError(f"nccl weight sync failed: {message}"))

    def _drain(self) -> list[asyncio.Future]:
        drained = []
        while not self.requests.empty():
            drained.append(self.requests.get_nowait())
        return drained

    def _check(self) -> None:
        if self._failure:
            raise NCCLSyncError(f"nccl weight sync failed: {self._failure}")
