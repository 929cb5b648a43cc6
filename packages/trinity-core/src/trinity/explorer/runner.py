"""Runs the workflows of a batch of tasks concurrently: timeouts, retries, stragglers.

One long-lived event loop per explorer: async workflows run on it, sync ones in its thread
pool, ``runner_per_model`` jobs at once per engine whatever batch they belong to, so a slow
task of one batch does not hold the next batch's tasks back. Experiences are numbered here
(``eid``: batch, task, run). Each run gets ``max_timeout`` (or the dynamic timeout) and
``max_retry_times``; with ``over_rollout.ratio`` a batch stops waiting for its stragglers; a
crashed engine is not retried: the batch raises it. Details: ``docs/explorer.md``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from trinity.common.experience import EID, Experience, Task
from trinity.config.schema import Config, InferenceModelConfig
from trinity.explorer.workflow import Workflow
from trinity.model.engines import EngineCrashed, SamplingArgs
from trinity.model.token_budgets import first as _first
from trinity.plugins import Kind, resolve
from trinity.rollout.client import EngineClient
from trinity.rollout.model_wrapper import ModelWrapper

logger = logging.getLogger(__name__)

RECENT_RUNS = 256
"""Run durations the dynamic timeout averages over."""


@dataclass
class BatchOutcome:
    """What a batch of tasks became."""

    experiences: list[Experience]
    failed_tasks: int
    """Tasks of which no run succeeded."""
    failed_runs: int
    """Runs that raised or timed out on every attempt (of tasks that may have other runs)."""
    dropped_tasks: int = 0
    """Tasks cancelled by ``over_rollout`` (their finished runs kept with ``return_partial_tasks``)."""
    errors: list[tuple[str, str]] = field(default_factory=list)
    """``(task id, error)`` of each failed run: its last attempt's traceback, or why it timed out."""

    def merged(self, other: BatchOutcome) -> BatchOutcome:
        """This batch and a refill batch of the same step."""
        return BatchOutcome(
            self.experiences + other.experiences,
            self.failed_tasks + other.failed_tasks,
            self.failed_runs + other.failed_runs,
            self.dropped_tasks + other.dropped_tasks,
            self.errors + other.errors,
        )


