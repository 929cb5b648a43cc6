"""The explorer: turns task batches into experiences with the rollout engines and workflows.

Each step reads ``buffer.batch_size`` tasks, runs their workflows concurrently
(``runner_per_model`` per engine, each with ``max_timeout`` and ``max_retry_times``),
writes the experiences to the experience buffer and logs rollout metrics. Between steps
it takes new weights from the synchronizer per ``sync_style``; it evaluates the eval
tasksets every ``eval_interval`` steps. Its position (step, taskset state) is saved after
every step, so a restarted explorer continues where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

from trinity.buffer import EndOfTaskset, TasksetReader, open_experience_writer
from trinity.common.experience import EID, Experience, Task
from trinity.common.files import read_json, write_json
from trinity.common.runtime import setup_role
from trinity.config.schema import Config, InferenceModelConfig, StorageConfig
from trinity.engine.base import SamplingArgs
from trinity.explorer.model_wrapper import LocalEngineClient, ModelWrapper
from trinity.monitor.metrics import eval_at_k, gather, stats, timer
from trinity.plugins import Kind, resolve
from trinity.synchronizer.methods import SyncMethod, WeightUpdate

logger = logging.getLogger(__name__)


class WorkflowFailed(RuntimeError):
    """A task's workflow raised or timed out on every attempt."""


def explorer_meta_path(config: Config, name: str) -> Path:
    return Path(config.checkpoint_job_dir) / "meta" / f"{name}.json"


