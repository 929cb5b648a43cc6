"""``mode: serve``: what the OpenAI-compatible proxy of ``trinity.explorer.serve`` runs on.

The host holds the explorer's engines and writer; the proxy's ``/commit`` hands it the scored
experiences, which pass through the experience pipeline as an explored step's do and are
written as the next step. A step whose write finds the buffer out of reach is held and written
first by the next commit.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque

from trinity.algorithm.experience_ops import ExperiencePipeline
from trinity.common.experience import Experience
from trinity.config.schema import Config
from trinity.explorer.engines import RolloutEngines
from trinity.explorer.rollout_metrics import UnlearnableWarnings, rollout_metrics
from trinity.explorer.runner import BatchOutcome
from trinity.explorer.step_writer import StepWriter


@dataclasses.dataclass
class HeldStep:
    """A step through the experience pipeline whose write found the buffer out of reach."""

    step: int
    kept: list[Experience]
    dropped: int
    metrics: dict[str, float]
    tried: bool = False
    """A write was attempted: it may have landed (the writer's state says)."""


@dataclasses.dataclass(eq=False)
class ServeHost:
    """The serve proxy's engines (``engines``), its explorer's ``writer`` and event ``loop``."""

    config: Config
    engines: RolloutEngines
    writer: StepWriter
    pipeline: ExperiencePipeline
    warnings: UnlearnableWarnings
    loop: asyncio.AbstractEventLoop
    _held: deque[HeldStep] = dataclasses.field(default_factory=deque, init=False)
    _unreported: tuple[int, int] = dataclasses.field(default=(0, 0), init=False)
    """Experiences written and dropped since a commit last returned."""

    def commit(self, experiences: list[Experience]) -> tuple[int, int, int]:
        """The scored experiences through the experience pipeline, and the ones it keeps durable
        in the buffer as the next step; the last step written, and how many experiences this
        call wrote and how many the pipeline dropped.

        A step whose write finds the buffer out of reach (``BufferUnavailable``, raised) is held,
        through the pipeline already, and the next commit writes it first, once: the writer's
        state says whether a failed write landed after all. Nothing scored and nothing held:
        no step (an empty one would only count)."""
        if experiences:
            step = (self._held[-1].step if self._held else self.writer.step) + 1
            for exp in experiences:
                exp.eid = dataclasses.replace(exp.eid, batch=str(step))
            kept, pipeline_metrics = self.pipeline(experiences)
            metrics = rollout_metrics(BatchOutcome(kept, 0, 0), self.engines.version)
            metrics.update(pipeline_metrics)
            self.warnings.check(metrics, step)
            self._held.append(HeldStep(step, kept, len(experiences) - len(kept), metrics))
        while self._held:
            held = self._held[0]
            landed = held.tried and self.writer.landed(held.step)
            held.tried = True
            rows = [] if landed else held.kept  # landed: its position again
            self.writer.write(held.step, rows, [], held.metrics, self.engines.version)
            self._held.popleft()
            self._unreported = (self._unreported[0] + len(held.kept), self._unreported[1] + held.dropped)
        (written, dropped), self._unreported = self._unreported, (0, 0)
        return self.writer.step, written, dropped
