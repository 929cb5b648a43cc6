"""Exceptions that keep their message and fields across processes.

Ray sends an actor's exception to the driver by pickling it; an exception whose
``__init__`` takes other arguments than its message cannot be rebuilt the default way,
and the user would see Ray's ``UnserializableException`` instead of the message.
"""

from __future__ import annotations

from typing import Any


class PicklableError(Exception):
    """Base for exceptions with their own ``__init__``: rebuilt from ``args`` and attributes."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type[PicklableError], args: tuple, state: dict[str, Any]) -> PicklableError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def first_line(exc: BaseException) -> str:
    """An error's first line, for one-line messages (a database's or Ray's text runs on for
    lines); its type's name when it has no text."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
