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
