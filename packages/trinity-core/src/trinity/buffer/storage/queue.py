"""``storage_type: queue``: a bounded FIFO (or priority replay buffer) between explorer and trainer.

Where it lives depends on ``path``: empty, in memory (in a Ray cluster, the named actor
``trinity-buffer-<name>`` shared by every actor); a ``.jsonl``/``.json`` file, the jsonl log; any
other path or database URL, the SQL log, durable across processes. Priority replay works on each:
in memory (``memory``) or in replay tables beside the log (``replay``). See ``docs/buffer.md``.
"""

from __future__ import annotations

from typing import Any

from trinity.buffer.storage.base import ExperienceReader, ExperienceWriter, LogStorage
from trinity.buffer.storage.file import FileStorage
from trinity.buffer.storage.memory import MemoryReader, MemoryWriter, local_queue
from trinity.common.lazy_import import ray_running
from trinity.config.schema import ExperienceBufferConfig


class QueueStorage:
    def __init__(self, storage: ExperienceBufferConfig, namespace: str | None = None, use_ray: bool | None = None):
        self.storage = storage
        self.durable: LogStorage | None = None
        self.replay_url: str | None = None
        path = storage.path or ""
        if path:
            from trinity.buffer.storage.sql import SQLStorage, database_url  # sqlalchemy: 0.4 s to import

            if storage.jsonl_file:
                self.durable = FileStorage(storage)
                self.replay_url = database_url(path + ".replay.db")
            else:
                self.durable = SQLStorage(storage)
                self.replay_url = self.durable.url
            if not storage.replay_buffer.enable:  # replay never holds writers back: it drops
                self.durable.capacity = storage.capacity
            return
        if use_ray if use_ray is not None else ray_running():
            from trinity.buffer.storage.ray_queue import get_or_create_queue_actor

            self.queue: Any = get_or_create_queue_actor(storage, namespace)
        else:
            self.queue = local_queue(storage)

    def writer(self, name: str | None = None) -> ExperienceWriter:
        if self.durable:
            return self.durable.writer(name)
        return MemoryWriter(self.queue, name)

    def reader(self, name: str = "trainer", auto_commit: bool = True) -> ExperienceReader:
        if self.durable and self.storage.replay_buffer.enable:
            return self._replay_reader()
        if self.durable:
            return self.durable.reader(name, auto_commit)
        return MemoryReader(self.queue, self.storage.name, self.storage.max_read_timeout)

    def _replay_reader(self) -> ExperienceReader:
        """Priority replay over the durable log: every reader shares one replay state; reads consume."""
        from trinity.buffer.priority import make_priority_fn
        from trinity.buffer.storage.replay import ReplayReader, ReplayTable
        from trinity.buffer.storage.sql import Reconnect

        replay = self.storage.replay_buffer
        score = make_priority_fn(replay, self.storage.name)
        table = ReplayTable(
            self.replay_url,
            self.durable.open_log(),
            score,
            self.storage.capacity,
            replay.reuse_cooldown_time,
            Reconnect.of(self.storage),
        )
        return ReplayReader(table, self.storage.max_read_timeout)
