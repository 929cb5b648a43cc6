"""An in-memory experience queue: FIFO with a capacity, or a priority replay buffer.

Shared by writers and readers of one process (``local_queue``) and hosted by the Ray queue
actor for sharing across actors (which stores serialised experiences: the queue only ever looks
at an item's ``model_version``). Thread-safe; blocking calls wait on a condition. Priority
replay (``replay_buffer``: priorities, drops, cooldowns): ``docs/buffer.md``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from trinity.buffer.priority import make_priority_fn
from trinity.buffer.storage.base import ExperienceReader, ExperienceWriter, default_writer_name
from trinity.common.experience import Experience
from trinity.config.schema import ExperienceBufferConfig


@dataclass(order=True)
class _Item:
    key: tuple[float, int]
    exp: Experience = field(compare=False)
    use_count: int = field(default=0, compare=False)


class MemoryQueue:
    """The queue itself; ``MemoryWriter`` and ``MemoryReader`` (or the Ray actor) wrap it."""

    def __init__(self, storage: ExperienceBufferConfig):
        self.name = storage.name
        self.capacity = storage.capacity
        replay = storage.replay_buffer
        self.priority = replay.enable
        self.cooldown = replay.reuse_cooldown_time
        self.score = make_priority_fn(replay, self.name) if self.priority else None
        self.fifo: deque[Experience] = deque()
        self.heap: list[_Item] = []
        self.cooling: list[tuple[float, int, _Item]] = []  # (ready time, seq, item)
        self.seq = itertools.count()
        self.writers: dict[str, bool] = {}  # name -> finished
        self.cond = threading.Condition()

    def __len__(self) -> int:
        return len(self.heap) if self.priority else len(self.fifo)

    def open_writer(self, writer: str) -> None:
        with self.cond:
            self.writers[writer] = False

    def finish_writer(self, writer: str) -> None:
        with self.cond:
            self.writers[writer] = True
            self.cond.notify_all()

    def _push(self, item: _Item) -> None:
        score = self.score(item.exp.model_version, item.use_count)
        if score is None:
            return
        item.key = (-score, next(self.seq))
        heapq.heappush(self.heap, item)
        if len(self.heap) > self.capacity:  # drop the lowest priority (the largest key)
            self.heap.remove(max(self.heap))
            heapq.heapify(self.heap)

    def put(self, experiences: list[Experience]) -> None:
        """Append; a full FIFO waits for room (a batch larger than the capacity waits for an empty queue)."""
        with self.cond:
            if self.priority:
                for exp in experiences:
                    self._push(_Item((0.0, 0), exp))
            else:
                self.cond.wait_for(lambda: not self.fifo or len(self.fifo) + len(experiences) <= self.capacity)
                self.fifo.extend(experiences)
            self.cond.notify_all()

    def _release_cooled(self) -> None:
        now = time.monotonic()
        while self.cooling and self.cooling[0][0] <= now:
            self._push(heapq.heappop(self.cooling)[2])

    def _pop(self, n: int) -> list[Experience]:
        if not self.priority:
            return [self.fifo.popleft() for _ in range(min(n, len(self.fifo)))]
        self._release_cooled()
        items = [heapq.heappop(self.heap) for _ in range(min(n, len(self.heap)))]
        if self.cooldown is not None:
            ready = time.monotonic() + self.cooldown
            for item in items:
                item.use_count += 1
                heapq.heappush(self.cooling, (ready, next(self.seq), item))
        return [item.exp for item in items]

    def _ended(self) -> bool:
        return bool(self.writers) and all(self.writers.values()) and not len(self) and not self.cooling

    def get(self, n: int, timeout: float) -> tuple[list[Experience], bool]:
        """Up to ``n`` experiences within ``timeout`` s, and whether the queue has ended."""
        deadline = time.monotonic() + timeout
        got: list[Experience] = []
        with self.cond:
            while True:
                got += self._pop(n - len(got))
                if got:
                    self.cond.notify_all()  # room for waiting writers
                if len(got) >= n or self._ended():
                    return got, self._ended()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return got, False
                if self.cooling:
                    remaining = min(remaining, max(self.cooling[0][0] - time.monotonic(), 0.0))
                self.cond.wait(remaining)


class MemoryWriter(ExperienceWriter):
    """Writes to a ``MemoryQueue`` or anything with its methods (the Ray queue handle)."""

    def __init__(self, queue: Any, writer: str | None = None):
        self.queue, self.writer = queue, writer or default_writer_name()
        self._state: dict[str, Any] | None = None  # the queue itself ends with the run: so does this
        queue.open_writer(self.writer)

    def write(self, experiences: list[Experience], state: dict[str, Any] | None = None) -> None:
        if experiences:
            self.queue.put(experiences)
        self._state = state if state is not None else self._state

    def state(self) -> dict[str, Any] | None:
        return self._state

    def finish(self) -> None:
        self.queue.finish_writer(self.writer)


class MemoryReader(ExperienceReader):
    """Reads a ``MemoryQueue`` (or the Ray queue handle): a read consumes."""

    def __init__(self, queue: Any, buffer: str, default_timeout: float):
        super().__init__(buffer, default_timeout)
        self.queue = queue

    def _take(self, n: int, deadline: float) -> tuple[list[Experience], bool]:
        return self.queue.get(n, max(deadline - time.monotonic(), 0.0))


_LOCAL: dict[str, MemoryQueue] = {}
_LOCAL_LOCK = threading.Lock()


def local_queue(storage: ExperienceBufferConfig) -> MemoryQueue:
    """The process-wide in-memory queue of ``storage.name`` (created on first use)."""
    with _LOCAL_LOCK:
        if storage.name not in _LOCAL:
            _LOCAL[storage.name] = MemoryQueue(storage)
        return _LOCAL[storage.name]


def drop_local_queue(storage: ExperienceBufferConfig) -> None:
    """Forget the process-wide queue of ``storage.name``: the next run in this process starts empty."""
    with _LOCAL_LOCK:
        _LOCAL.pop(storage.name, None)
