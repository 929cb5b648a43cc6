"""When the explorer's batches run, and when weights move between them.

Batches go in as their tasks are read; each finishes on its own (``runner``: over-rollout,
timeouts), passes through the experience pipeline (refilled when its filters drop groups,
as DAPO's dynamic sampling does) and is written in step order. How many run at once, and
when the trainer's weights are taken, follows ``synchronizer.sync_style``
(``StepScheduler.take_weights``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from trinity.algorithm.experience_ops import ExperiencePipeline, by_group
from trinity.common.experience import Experience, Task
from trinity.config.schema import Config
from trinity.explorer.engines import RolloutEngines
from trinity.explorer.rollout_metrics import UnlearnableWarnings, rollout_metrics
from trinity.explorer.runner import BatchOutcome, TaskRunner, over_rollout_minimum
from trinity.explorer.step_writer import StepWriter
from trinity.explorer.tasksets import Tasksets
from trinity.model.engines import EngineCrashed
from trinity.monitor.metrics import timer
from trinity.runtime import freeze_long_lived_objects
from trinity.synchronizer.methods import SyncTimeout, WeightUpdate

logger = logging.getLogger(__name__)


class StepScheduler:
    """Submits the explorer's steps (``submit``) and bounds the batches in flight."""

    def __init__(
        self,
        config: Config,
        runner: TaskRunner,
        engines: RolloutEngines,
        tasksets: Tasksets,
        pipeline: ExperiencePipeline,
        writer: StepWriter,
        warnings: UnlearnableWarnings,
    ):
        self.config = config
        self.runner = runner
        self.engines = engines
        self.tasksets = tasksets
        self.pipeline = pipeline
        self.writer = writer
        self.warnings = warnings
        self.submitted = writer.step  # the last step that went in
        self._first_step = writer.step + 1  # after it, long-lived objects leave the cyclic GC
        self._inflight: deque[asyncio.Task] = deque()
        self._pipeline_turn = asyncio.Lock()

    async def submit(self, tasks: list[Task]) -> int:
        """Start the next step on ``tasks``; returns its number once the batches in flight
        leave room for the one after it."""
        step = self.submitted = self.submitted + 1
        previous = self._inflight[-1] if self._inflight else None
        positions = self.tasksets.positions()  # what a resume after this step reads next
        batch = self._collect_and_write(step, tasks, positions, previous, len(self._inflight) + 1)
        self._inflight.append(asyncio.ensure_future(batch))
        await self._bound()
        return step

    async def drain(self) -> None:
        """Until every submitted step is written."""
        while self._inflight:
            await self._inflight.popleft()

    async def _bound(self) -> None:
        """Wait until the batches in flight leave room for the next one."""
        sync = self.config.synchronizer
        if sync.sync_style == "fully_async":
            while len(self._inflight) >= self.config.explorer.max_inflight_batches:
                await self._inflight.popleft()
        elif self.submitted % sync.explorer_sync_interval == 0:
            await self.drain()  # the end of a sync interval: weights may move next
        while self._inflight and self._inflight[0].done():
            self._inflight.popleft().result()  # a batch's error surfaces here

    async def _collect_and_write(
        self, step: int, tasks: list[Task], positions: list[dict], previous: asyncio.Task | None, inflight: int
    ) -> None:
        """Run a step's batch, then (after the step before it) write its experiences, the
        explorer's position and its metrics."""
        metrics: dict[str, float] = {"rollout/inflight_batches": inflight}
        with timer(metrics, "explore_step"):
            outcome = await self.collect_step(step, tasks, metrics)
        metrics.update(rollout_metrics(outcome, step - 1))
        self.warnings.check(metrics, step)
        if previous is not None:
            await previous  # in step order: a resume position never skips an unwritten batch
        await asyncio.to_thread(self.writer.write, step, outcome.experiences, positions, metrics, self.engines.version)
        if step == self._first_step:
            freeze_long_lived_objects()

    async def collect_step(self, step: int, tasks: list[Task], metrics: dict[str, float]) -> BatchOutcome:
        """The step's experiences through the pipeline.

        While the pipeline's filters leave fewer task groups than the step has tasks, more task
        batches run (at most the pipeline's ``refill_rounds``, while the tasksets last); the
        step keeps its first ``len(tasks)`` groups. Pipeline metrics add up over the batches.
        """
        minimum = over_rollout_minimum(self.config)
        outcome = await self._run_batch(tasks, str(step), minimum)
        ran = list(outcome.experiences)
        outcome.experiences, totals = await self._through_pipeline(outcome.experiences)
        self.tasksets.report_pass_rates(ran)
        rounds = 0
        while rounds < self.pipeline.refill_rounds and len(by_group(outcome.experiences)) < len(tasks):
            more = self.tasksets.next_batch(self.submitted, refill=True)
            if more is None:
                break
            rounds += 1
            extra = await self._run_batch(more, f"{step}.{rounds}", minimum)
            ran = list(extra.experiences)
            extra.experiences, extra_metrics = await self._through_pipeline(extra.experiences)
            self.tasksets.report_pass_rates(ran)
            outcome = outcome.merged(extra)
            for key, value in extra_metrics.items():
                totals[key] = totals.get(key, 0.0) + value
        if self.pipeline.operators:
            kept = list(by_group(outcome.experiences).values())[: len(tasks)]
            outcome.experiences = [exp for group in kept for exp in group]
            metrics.update({**totals, "pipeline/refill_rounds": float(rounds)})
        return outcome

    async def _through_pipeline(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        """The experience pipeline in a worker thread, one batch at a time: an operator that takes
        seconds (a Data-Juicer recipe) holds no other batch's engine requests back."""
        if not self.pipeline.operators:
            return self.pipeline(experiences)
        async with self._pipeline_turn:
            return await asyncio.to_thread(self.pipeline, experiences)

    async def _run_batch(self, tasks: list[Task], batch_id: str, minimum: int | None) -> BatchOutcome:
        """``runner.run_batch``; a batch whose engine crashed runs again, whole (nothing of it was
        written), once ``RolloutEngines.restart_crashed`` has the engines back."""
        while True:
            try:
                return await self.runner.run_batch(tasks, batch_id, minimum)
            except EngineCrashed as crash:
                await asyncio.to_thread(self.engines.restart_crashed, crash)

    async def take_weights(self) -> None:
        """Before the next batch goes in, take the trainer's newer weights per ``sync_style``:

        - ``fixed``, ``explorer_driven``, ``trainer_driven``: the batches of one sync interval
          run together; at its end all are written, then new weights are loaded (``fixed``
          waits for the version ``step - sync_offset`` and takes a newer one already published:
          a trainer that takes several steps per explorer step, as on step-wise workflows'
          experiences, would otherwise train ever staler ones; ``explorer_driven``, more than
          ``sync_offset`` versions ahead, asks for a newer one and waits for it, as Trinity-RFT's
          dynamic_by_explorer does, going on with its weights after ``sync_timeout``;
          ``trainer_driven`` takes what is newer, and also loads, after draining, whenever the
          trainer has published).
        - ``fully_async``: before each batch the explorer loads whatever is newer, while at most
          ``max_inflight_batches`` batches run.

        ``trainer_driven`` and ``fully_async`` in one run also wait for the next version when
        more than ``sync_offset`` versions ahead: staleness stays bounded (as AReaL's max
        off-policyness), for an explorer that never waited ran ever further ahead on a CPU
        (staleness 22 by step 40 of the quickstart) and did not learn.
        """
        sync, done, style = self.config.synchronizer, self.submitted, self.config.synchronizer.sync_style
        if done == 0:
            return
        boundary = done % sync.explorer_sync_interval == 0
        ahead = self.engines.version < done - sync.sync_offset  # more than sync_offset versions ahead of the trainer
        if style in ("fixed", "explorer_driven") and not boundary:
            return
        if style == "fixed" and self.config.in_one_run and ahead:
            update = await asyncio.to_thread(self.engines.sync.fetch, done - sync.sync_offset, sync.sync_timeout)
        elif ahead and (style == "explorer_driven" or (self.config.in_one_run and style != "fixed")):
            update = await self._next_version()
        else:
            update = await asyncio.to_thread(self.engines.sync.fetch, self.engines.version + 1, 0)
        if update is not None:
            if style == "trainer_driven" and not boundary:
                await self.drain()
            await asyncio.to_thread(self.engines.load, update)

    async def _next_version(self) -> WeightUpdate | None:
        """The version after the engines', waited for up to ``sync_timeout`` (the batches written
        are what the trainer trains next, so the trainer can always produce it); None, with a
        warning, when it did not come: the explorer goes on with its weights."""
        version = self.engines.version
        try:
            return await asyncio.to_thread(self.engines.sync.fetch, version + 1, self.config.synchronizer.sync_timeout)
        except SyncTimeout as exc:
            logger.warning("%s: going on with weights of version %d: %s", self.writer.role, version, exc)
            return None