class TaskRunner:
    """Turns tasks into experiences with the given engines (one client per engine)."""

    def __init__(self, config: Config, engines: list[EngineClient], auxiliary: list[list[EngineClient]]):
        self.config = config
        self.engines = engines
        self.auxiliary = auxiliary
        self.concurrency = config.explorer.runner_per_model * len(engines)
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(ThreadPoolExecutor(self.concurrency + 4, thread_name_prefix="workflow"))
        self._slots = asyncio.Semaphore(self.concurrency)  # bound to the loop at first use
        self._recent: deque[float] = deque(maxlen=RECENT_RUNS)
        self._observed_batches = 0
        self._busy = 0  # jobs holding a slot

    def run(self, tasks: list[Task], batch_id: str) -> BatchOutcome:
        """``run_batch`` from outside the loop (evaluation in bench mode, tests)."""
        return self.loop.run_until_complete(self.run_batch(tasks, batch_id))

    async def run_batch(self, tasks: list[Task], batch_id: str, min_done: int | None = None) -> BatchOutcome:
        """All tasks' workflows; with ``min_done``, the over-rollout wait (see the module docstring)."""
        finished: list[list[Experience]] = [[] for _ in tasks]
        failures: list[list[str]] = [[] for _ in tasks]
        jobs = [
            asyncio.ensure_future(self._run_task(task, i % len(self.engines), batch_id, finished[i], failures, i))
            for i, task in enumerate(tasks)
        ]
        interval = self.config.explorer.runner_state_report_interval
        reporter = asyncio.ensure_future(self._report(batch_id, jobs, interval)) if interval else None
        try:
            cancelled = await self._wait(jobs, min_done)
        finally:
            if reporter is not None:
                reporter.cancel()
        errors = [job.exception() for job in jobs if job not in cancelled]  # each read: none left unretrieved
        crashed = next((error for error in errors if isinstance(error, EngineCrashed)), None)
        if crashed is not None:
            raise crashed
        keep_partial = self.config.explorer.over_rollout.return_partial_tasks
        experiences: list[Experience] = []
        failed_tasks = dropped = 0
        for job, produced in zip(jobs, finished, strict=True):
            if job in cancelled:
                dropped += 1
                if keep_partial:
                    experiences.extend(produced)
                continue
            if job.exception() is not None:  # a bug of the runner's own, not a workflow's failure
                logger.error("task %s: %r", tasks[jobs.index(job)].task_id, job.exception())
            if not produced:
                failed_tasks += 1
            experiences.extend(produced)
        if not cancelled:
            self._observed_batches += 1
        errors = [(task.task_id, error) for task, failed in zip(tasks, failures, strict=True) for error in failed]
        return BatchOutcome(experiences, failed_tasks, len(errors), dropped, errors)

    async def _report(self, batch_id: str, jobs: list[asyncio.Future], interval: int) -> None:
        """Every ``interval`` s while a batch runs (``runner_state_report_interval``): its progress and
        how many runner slots are busy."""
        while True:
            await asyncio.sleep(interval)
            done = sum(job.done() for job in jobs)
            logger.info(
                "runner state: batch %s: %d of %d tasks done; %d of %d runners busy",
                batch_id, done, len(jobs), self._busy, self.concurrency,
            )  # fmt: skip

    async def _wait(self, jobs: list[asyncio.Future], min_done: int | None) -> set[asyncio.Future]:
        """Wait for the jobs (or ``min_done`` of them, then ``wait_after_min`` s); cancel the rest."""
        if not jobs:
            return set()
        if min_done is None or min_done >= len(jobs):
            await asyncio.wait(jobs)
            return set()
        done: set[asyncio.Future] = set()
        pending: set[asyncio.Future] = set(jobs)
        while len(done) < min_done:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            done |= finished
        if pending:
            _, pending = await asyncio.wait(pending, timeout=self.config.explorer.over_rollout.wait_after_min)
        for job in pending:
            job.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return pending

    def task_timeout(self) -> float:
        """Seconds a run may take: ``max_timeout``, or with ``dynamic_timeout`` after its warm-up
        batches the recent mean run time x ``ratio`` (at most ``max_timeout``)."""
        explorer = self.config.explorer
        dynamic = explorer.dynamic_timeout
        if not dynamic.enable or self._observed_batches < dynamic.warmup_min_steps or not self._recent:
            return explorer.max_timeout
        return min(explorer.max_timeout, statistics.fmean(self._recent) * dynamic.ratio)

    async def _run_task(
        self, task: Task, engine: int, batch_id: str, finished: list[Experience], failures: list[list[str]], index: int
    ) -> None:
        """The task's runs in jobs; each job's experiences land in ``finished`` as it ends."""
        workflow_cls = resolve(Kind.WORKFLOW, task.workflow_type, "default_workflow_type")
        group = task.task_id
        size = self.config.explorer.max_repeat_times_per_runner or task.repeat_times
        starts = range(0, task.repeat_times, size)

        async def job(first_run: int) -> None:
            runs = min(size, task.repeat_times - first_run)
            async with self._slots:
                self._busy += 1
                try:
                    results = await self._run_job(workflow_cls, task, engine, runs)
                finally:
                    self._busy -= 1
            for offset, produced in results:
                if isinstance(produced, str):
                    failures[index].append(produced)
                    continue
                for i, exp in enumerate(produced):
                    run = first_run + (i if workflow_cls.can_repeat else offset)
                    sub_group = exp.eid.task  # a workflow's own group within the task (a judge's replies)
                    task_group = f"{group}/{sub_group}" if sub_group else group
                    exp.eid = EID(batch=batch_id, task=task_group, run=run, step=exp.eid.step)
                finished.extend(produced)

        outcomes = await asyncio.gather(*(job(start) for start in starts), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _run_job(
        self, workflow_cls: type[Workflow], task: Task, engine: int, runs: int
    ) -> list[tuple[int, list[Experience] | str]]:
        """``(offset, experiences or the error when it failed)`` of each workflow instance of a job."""
        if workflow_cls.can_repeat:
            return [(0, await self._attempts(workflow_cls, task, engine, runs, self._in_loop))]
        mode = self.config.explorer.concurrent_mode
        start = self._in_thread if mode == "multi-threading" else self._in_loop
        if mode == "sequential":
            return [(k, await self._attempts(workflow_cls, task, engine, 1, start)) for k in range(runs)]
        results = await asyncio.gather(*(self._attempts(workflow_cls, task, engine, 1, start) for _ in range(runs)))
        return list(enumerate(results))

    @staticmethod
    def _in_loop(coroutine: Callable[[], Awaitable[list[Experience]]]) -> Awaitable[list[Experience]]:
        return coroutine()

    @staticmethod
    def _in_thread(coroutine: Callable[[], Awaitable[list[Experience]]]) -> Awaitable[list[Experience]]:
        return asyncio.to_thread(asyncio.run, coroutine())

    async def _attempts(
        self,
        workflow_cls: type[Workflow],
        task: Task,
        engine: int,
        n: int,
        start: Callable[[Callable[[], Awaitable[list[Experience]]]], Awaitable[list[Experience]]],
    ) -> list[Experience] | str:
        """One workflow instance, retried; once every attempt failed (logged), the last one's
        traceback (or why it timed out)."""
        explorer = self.config.explorer
        attempts = explorer.max_retry_times + 1
        reason = error = ""
        for attempt in range(1, attempts + 1):
            timeout = self.task_timeout()
            started = time.monotonic()
            try:
                with self._model(task, engine, n) as model:
                    workflow = workflow_cls(task, model, self._auxiliary_models(task))
                    produced = await asyncio.wait_for(start(workflow.run_async), timeout)
                self._recent.append(time.monotonic() - started)
                return produced
            except Exception as exc:  # retried, then reported; the batch goes on
                if (crash := _engine_crash(exc)) is not None:
                    raise crash from None  # but not against a dead engine
                reason = (
                    f"timed out after {math.ceil(timeout)} s"
                    if isinstance(exc, asyncio.TimeoutError)
                    else f"{type(exc).__name__}: {exc}"
                )
                error = reason if isinstance(exc, asyncio.TimeoutError) else "".join(traceback.format_exception(exc))
                logger.warning(
                    "task %s (%s), attempt %d/%d: %s", task.task_id, task.workflow_type, attempt, attempts, reason
                )
        logger.error("task %s (%s) failed %d times; last: %s", task.task_id, task.workflow_type, attempts, reason)
        return error

    def _sampling(self, task: Task, model: InferenceModelConfig, n: int) -> SamplingArgs:
        args = task.rollout_args
        base = self.config.model
        return SamplingArgs(
            n=n,
            temperature=_first(args.get("temperature"), base.temperature),
            top_p=_first(args.get("top_p"), base.top_p),
            top_k=_first(args.get("top_k"), base.top_k),
            max_tokens=_first(args.get("max_tokens"), model.max_response_tokens),
            min_tokens=model.min_response_tokens,
            stop=list(args.get("stop") or []),
        )

    def _model(self, task: Task, engine: int, n: int) -> ModelWrapper:
        rollout = self.config.explorer.rollout_model
        return ModelWrapper(self.engines[engine], self._sampling(task, rollout, n), rollout.enable_history)

    def _auxiliary_models(self, task: Task) -> list[ModelWrapper]:
        models = self.config.explorer.auxiliary_models
        return [
            ModelWrapper(clients[0], self._sampling(task, model, 1))
            for model, clients in zip(models, self.auxiliary, strict=True)
        ]


def over_rollout_minimum(config: Config) -> int | None:
    """Tasks a training batch waits for with ``over_rollout.ratio`` (None: all of them)."""
    ratio = config.explorer.over_rollout.ratio
    return math.ceil(config.buffer.batch_size * (1 - ratio)) if ratio > 0 else None


def _engine_crash(error: BaseException | None) -> EngineCrashed | None:
    """The ``EngineCrashed`` behind an error, if any (a workflow may wrap what it caught)."""
    while error is not None and not isinstance(error, EngineCrashed):
        error = error.__cause__ or error.__context__
    return error


def task_pass_rates(experiences: list[Experience]) -> dict[str, tuple[list[int], list[float]]]:
    """Per taskset, the rows run and each one's pass rate: ``pass_rate_calculator``'s
    (``info["pass_rate"]``) where it scored the task, else the mean reward of the task's runs."""
    runs: dict[tuple[str, int], list[Experience]] = {}
    for exp in experiences:
        name, _, index = exp.eid.task.rpartition(":")  # Task.task_id
        if index.isdigit():
            runs.setdefault((name, int(index)), []).append(exp)
    rates: dict[str, tuple[list[int], list[float]]] = {}
    for (name, index), group in runs.items():
        scored = [exp.info["pass_rate"] for exp in group if "pass_rate" in exp.info]
        rate = scored[0] if scored else statistics.fmean(exp.reward or 0.0 for exp in group)
        indices, values = rates.setdefault(name, ([], []))
        indices.append(index)
        values.append(float(rate))
    return rates
