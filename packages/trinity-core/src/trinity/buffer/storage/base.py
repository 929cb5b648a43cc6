"""What every experience storage provides, and the reader/writer of the durable logs.

Storages (``file``, ``queue``, ``sql`` or a plugin's) are classes built from a
``StorageConfig`` with ``writer(name)`` and ``reader(name, auto_commit)``. The durable ones
(SQL databases and jsonl files) implement ``Log``; ``LogWriter`` and ``LogReader`` turn any
``Log`` into a writer and a reader. When a read counts as consumed, how a writer's state
commits with its rows, generations (``Fenced``) and heartbeats: ``docs/buffer.md``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from trinity.buffer.errors import BufferTimeout, EndOfBuffer, Fenced
from trinity.common.errors import first_line
from trinity.common.experience import Experience
from trinity.config.schema import StorageConfig

logger = logging.getLogger(__name__)

_POLL_MIN, _POLL_MAX = 0.002, 0.05
HEARTBEATS_PER_TIMEOUT = 4
"""A writer sends this many heartbeats per ``writer_timeout``: one late beat is no death."""


class ExperienceWriter(ABC):
    """Appends experiences to a buffer; one per producer (explorer)."""

    @abstractmethod
    def write(self, experiences: list[Experience], state: dict[str, Any] | None = None) -> None:
        """Append all of ``experiences`` at once and record ``state``, the writer's position after
        them (one transaction where the storage has them; ``state()`` returns it)."""

    def state(self) -> dict[str, Any] | None:
        """The ``state`` of this writer name's last write, where the storage keeps it durably
        (None: nothing written yet, or a storage that forgets on restart)."""
        return None

    def fenced(self) -> AbstractContextManager[None]:
        """A block of writes that belong to this writer (its metadata files): it raises
        ``Fenced`` if another process opened the name, and holds the buffer's write lock so
        none can while it runs. No-op where the storage has no generations."""
        return nullcontext()

    @abstractmethod
    def finish(self) -> None:
        """This writer is done: once all writers finished and all is read, readers get ``EndOfBuffer``."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release connections; does not finish (a restarted writer of the same name may go on)."""

    def __enter__(self) -> ExperienceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ExperienceReader(ABC):
    """Takes batches out of a buffer (see the module docstring for when a read counts)."""

    def __init__(self, buffer: str, default_timeout: float):
        self.buffer = buffer
        self.default_timeout = default_timeout

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        """Up to ``batch_size`` experiences, waiting up to ``timeout`` seconds for a full batch.

        Returns a partial batch when the wait ends with some; raises ``BufferTimeout`` when
        none arrived and ``EndOfBuffer`` when every writer finished and all was read.
        """
        wait = self.default_timeout if timeout is None else timeout
        got, ended = self._take(batch_size, time.monotonic() + wait)
        if got:
            return got
        if ended:
            raise EndOfBuffer(f"buffer {self.buffer!r}: all writers finished and everything was read")
        raise BufferTimeout(self.buffer, wait)

    @abstractmethod
    def _take(self, n: int, deadline: float) -> tuple[list[Experience], bool]:
        """Up to ``n`` experiences before ``deadline``, and whether the buffer has ended."""

    def commit(self) -> None:  # noqa: B027 (optional hook)
        """Make the reads so far durable (no-op where reads consume at once)."""

    def fenced(self) -> AbstractContextManager[None]:
        """As ``ExperienceWriter.fenced``, for a reader that commits itself (the trainer's
        checkpoint and metadata writes)."""
        return nullcontext()

    def dead_writers(self, since: float) -> dict[str, float]:
        """The unfinished writers with the age of their last heartbeat (seconds), when not one
        of them has sent a heartbeat within ``writer_timeout`` seconds, counted from
        ``since`` (a ``time.time()``) at the earliest; else empty: someone may still write.
        Empty as well for storages without heartbeats."""
        return {}

    def silent_writers(self) -> list[str]:
        """The unfinished writers that have missed a heartbeat: dead or stalled, which
        ``dead_writers`` decides once ``writer_timeout`` has passed. Empty for storages without
        heartbeats."""
        return []

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Restore a position from ``state_dict`` (no-op for storages without one)."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release connections."""

    def __enter__(self) -> ExperienceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_writer_name() -> str:
    """A unique writer name: a writer that restarts under a new name leaves its old one unfinished."""
    return f"writer-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Lease:
    """A process's hold on a writer or reader name: valid while the name's generation is this one."""

    kind: str  # "writer" or "reader"
    name: str
    generation: int


