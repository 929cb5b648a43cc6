"""Experience storages: ``file`` (jsonl), ``queue`` (memory, Ray actor or durable log) and ``sql``."""

from trinity.buffer.storage.base import ExperienceReader, ExperienceWriter, Log, LogStorage

__all__ = ["ExperienceReader", "ExperienceWriter", "Log", "LogStorage"]
