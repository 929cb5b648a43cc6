"""Runs the workflows of a batch of tasks concurrently, with timeouts and retries.

One long-lived event loop per explorer: async workflows run on it, sync ones on its
thread pool. A workflow that hangs past ``max_timeout`` is abandoned (its thread cannot be
killed) and the batch goes on; ``runner_per_model`` workflows run at once per engine. A
crashed engine (``EngineCrashed``) is not retried: the batch raises it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from trinity.common.experience import EID, Experience, Task
from trinity.config.schema import Config, InferenceModelConfig
from trinity.engine.base import EngineCrashed, SamplingArgs
from trinity.engine.client import EngineClient
from trinity.engine.prompts import first as _first
from trinity.explorer.model_wrapper import ModelWrapper
from trinity.plugins import Kind, resolve

logger = logging.getLogger(__name__)


class WorkflowFailed(RuntimeError):
    """A task's workflow raised or timed out on every attempt."""


class TaskRunner:
    """Turns tasks into experiences with the given engines (one client per engine)."""

    def __init__(self, config: Config, engines: list[EngineClient], auxiliary: list[list[EngineClient]]):
        self.config = config
        self.engines = engines
        self.auxiliary = auxiliary
        self.concurrency = config.explorer.runner_per_model * len(engines)
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(ThreadPoolExecutor(self.concurrency + 4, thread_name_prefix="workflow"))

    def run(self, tasks: list[Task], batch_id: str) -> tuple[list[Experience], int]:
        """All tasks' workflows; returns the experiences and the number of failed tasks."""
        return self.loop.run_until_complete(self._run_tasks(tasks, batch_id))

    async def _run_tasks(self, tasks: list[Task], batch_id: str) -> tuple[list[Experience], int]:
        limit = asyncio.Semaphore(self.concurrency)
        results = await asyncio.gather(
            *(self._run_task(task, i % len(self.engines), batch_id, limit) for i, task in enumerate(tasks)),
            return_exceptions=True,
        )
        crashed = next((r for r in results if isinstance(r, EngineCrashed)), None)
        if crashed is not None:
            raise crashed
        experiences: list[Experience] = []
        failures = 0
        for result in results:
            if isinstance(result, BaseException):
                failures += 1
                logger.error("%s", result)
            else:
                experiences.extend(result)
        return experiences, failures

    async def _run_task(self, task: Task, engine: int, batch_id: str, limit: asyncio.Semaphore) -> list[Experience]:
        workflow_cls = resolve(Kind.WORKFLOW, task.workflow_type, "default_workflow_type")
        runs = 1 if workflow_cls.can_repeat else task.repeat_times
        group = f"{task.taskset_name}:{task.index}"
        experiences: list[Experience] = []
        for run in range(runs):
            async with limit:
                produced = await self._run_with_retries(workflow_cls, task, engine)
            for i, exp in enumerate(produced):
                exp.eid = EID(batch=batch_id, task=group, run=run if runs > 1 else i, step=exp.eid.step)
            experiences.extend(produced)
        return experiences

    async def _run_with_retries(self, workflow_cls: type, task: Task, engine: int) -> list[Experience]:
        explorer = self.config.explorer
        attempts = explorer.max_retry_times + 1
        reason = ""
        for attempt in range(1, attempts + 1):
            try:
                with self._model(task, engine, workflow_cls.can_repeat) as model:
                    workflow = workflow_cls(task, model, self._auxiliary_models(task))
                    return await asyncio.wait_for(workflow.run_async(), explorer.max_timeout)
            except Exception as exc:  # retried, then reported; the step goes on
                if (crash := _engine_crash(exc)) is not None:
                    raise crash from None  # but not against a dead engine
                reason = (
                    f"timed out after {explorer.max_timeout} s"
                    if isinstance(exc, asyncio.TimeoutError)
                    else f"{type(exc).__name__}: {exc}"
                )
                logger.warning(
                    "task %s (%s), attempt %d/%d: %s", task.task_id, task.workflow_type, attempt, attempts, reason
                )
        raise WorkflowFailed(f"task {task.task_id} ({task.workflow_type}) failed {attempts} times; last: {reason}")

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

    def _model(self, task: Task, engine: int, can_repeat: bool) -> ModelWrapper:
        rollout = self.config.explorer.rollout_model
        n = task.repeat_times if can_repeat else 1
        return ModelWrapper(self.engines[engine], self._sampling(task, rollout, n), rollout.enable_history)

    def _auxiliary_models(self, task: Task) -> list[ModelWrapper]:
        models = self.config.explorer.auxiliary_models
        return [
            ModelWrapper(clients[0], self._sampling(task, model, 1))
            for model, clients in zip(models, self.auxiliary, strict=True)
        ]


def _engine_crash(error: BaseException | None) -> EngineCrashed | None:
    """The ``EngineCrashed`` behind an error, if any (a workflow may wrap what it caught)."""
    while error is not None and not isinstance(error, EngineCrashed):
        error = error.__cause__ or error.__context__
    return error