@dataclass(frozen=True)
class WriterStatus:
    name: str
    finished: bool
    updated: float
    """``time.time()`` of the writer's last open, write or heartbeat."""


class Log(ABC):
    """A durable, ordered log of experiences with named writers and reader cursors.

    Positions are opaque, increasing integers; ``0`` is before the first row.
    """

    name: str

    @abstractmethod
    def open_writer(self, writer: str) -> Lease:
        """Register ``writer`` as writing (again, if it had finished) under a new generation."""

    @abstractmethod
    def append(self, experiences: list[Experience], lease: Lease, state: dict[str, Any] | None) -> None:
        """Append in one transaction with the writer's ``state``: all or nothing; ``Fenced`` if
        ``lease`` is stale."""

    @abstractmethod
    def writer_state(self, writer: str) -> dict[str, Any] | None:
        """The ``state`` committed with ``writer``'s last append."""

    @abstractmethod
    def heartbeat(self, lease: Lease) -> None:
        """Mark the writer alive now (``Fenced`` if stale)."""

    @abstractmethod
    def finish_writer(self, lease: Lease) -> None: ...

    @abstractmethod
    def writer_statuses(self) -> list[WriterStatus]: ...

    def writers_done(self) -> bool:
        """At least one writer registered and every registered writer finished."""
        writers = self.writer_statuses()
        return bool(writers) and all(w.finished for w in writers)

    @abstractmethod
    def open_reader(self, reader: str) -> Lease:
        """Take ``reader``'s name for this process alone (exclusive readers): a new generation."""

    @abstractmethod
    def fence(self, lease: Lease) -> AbstractContextManager[None]:
        """A block under the log's write lock that runs only while ``lease`` is current."""

    @abstractmethod
    def fetch(self, after: int, n: int) -> tuple[list[Experience], int]:
        """Up to ``n`` rows after position ``after``, and the position after the last one."""

    @abstractmethod
    def claim(self, reader: str, n: int) -> tuple[list[Experience], int]:
        """``fetch`` from ``reader``'s durable cursor and move the cursor, atomically."""

    @abstractmethod
    def cursor(self, reader: str) -> int: ...

    @abstractmethod
    def set_cursor(self, reader: str, position: int, lease: Lease | None = None) -> None:
        """Set ``reader``'s durable cursor and its progress to ``position`` (if ``lease`` is current)."""

    @abstractmethod
    def set_progress(self, reader: str, position: int, lease: Lease | None = None) -> None:
        """Record how far ``reader`` has read (not committed): what ``unread`` counts from."""

    @abstractmethod
    def unread(self) -> int:
        """Rows after the slowest reader's progress (all rows if no reader yet)."""


def _heartbeats(log: Log, lease: Lease, stop: threading.Event, every: float) -> None:
    """A ``LogWriter``'s heartbeat thread (it holds no reference to the writer)."""
    failing = False
    while not stop.wait(every):
        try:
            log.heartbeat(lease)
        except Fenced:
            return
        except Exception as exc:  # any storage error is retried: none may end the beat
            if not failing:
                logger.warning(
                    "buffer %r: writer %r could not send its heartbeat (%s: %s); retrying every %.1f s",
                    log.name,
                    lease.name,
                    type(exc).__name__,
                    first_line(exc),
                    every,
                )
            failing = True
            continue
        if failing:
            logger.warning("buffer %r: writer %r sends its heartbeat again", log.name, lease.name)
            failing = False


class LogWriter(ExperienceWriter):
    """Writes to a ``Log``; with a ``capacity`` it waits while the slowest reader is that far behind.

    A daemon thread sends the heartbeat every ``heartbeat`` seconds until ``finish``, ``close``
    or the writer is garbage-collected (a process that drops its writer is not writing). A
    heartbeat that finds the name taken by another process ends the thread, and the next write
    raises ``Fenced``. One that fails otherwise (the database restarting, a network drop) is
    logged once and retried at the next beat, so that a live writer does not look dead to
    readers once its database is back.
    """

    def __init__(self, log: Log, writer: str, capacity: int | None = None, heartbeat: float | None = None):
        self.log, self.writer, self.capacity = log, writer, capacity
        self.lease = log.open_writer(writer)
        self._stop = threading.Event()
        if heartbeat:
            weakref.finalize(self, self._stop.set)  # a writer dropped without close() stops beating too
            beat = threading.Thread(target=_heartbeats, args=(log, self.lease, self._stop, heartbeat), daemon=True)
            beat.start()

    def write(self, experiences: list[Experience], state: dict[str, Any] | None = None) -> None:
        if not experiences and state is None:
            return
        if self.capacity and experiences:
            _poll(lambda: self.log.unread() == 0 or self.log.unread() + len(experiences) <= self.capacity)
        self.log.append(experiences, self.lease, state)

    def state(self) -> dict[str, Any] | None:
        return self.log.writer_state(self.writer)

    def fenced(self) -> AbstractContextManager[None]:
        return self.log.fence(self.lease)

    def finish(self) -> None:
        self._stop.set()
        self.log.finish_writer(self.lease)

    def close(self) -> None:
        self._stop.set()


