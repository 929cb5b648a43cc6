"""A ``MemoryQueue`` in a named, detached Ray actor, so explorer and trainer actors share it.

Experiences cross the actor boundary as ``serialize_experience`` bytes and stay bytes inside
the actor (it needs only their model version). The actor is threaded, so a reader blocked in
``get`` does not stop writers, and detached, so the queue outlives the actor that created it
(``kill_queue_actor`` removes it). The handle imports ``serialization`` (and with it torch) in
its own methods: the actor starts in a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray

from trinity.buffer.storage.memory import MemoryQueue
from trinity.common.experience import Experience
from trinity.config.schema import ExperienceBufferConfig

ACTOR_PREFIX = "trinity-buffer-"


@dataclass
class _Stored:
    """A serialised experience as the queue holds it (``model_version`` is all priority needs)."""

    model_version: int
    data: bytes


@ray.remote(num_cpus=0, max_concurrency=64)
class QueueActor:
    def __init__(self, storage: ExperienceBufferConfig):
        self.queue = MemoryQueue(storage)

    def open_writer(self, writer: str) -> None:
        self.queue.open_writer(writer)

    def finish_writer(self, writer: str) -> None:
        self.queue.finish_writer(writer)

    def put(self, items: list[tuple[int, bytes]]) -> None:
        self.queue.put([_Stored(version, data) for version, data in items])

    def get(self, n: int, timeout: float) -> tuple[list[bytes], bool]:
        got, ended = self.queue.get(n, timeout)
        return [item.data for item in got], ended

    def size(self) -> int:
        return len(self.queue)


class RayQueueHandle:
    """The ``MemoryQueue`` methods, called on the actor."""

    def __init__(self, actor: ray.actor.ActorHandle):
        self.actor = actor

    def open_writer(self, writer: str) -> None:
        ray.get(self.actor.open_writer.remote(writer))

    def finish_writer(self, writer: str) -> None:
        ray.get(self.actor.finish_writer.remote(writer))

    def put(self, experiences: list[Experience]) -> None:
        from trinity.buffer.serialization import serialize_experience

        ray.get(self.actor.put.remote([(e.model_version, serialize_experience(e)) for e in experiences]))

    def get(self, n: int, timeout: float) -> tuple[list[Experience], bool]:
        from trinity.buffer.serialization import deserialize_experience

        blobs, ended = ray.get(self.actor.get.remote(n, timeout))
        return [deserialize_experience(blob) for blob in blobs], ended

    def __len__(self) -> int:
        return ray.get(self.actor.size.remote())


def get_or_create_queue_actor(storage: ExperienceBufferConfig, namespace: str | None = None) -> RayQueueHandle:
    """The queue actor ``trinity-buffer-<name>`` in ``namespace`` (default: the current one)."""
    namespace = namespace or ray.get_runtime_context().namespace
    actor = QueueActor.options(
        name=ACTOR_PREFIX + storage.name, namespace=namespace, get_if_exists=True, lifetime="detached"
    ).remote(storage)
    return RayQueueHandle(actor)


def kill_queue_actor(storage: ExperienceBufferConfig, namespace: str | None = None) -> None:
    """Remove the queue actor of ``storage`` (its unread experiences are lost)."""
    namespace = namespace or ray.get_runtime_context().namespace
    ray.kill(ray.get_actor(ACTOR_PREFIX + storage.name, namespace=namespace))
