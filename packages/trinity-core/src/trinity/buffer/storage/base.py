"""What every experience storage provides, and the reader/writer of the durable logs.

Storages (``file``, ``queue``, ``sql`` or a plugin's) are classes built from a
``StorageConfig`` with ``writer(name)`` and ``reader(name, auto_commit)``. The durable
ones (sqlite/SQL databases and jsonl files) implement ``Log``; ``LogWriter`` and
``LogReader`` turn any ``Log`` into a writer and a reader.

Read semantics (the resume contract):

- ``auto_commit=True`` (default): ``read()`` consumes; the reader's durable cursor moves
  in the same transaction that fetches the rows, so readers sharing a name never get the
  same row, and a restarted reader continues after the last batch it was given. A crash
  after ``read()`` returned and before the batch was used loses that batch.
- ``auto_commit=False``: ``read()`` moves an in-memory position only; ``commit()`` makes
  it durable. A restarted reader gets again everything after its last commit. The trainer
  reads, trains, saves its checkpoint together with ``state_dict()`` and then commits; on
  resume it calls ``load_state_dict`` with the checkpoint's state, so a crash anywhere
  neither loses a batch nor trains one twice. One live reader per name in this mode.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from typing import Any

from trinity.buffer.errors import BufferTimeout, EndOfBuffer
from trinity.common.experience import Experience
from trinity.config.schema import StorageConfig

_POLL_MIN, _POLL_MAX = 0.002, 0.05


class ExperienceWriter(ABC):
    """Appends experiences to a buffer; one per producer (explorer)."""

    @abstractmethod
    def write(self, experiences: list[Experience]) -> None:
        """Append all of ``experiences`` at once (one transaction where the storage has them)."""

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


class Log(ABC):
    """A durable, ordered log of experiences with named writers and reader cursors.

    Positions are opaque, increasing integers; ``0`` is before the first row.
    """

    name: str

    @abstractmethod
    def open_writer(self, writer: str) -> None:
        """Register ``writer`` as writing (again, if it had finished)."""

    @abstractmethod
    def append(self, experiences: list[Experience]) -> None:
        """Append in one transaction: all or nothing."""

    @abstractmethod
    def finish_writer(self, writer: str) -> None: ...

    @abstractmethod
    def writers_done(self) -> bool:
        """At least one writer registered and every registered writer finished."""

    @abstractmethod
    def fetch(self, after: int, n: int) -> tuple[list[Experience], int]:
        """Up to ``n`` rows after position ``after``, and the position after the last one."""

    @abstractmethod
    def claim(self, reader: str, n: int) -> tuple[list[Experience], int]:
        """``fetch`` from ``reader``'s durable cursor and move the cursor, atomically."""

    @abstractmethod
    def cursor(self, reader: str) -> int: ...

    @abstractmethod
    def set_cursor(self, reader: str, position: int) -> None:
        """Set ``reader``'s durable cursor and its progress to ``position``."""

    @abstractmethod
    def set_progress(self, reader: str, position: int) -> None:
        """Record how far ``reader`` has read (not committed): what ``unread`` counts from."""

    @abstractmethod
    def unread(self) -> int:
        """Rows after the slowest reader's progress (all rows if no reader yet)."""


class LogWriter(ExperienceWriter):
    """Writes to a ``Log``; with a ``capacity`` it waits while the slowest reader is that far behind."""

    def __init__(self, log: Log, writer: str, capacity: int | None = None):
        self.log, self.writer, self.capacity = log, writer, capacity
        log.open_writer(writer)

    def write(self, experiences: list[Experience]) -> None:
        if not experiences:
            return
        if self.capacity:
            _poll(lambda: (unread := self.log.unread()) == 0 or unread + len(experiences) <= self.capacity)
        self.log.append(experiences)

    def finish(self) -> None:
        self.log.finish_writer(self.writer)


class LogReader(ExperienceReader):
    """Reads a ``Log`` by polling (2 ms doubling to 50 ms while idle)."""

    def __init__(self, log: Log, reader: str, default_timeout: float, auto_commit: bool = True):
        super().__init__(log.name, default_timeout)
        self.log, self.reader, self.auto_commit = log, reader, auto_commit
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
                self.log.set_progress(self.reader, self.position)
        return rows

    def commit(self) -> None:
        if not self.auto_commit:
            self.log.set_cursor(self.reader, self.position)

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after ``state["position"]``; the durable cursor moves there too."""
        self.position = int(state["position"])
        self.log.set_cursor(self.reader, self.position)


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

    def writer(self, name: str | None = None) -> LogWriter:
        return LogWriter(self.open_log(), name or default_writer_name(), self.capacity)

    def reader(self, name: str = "trainer", auto_commit: bool = True) -> LogReader:
        return LogReader(self.open_log(), name, self.storage.max_read_timeout, auto_commit)


def _poll(ready: Any, pause: float = _POLL_MIN) -> None:
    """Wait until ``ready()`` (used by writers of a full durable queue)."""
    while not ready():
        time.sleep(pause)
        pause = min(pause * 2, _POLL_MAX)