class LogReader(ExperienceReader):
    """Reads a ``Log`` by polling (2 ms doubling to 50 ms while idle)."""

    def __init__(
        self, log: Log, reader: str, default_timeout: float, auto_commit: bool = True, writer_timeout: float = 0
    ):
        super().__init__(log.name, default_timeout)
        self.log, self.reader, self.auto_commit = log, reader, auto_commit
        self.writer_timeout = writer_timeout
        self.lease = None if auto_commit else log.open_reader(reader)  # shared names: no fencing
        self.position = log.cursor(reader)

    def _take(self, n: int, deadline: float) -> tuple[list[Experience], bool]:
        got: list[Experience] = []
        pause = _POLL_MIN
        while True:
            got += self._next(n - len(got))
            if len(got) >= n:
                return got, False
            # Short: the end if all writers had finished before a fetch that still found nothing.
            if self.log.writers_done():
                more = self._next(n - len(got))
                if not more:
                    return got, True
                got += more
                continue
            now = time.monotonic()
            if now >= deadline:
                return got, False
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, _POLL_MAX)

    def _next(self, n: int) -> list[Experience]:
        """Up to ``n`` rows after the position (claimed under auto-commit), moving it."""
        if self.auto_commit:
            rows, self.position = self.log.claim(self.reader, n)
        else:
            rows, self.position = self.log.fetch(self.position, n)
            if rows:
                self.log.set_progress(self.reader, self.position, self.lease)
        return rows

    def commit(self) -> None:
        if not self.auto_commit:
            self.log.set_cursor(self.reader, self.position, self.lease)

    def fenced(self) -> AbstractContextManager[None]:
        return self.log.fence(self.lease) if self.lease else nullcontext()

    def dead_writers(self, since: float) -> dict[str, float]:
        if not self.writer_timeout:
            return {}
        now = time.time()
        pending = [w for w in self.log.writer_statuses() if not w.finished]
        if not pending or any(now - max(w.updated, since) < self.writer_timeout for w in pending):
            return {}
        return {w.name: now - w.updated for w in pending}

    def silent_writers(self) -> list[str]:
        if not self.writer_timeout:
            return []
        missed = time.time() - 2 * self.writer_timeout / HEARTBEATS_PER_TIMEOUT
        return [w.name for w in self.log.writer_statuses() if not w.finished and w.updated < missed]

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after ``state["position"]``; the durable cursor moves there too."""
        self.position = int(state["position"])
        self.log.set_cursor(self.reader, self.position, self.lease)


class LogStorage(ABC):
    """A storage whose data lives in a ``Log``: every writer and reader opens its own handle.

    ``capacity`` bounds how far writers may run ahead of the slowest reader (None: unbounded;
    the ``queue`` storage sets it from the config).
    """

    def __init__(self, storage: StorageConfig, namespace: str | None = None):
        self.storage = storage
        self.capacity: int | None = None

    @abstractmethod
    def open_log(self) -> Log: ...

    @property
    def writer_timeout(self) -> float:
        return getattr(self.storage, "writer_timeout", 0.0)

    def writer(self, name: str | None = None) -> LogWriter:
        heartbeat = self.writer_timeout / HEARTBEATS_PER_TIMEOUT
        return LogWriter(self.open_log(), name or default_writer_name(), self.capacity, heartbeat)

    def reader(self, name: str = "trainer", auto_commit: bool = True) -> LogReader:
        return LogReader(self.open_log(), name, self.storage.max_read_timeout, auto_commit, self.writer_timeout)


def _poll(ready: Any, pause: float = _POLL_MIN) -> None:
    """Wait until ``ready()`` (used by writers of a full durable queue)."""
    while not ready():
        time.sleep(pause)
        pause = min(pause * 2, _POLL_MAX)
