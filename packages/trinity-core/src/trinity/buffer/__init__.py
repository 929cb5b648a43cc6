"""The buffer: tasksets the explorer reads and the experience buffer between explorer and trainer.

``open_experience_writer`` / ``open_experience_reader`` open any storage named by
``storage.storage_type`` (``queue``, ``sql``, ``file`` or a plugin's) through the plugin
registry; see ``trinity.buffer.storage.base`` for when a read counts as consumed.
"""

from __future__ import annotations

from trinity.buffer.errors import (
    BadDataError,
    BufferTimeout,
    EndOfBuffer,
    EndOfTaskset,
    Fenced,
    SerializationError,
    TrinityBufferError,
    WritersGone,
)
from trinity.buffer.storage.base import ExperienceReader, ExperienceWriter
from trinity.buffer.taskset import TasksetReader, load_rows
from trinity.config.schema import StorageConfig
from trinity.plugins import Kind, resolve


def _storage(storage: StorageConfig, namespace: str | None):
    cls = resolve(Kind.BUFFER_STORAGE, storage.storage_type, config_key=f"{storage.name}.storage_type")
    return cls(storage, namespace=namespace)


def open_experience_writer(
    storage: StorageConfig, writer_name: str | None = None, namespace: str | None = None
) -> ExperienceWriter:
    """A writer of ``storage``. Give each concurrent writer its own ``writer_name`` (the
    explorer's name): readers end only when every named writer has called ``finish()``, and
    a restarted writer of the same name takes its old place. Default: a fresh unique name.
    """
    return _storage(storage, namespace).writer(writer_name)


def open_experience_reader(
    storage: StorageConfig, reader_name: str = "trainer", auto_commit: bool = True, namespace: str | None = None
) -> ExperienceReader:
    """A reader of ``storage``; readers sharing ``reader_name`` share one durable position."""
    return _storage(storage, namespace).reader(reader_name, auto_commit)


__all__ = [
    "BadDataError",
    "BufferTimeout",
    "EndOfBuffer",
    "EndOfTaskset",
    "Fenced",
    "ExperienceReader",
    "ExperienceWriter",
    "SerializationError",
    "TasksetReader",
    "TrinityBufferError",
    "WritersGone",
    "load_rows",
    "open_experience_reader",
    "open_experience_writer",
]
