"""The explorer's side of the synchronizer: its sync method, sync style and signals in one.

A fetch that has to wait says so on the sync signals while it lasts (the trainer, short of a
batch, then trains on what it has) and ends once the trainer says it finished; the sync
method only moves weights.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING

from trinity.config.schema import Config
from trinity.plugins import Kind, resolve
from trinity.synchronizer.methods import SyncMethod, SyncTimeout, WeightUpdate
from trinity.synchronizer.policies import SyncPolicy, sync_policy
from trinity.synchronizer.signals import SyncSignals, TrainerFinished

if TYPE_CHECKING:
    from trinity.rollout.client import EngineClient

FINISHED_POLL = 0.2
"""Seconds a waiting fetch waits on the sync method between looks at the trainer's end."""


class ExplorerSync:
    """``synchronizer`` as the explorer ``name`` uses it (None: it tells no trainer of its waits:
    bench, debug)."""

    def __init__(self, config: Config, name: str | None):
        self.name = name
        self.signals = SyncSignals(config)
        if name is not None:
            self.signals.forget_wait(name)
        self.policy: SyncPolicy = sync_policy(config)
        self.method: SyncMethod = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)

    @property
    def feeds_new_engines(self) -> bool:
        return self.method.feeds_new_engines

    def connect(self, engines: Sequence[EngineClient]) -> None:
        self.method.connect(engines)

    def fetch(self, min_version: int, timeout: float) -> WeightUpdate | None:
        """The newest version >= ``min_version``, waiting up to ``timeout`` (``SyncTimeout`` after it;
        ``timeout=0``: None at once); ``TrainerFinished`` when the trainer ended before it."""
        update = self.method.fetch(min_version, 0)
        if update is not None:
            return update
        self._stop_if_finished(min_version)
        if timeout <= 0:
            return None
        deadline = time.monotonic() + timeout
        with self.signals.waiting(self.name, min_version) if self.name is not None else nullcontext():
            while (left := deadline - time.monotonic()) > 0:
                try:
                    return self.method.fetch(min_version, min(FINISHED_POLL, left))
                except SyncTimeout:
                    self._stop_if_finished(min_version)
        raise SyncTimeout(f"no weights of version >= {min_version} published after {timeout:.0f} s")

    def _stop_if_finished(self, min_version: int) -> None:
        last = self.signals.finished_before(min_version)
        if last is not None:
            raise TrainerFinished(last, min_version)
