"""When the explorer's batches run, and when weights move between them.

Batches go in as their tasks are read; each finishes on its own (``runner``: over-rollout,
timeouts), passes through the experience pipeline (refilled when its filters drop groups,
as DAPO's dynamic sampling does) and is written in step order. How many run at once, and
when the trainer's weights are taken, the sync style's policy says
(``trinity.synchronizer.policies``).
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
from trinity.synchronizer.policies import WeightsDue

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
        self.policy = engines.sync.policy

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
        """Wait until the batches in flight leave the room the sync style gives the next one."""
        room = self.policy.batches_left_running(self.submitted)
        while room is not None and len(self._inflight) > room:
            await self._inflight.popleft()
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
        """Before the next batch goes in, the weights the sync style says are due (``policy``):
        loaded once the batches in flight drained, or beside them (``fully_async``)."""
        if self.submitted == 0:
            return
        due = self.policy.weights_due(self.submitted, self.engines.version)
        if due is None:
            return
        update = await self._fetch(due)
        if update is not None:
            if not self.policy.loads_while_running:
                await self.drain()
            await asyncio.to_thread(self.engines.load, update)

    async def _fetch(self, due: WeightsDue) -> WeightUpdate | None:
        """The fetch ``due`` asks for; None, with a warning, when a version that need not arrive
        did not come in its wait: the explorer goes on with its weights."""
        try:
            return await asyncio.to_thread(self.engines.sync.fetch, due.min_version, due.wait)
        except SyncTimeout as exc:
            if due.must_arrive:
                raise
            version = self.engines.version
            logger.warning("%s: going on with weights of version %d: %s", self.writer.role, version, exc)
            return None
