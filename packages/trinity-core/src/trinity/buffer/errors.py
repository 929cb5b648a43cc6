"""The buffer's exceptions: what a reader or a taskset raises, and bad input data."""

from __future__ import annotations

from trinity.common.errors import PicklableError


class TrinityBufferError(PicklableError):
    """Base class of the buffer's errors."""


class BufferTimeout(TrinityBufferError, TimeoutError):
    """A read waited its whole timeout and no experience arrived."""

    def __init__(self, buffer: str, waited: float):
        self.buffer, self.waited = buffer, waited
        super().__init__(
            f"buffer {buffer!r}: no experience arrived within {waited:.1f} s "
            "(raise max_read_timeout if the explorer is slow)"
        )


class Fenced(TrinityBufferError):
    """Another process opened this writer or reader name since this one did: this one is stale.

    Raised by the write that would have gone through (an append, a cursor commit, a fenced
    metadata or checkpoint write), so an orphan of a killed run, or a role started twice,
    stops instead of writing next to its replacement.
    """

    def __init__(self, buffer: str, kind: str, name: str, held: int, current: int):
        self.buffer, self.kind, self.name, self.held, self.current = buffer, kind, name, held, current
        super().__init__(
            f"buffer {buffer!r}: {kind} {name!r} was opened again by another process (generation "
            f"{current}; this process holds {held}): this process is stale and stops writing"
        )


class BufferUnavailable(TrinityBufferError, ConnectionError):
    """The buffer's database server stayed out of reach through ``max_retry_times`` connection
    attempts. ``lost``: a connection dropped in a write transaction whose COMMIT may have reached
    the server, and none came back to find out; the writer's state says, once it is back."""

    def __init__(self, buffer: str, where: str, reason: str, attempts: int, interval: float, lost: bool = False):
        self.buffer, self.where, self.lost = buffer, where, lost
        tried = f"{attempts} attempt{'s' * (attempts > 1)}" + (f", {interval:g} s apart" if attempts > 1 else "")
        outcome = "; a write lost its connection at its commit, which may have landed" if lost else ""
        super().__init__(
            f"buffer {buffer!r}: database {where} out of reach ({tried}: max_retry_times, "
            f"max_retry_interval): {reason}{outcome}"
        )


class WritersGone(TrinityBufferError):
    """Nothing to read, and every writer that has not finished stopped its heartbeat."""

    def __init__(self, buffer: str, silent: dict[str, float], waited: float, timeout: float):
        self.buffer, self.silent, self.waited = buffer, silent, waited
        names = ", ".join(f"{name!r} (last heartbeat {age:.0f} s ago)" for name, age in silent.items())
        super().__init__(
            f"buffer {buffer!r}: no writer is alive: {names}; none came back within writer_timeout "
            f"({timeout:g} s) while the reader waited {waited:.1f} s for experiences. Restart the "
            "explorer (it resumes where it stopped) or raise writer_timeout"
        )


class EndOfBuffer(TrinityBufferError):
    """Every writer that opened the buffer has finished and everything was read."""


class EndOfTaskset(TrinityBufferError, StopIteration):
    """A taskset reached its ``total_epochs`` or ``total_steps``."""


class BadDataError(TrinityBufferError, ValueError):
    """A row of an input file cannot be used; the message names the file and 1-based row."""

    def __init__(self, path: str, row: int | None, reason: str):
        self.path, self.row, self.reason = path, row, reason
        where = f"{path}, row {row}" if row is not None else path
        super().__init__(f"{where}: {reason}")


class SerializationError(TrinityBufferError, ValueError):
    """Bytes that are not a serialised experience of a format version this code reads."""
