"""What one training step reads: ``train_batch_size`` experiences, some of them expert rows.

The rows come from the experience buffer, and from an auxiliary (expert) buffer where the
sample strategy asks (``mix``). A step takes fewer when the buffer ends, when
``max_read_timeout`` passes, or when an explorer waits for the very weights this step will
produce (the sync signals tell: ``SyncSignals.awaited_version``); a silent explorer is given
``writer_timeout`` to show it is alive before the run fails with ``WritersGone``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from trinity.buffer import BufferTimeout, EndOfBuffer, ExperienceReader, WritersGone, open_experience_reader
from trinity.common.experience import Experience
from trinity.config.schema import Config, StorageConfig
from trinity.synchronizer.signals import SyncSignals

logger = logging.getLogger(__name__)

_READ_SLICE = 1.0
"""Seconds of one wait on the buffer before checking whether an explorer waits on us."""


class StopRequested(Exception):
    """``Trainer.request_stop`` came while the trainer waited for experiences."""


class ExpertDataEnded(EndOfBuffer):
    """The expert data ran out: training stops after the last full step."""


class StepReader:
    """The trainer's readers: ``reader`` (experiences, or a supervised dataset read as them) and,
    with expert data, ``expert_reader``; their positions go into each checkpoint's metadata."""

    def __init__(
        self,
        config: Config,
        role: str,
        data_schema: str,
        expert: tuple[str, int] | None,
        stop: threading.Event,
        signals: SyncSignals,
    ):
        self.config, self.role, self._stop, self.signals = config, role, stop, signals
        storage = config.buffer.trainer_input
        self.reader = self._open(storage.experience_buffer, data_schema)
        self.expert_reader: ExperienceReader | None = None
        self.expert_buffer, self.expert_rows = expert or ("", 0)
        if expert:
            self.expert_reader = self._open(storage.auxiliary_buffers[self.expert_buffer], "sft")
        self.wanted = config.buffer.train_batch_size - self.expert_rows
        self.writer_timeout = storage.experience_buffer.writer_timeout

    def _open(self, storage: StorageConfig, schema: str) -> ExperienceReader:
        """An experience buffer, or a supervised dataset (SFT/DPO rows in files) as one."""
        if schema != "rollout" and storage.storage_type == "file":
            from trinity.trainer.supervised import SupervisedReader

            return SupervisedReader(storage, self.config.model, schema, self.config.buffer.seed)
        return open_experience_reader(storage, self.role, auto_commit=False, namespace=self.config.ray_namespace)

    @property
    def readers(self) -> list[ExperienceReader]:
        return [r for r in (self.reader, self.expert_reader) if r is not None]

    def planned_steps(self) -> int | None:
        """The steps a supervised dataset makes; None for an experience buffer (until it ends)."""
        from trinity.trainer.supervised import SupervisedReader

        return self.reader.planned_steps(self.wanted) if isinstance(self.reader, SupervisedReader) else None

    def read(self, step: int) -> list[Experience]:
        """The experiences of the step after ``step``: the buffer's, then the expert rows."""
        return self._read_batch(step) + self._read_expert(step)

    def _read_batch(self, step: int) -> list[Experience]:
        """``wanted`` experiences, or fewer when no more can come in time (the module docstring)."""
        wait = self.config.buffer.trainer_input.experience_buffer.max_read_timeout
        started, since = time.monotonic(), time.time()
        deadline = started + wait
        got: list[Experience] = []
        while len(got) < self.wanted:
            remaining = deadline - time.monotonic()
            try:
                got += self.reader.read(self.wanted - len(got), timeout=max(0.0, min(_READ_SLICE, remaining)))
            except BufferTimeout as exc:
                if self._stop.is_set() and not got:
                    raise StopRequested from None
                dead = self.reader.dead_writers(since)
                if remaining <= _READ_SLICE and not got and not dead:
                    undecided = time.monotonic() - started < self.writer_timeout + 2 * _READ_SLICE
                    if undecided and self.reader.silent_writers():
                        deadline += _READ_SLICE  # not over before the silent writer is known dead or alive
                        continue
                    raise BufferTimeout(exc.buffer, wait) from None
                if dead:
                    raise WritersGone(exc.buffer, dead, time.monotonic() - started, self.writer_timeout) from None
            except EndOfBuffer:
                if not got:
                    raise
                break
            if got and (remaining <= _READ_SLICE or (len(got) < self.wanted and self._explorer_waits(step))):
                break
        return got

    def _explorer_waits(self, step: int) -> bool:
        """An explorer waits for weights newer than ``step``'s: only this step's update brings them."""
        awaited = self.signals.awaited_version()
        return awaited is not None and awaited > step

    def _read_expert(self, step: int) -> list[Experience]:
        """The step's expert rows (the sample strategy's ``expert_reads``), tagged as such."""
        if self.expert_reader is None:
            return []
        try:
            rows = self.expert_reader.read(self.expert_rows)
        except EndOfBuffer as exc:
            raise ExpertDataEnded(
                f"the expert data ended ({exc}): training stops after step {step}; raise "
                f"buffer.trainer_input.auxiliary_buffers.{self.expert_buffer}.total_epochs to train longer"
            ) from None
        for exp in rows:
            exp.info["is_expert"] = True
        return rows

    def state_dict(self) -> dict[str, Any]:
        """The readers' positions, as the trainer's metadata holds them."""
        state = {"reader": self.reader.state_dict()}
        if self.expert_reader is not None:
            state["expert_reader"] = self.expert_reader.state_dict()
        return state

    def load_state_dict(self, meta: dict[str, Any]) -> None:
        self.reader.load_state_dict(meta["reader"])
        if self.expert_reader is not None:
            self.expert_reader.load_state_dict(meta["expert_reader"])

    def commit(self) -> None:
        for reader in self.readers:
            reader.commit()

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
