"""The explorer's side of weight sync: the configured sync method, and its waits told to the trainer.

An explorer that blocks on a version the trainer has not published yet says so through its
experience writer (``ExperienceWriter.set_waiting``); a trainer short of a batch reads it back
from its reader (``awaited_version``) and trains on what it has, since no more rows can come
before that version. The buffer is the one channel both roles share whatever the sync method,
so sync methods only move weights.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trinity.buffer import ExperienceWriter
from trinity.buffer.errors import BufferUnavailable
from trinity.config.schema import Config
from trinity.plugins import Kind, resolve
from trinity.synchronizer.methods import SyncMethod, WeightUpdate

if TYPE_CHECKING:
    from trinity.rollout.client import EngineClient

logger = logging.getLogger(__name__)


class ExplorerSync:
    """``synchronizer.sync_method`` as the explorer uses it; ``writer`` tells its waits (None: bench)."""

    def __init__(self, config: Config, writer: ExperienceWriter | None):
        self.method: SyncMethod = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)
        self.writer = writer

    @property
    def feeds_new_engines(self) -> bool:
        return self.method.feeds_new_engines

    def connect(self, engines: Sequence[EngineClient]) -> None:
        self.method.connect(engines)

    def fetch(self, min_version: int, timeout: float) -> WeightUpdate | None:
        """``SyncMethod.fetch``; a wait for ``min_version`` is on the writer while it lasts."""
        if self.writer is None:
            return self.method.fetch(min_version, timeout)
        update = self.method.fetch(min_version, 0)
        if update is not None or timeout <= 0:
            return update
        self._tell_waiting(min_version)
        try:
            return self.method.fetch(min_version, timeout)
        finally:
            self._tell_waiting(None)

    def _tell_waiting(self, version: int | None) -> None:
        try:
            self.writer.set_waiting(version)
        except BufferUnavailable as exc:  # the trainer then waits its max_read_timeout: no harm beyond that
            logger.warning("could not tell the trainer that the explorer waits for weights: %s", exc)