class Explorer:
    """One explorer (``explorer.name``); several may feed one trainer."""

    def __init__(self, config: Config, threads: int | None = None):
        self.config = config
        self.name = config.explorer.name
        self.monitor = setup_role(config, self.name, threads)
        os.environ.update({k: str(v) for k, v in config.explorer.env_vars.items()})
        self.meta_path = explorer_meta_path(config, self.name)
        meta = (read_json(self.meta_path) if config.continue_from_checkpoint else None) or {}
        self.step: int = meta.get("step", 0)
        self.engines = self._start_engines(config.explorer.rollout_model)
        self.auxiliary = [self._start_engines(model) for model in config.explorer.auxiliary_models]
        inputs = config.buffer.explorer_input
        self.tasksets = [TasksetReader(storage, seed=config.buffer.seed) for storage in inputs.tasksets]
        for reader, state in zip(self.tasksets, meta.get("tasksets", [])):
            reader.load_state_dict(state)
        self._ended = [False] * len(self.tasksets)
        self.sync: SyncMethod = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)
        self.writer = (
            open_experience_writer(config.buffer.trainer_input.experience_buffer) if config.mode != "bench" else None
        )
        self.version = 0
        self._resume_weights()
        self._semaphore_size = config.explorer.runner_per_model * len(self.engines)

    def _resume_weights(self) -> None:
        """A resumed run starts from the trainer's last checkpoint, which it republishes."""
        from trinity.trainer.trainer import trainer_meta_path

        trainer_meta = read_json(trainer_meta_path(self.config)) if self.config.continue_from_checkpoint else None
        if trainer_meta and trainer_meta["step"] > 0:
            wait = self.config.synchronizer.sync_timeout if self.config.mode == "both" else 0
            update = self.sync.fetch(trainer_meta["step"], timeout=wait)
            if update is not None:
                self._load(update)

    def _start_engines(self, model: InferenceModelConfig) -> list[LocalEngineClient]:
        engine_cls = resolve(Kind.ROLLOUT_ENGINE, model.engine_type, "explorer.rollout_model.engine_type")
        return [LocalEngineClient(engine_cls(model, self.config.model)) for _ in range(model.engine_num)]

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Explore until the tasksets end; returns a summary."""
        explorer = self.config.explorer
        start_step = self.step
        if explorer.eval_on_startup and self.step == 0:
            self.evaluate()
        while True:
            self.maybe_sync()
            tasks = self.next_tasks()
            if tasks is None:
                break
            metrics: dict[str, float] = {}
            with timer(metrics, "explore_step"):
                experiences, failures = self.run_tasks(tasks, batch_id=str(self.step + 1))
            with timer(metrics, "write_experiences"):
                self.writer.write(experiences)
            self.step += 1
            self.save_meta()
            metrics.update(self.rollout_metrics(experiences, failures))
            self.monitor.log(metrics, self.step)
            if self.step % explorer.eval_interval == 0:
                self.evaluate()
        self.writer.finish()
        if self.config.buffer.explorer_input.eval_tasksets and self.step % explorer.eval_interval:
            self.final_sync()
            self.evaluate()
        return {"role": self.name, "steps": self.step - start_step, "model_version": self.version}

    def benchmark(self) -> dict[str, Any]:
        """Mode bench: evaluate every saved checkpoint (or the latest only) in step order."""
        from trinity.trainer.trainer import saved_checkpoints

        checkpoints = saved_checkpoints(self.config)
        if self.config.explorer.bench_on_latest_checkpoint:
            checkpoints = checkpoints[-1:]
        results = {}
        if not checkpoints:
            logger.warning(
                "%s: no checkpoint under %s: evaluating the initial model", self.name, self.config.checkpoint_job_dir
            )
            results[0] = self.evaluate()
        for step, weights in checkpoints:
            self._load(WeightUpdate(step, path=str(weights)))
            self.step = step
            results[step] = self.evaluate()
        return {"role": self.name, "evaluated_steps": list(results), "metrics": results}

    def next_tasks(self) -> list[Task] | None:
        """The next batch: tasksets take turns by step, skipping those that ended."""
        for offset in range(len(self.tasksets)):
            index = (self.step + offset) % len(self.tasksets)
            if self._ended[index]:
                continue
            try:
                return self.tasksets[index].read_batch()
            except EndOfTaskset:
                self._ended[index] = True
        return None

    def save_meta(self) -> None:
        write_json(
            self.meta_path,
            {"step": self.step, "model_version": self.version, "tasksets": [t.state_dict() for t in self.tasksets]},
        )

    # --- weights ----------------------------------------------------------------------------

    def maybe_sync(self) -> None:
        """Before a step, take the trainer's newer weights.

        Mode both with ``fixed`` style waits at every ``sync_interval`` for the version
        ``step - sync_offset``; ``dynamic_by_explorer`` and async explorers (mode explore)
        take whatever is newer at those steps without waiting; ``dynamic_by_trainer``
        looks at every step.
        """
        sync = self.config.synchronizer
        every_step = sync.sync_style == "dynamic_by_trainer"
        if self.step == 0 or (self.step % sync.sync_interval and not every_step):
            return
        if self.config.mode == "both" and sync.sync_style == "fixed":
            wanted = self.step - sync.sync_offset
            if wanted <= self.version:
                return
            update = self.sync.fetch(wanted, timeout=sync.sync_timeout)
        else:
            update = self.sync.fetch(self.version + 1, timeout=0)
        if update is not None:
            self._load(update)

    def final_sync(self) -> None:
        """Wait for the trainer's weights after the last explored step (mode both)."""
        if self.config.mode == "both" and self.step > self.version:
            update = self.sync.fetch(self.step, timeout=self.config.synchronizer.sync_timeout)
            self._load(update)

    def _load(self, update: WeightUpdate) -> None:
        started = time.perf_counter()
        calls = [e.call("update_weights", update.state_dict, update.path, update.version) for e in self.engines]
        for call in calls:
            call.result()
        self.version = update.version
        logger.info(
            "%s: weights of version %d loaded in %.2f s", self.name, update.version, time.perf_counter() - started
        )

    # --- running workflows ------------------------------------------------------------------

    def run_tasks(self, tasks: list[Task], batch_id: str) -> tuple[list[Experience], int]:
        """All tasks' workflows, concurrently; returns the experiences and the failed task count."""
        return asyncio.run(self._run_tasks(tasks, batch_id))

    async def _run_tasks(self, tasks: list[Task], batch_id: str) -> tuple[list[Experience], int]:
        limit = asyncio.Semaphore(self._semaphore_size)
        results = await asyncio.gather(
            *(self._run_task(task, i % len(self.engines), batch_id, limit) for i, task in enumerate(tasks)),
            return_exceptions=True,
        )
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
                workflow = workflow_cls(
                    task, self._model(task, engine, workflow_cls.can_repeat), self._auxiliary_models(task)
                )
                return await asyncio.wait_for(workflow.run_async(), explorer.max_timeout)
            except Exception as exc:  # retried, then reported; the step goes on
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
            ModelWrapper(clients[0], self._sampling(task, model, 1)) for model, clients in zip(models, self.auxiliary)
        ]

    # --- metrics and evaluation -------------------------------------------------------------

    @staticmethod
    def rollout_metrics(experiences: list[Experience], failures: int) -> dict[str, float]:
        metrics = stats("rollout/reward", [e.reward for e in experiences if e.reward is not None])
        metrics.update(stats("rollout/response_length", [e.response_length for e in experiences]))
        metrics.update(gather("rollout", [e.metrics for e in experiences]))
        metrics["rollout/experience_count"] = len(experiences)
        metrics["rollout/failed_tasks"] = failures
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Run every eval taskset once with the current weights; logs ``eval/<taskset>/...``."""
        metrics: dict[str, float] = {}
        for storage in self.config.buffer.explorer_input.eval_tasksets:
            with timer(metrics, f"eval/{storage.name}"):
                metrics.update(self._evaluate_taskset(storage))
        if metrics:
            self.monitor.log(metrics, self.step)
        return metrics

    def _evaluate_taskset(self, storage: StorageConfig) -> dict[str, float]:
        reader = TasksetReader(storage, seed=self.config.buffer.seed)
        runs: dict[str, list[dict[str, float]]] = {}
        while True:
            try:
                tasks = reader.read_batch()
            except EndOfTaskset:
                break
            experiences, _ = self.run_tasks(tasks, batch_id=f"eval/{storage.name}/{self.step}")
            for exp in experiences:
                runs.setdefault(exp.eid.task, []).append({"reward": exp.reward or 0.0, **exp.metrics})
        return eval_at_k(storage.name, runs.values())

    def shutdown(self) -> None:
        for client in [*self.engines, *(c for clients in self.auxiliary for c in clients)]:
            client.close()
        self.monitor.close()


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
