"""``storage_type: queue``: a bounded FIFO (or priority replay buffer) between explorer and trainer.

Where the queue lives depends on ``path``:

- empty: in memory. Inside a Ray cluster (``ray.is_initialized()``) it is the named
  detached actor ``trinity-buffer-<name>`` in the namespace, shared by every actor;
  otherwise a process-local queue shared by writers and readers of this process.
- a ``.jsonl``/``.json`` file: the jsonl log (``file`` storage), bounded by ``capacity``.
- anything else (a file path or a ``sqlite:///`` / database URL): the SQL log, bounded by
  ``capacity``. Every write is durable in the database, so a restarted process or a
  second one (async mode: explorer and trainer processes) works through the file alone.

Priority replay (``replay_buffer.enable``) needs the in-memory queue.
"""

from __future__ import annotations

import sys
from typing import Any

from trinity.buffer.storage.base import ExperienceReader, ExperienceWriter, LogStorage
from trinity.buffer.storage.file import FileStorage
from trinity.buffer.storage.memory import MemoryReader, MemoryWriter, local_queue
from trinity.config.schema import ExperienceBufferConfig


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


class QueueStorage:
    def __init__(self, storage: ExperienceBufferConfig, namespace: str | None = None, use_ray: bool | None = None):
        self.storage = storage
        self.durable: LogStorage | None = None
        path = storage.path or ""
        if path:
            if storage.replay_buffer.enable:
                raise ValueError(
                    f"buffer {storage.name!r}: replay_buffer needs an in-memory queue; "
                    f"remove path {path!r} or set replay_buffer.enable: false"
                )
            if path.endswith((".jsonl", ".json")):
                self.durable = FileStorage(storage)
            else:
                from trinity.buffer.storage.sql import SQLStorage  # sqlalchemy: 0.4 s to import

                self.durable = SQLStorage(storage)
            self.durable.capacity = storage.capacity
            return
        if use_ray if use_ray is not None else _ray_running():
            from trinity.buffer.storage.ray_queue import get_or_create_queue_actor

            self.queue: Any = get_or_create_queue_actor(storage, namespace)
        else:
            self.queue = local_queue(storage)

    def writer(self, name: str | None = None) -> ExperienceWriter:
        if self.durable:
            return self.durable.writer(name)
        return MemoryWriter(self.queue, name)

    def reader(self, name: str = "trainer", auto_commit: bool = True) -> ExperienceReader:
        if self.durable:
            return self.durable.reader(name, auto_commit)
        return MemoryReader(self.queue, self.storage.name, self.storage.max_read_timeout)
