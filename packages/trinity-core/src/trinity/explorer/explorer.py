"""The explorer: turns task batches into experiences with the rollout engines and workflows.

Each step reads ``buffer.batch_size`` tasks, runs their workflows concurrently
(``runner_per_model`` per engine, each with ``max_timeout`` and ``max_retry_times``), passes
the experiences through the experience pipeline (``data_processor.experience_pipeline``:
filters, reward shaping; a filter that drops task groups may have the step run more tasks
until it has its ``batch_size`` groups again, as DAPO's dynamic sampling does), writes them
to the experience buffer and logs rollout metrics. Between steps
it takes new weights from the synchronizer per ``sync_style``; it evaluates the eval
tasksets every ``eval_interval`` steps. Its position (step, taskset state) is saved after
every step, so a restarted explorer continues where it stopped.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from trinity.algorithm.experience_ops import ExperiencePipeline, by_group
from trinity.buffer import EndOfTaskset, TasksetReader, open_experience_writer
from trinity.common.experience import Experience, Task
from trinity.common.files import read_json, write_json
from trinity.common.runtime import freeze_long_lived_objects, setup_role
from trinity.config.schema import Config, InferenceModelConfig, StorageConfig
from trinity.engine.base import EngineStartError, RolloutEngine
from trinity.explorer.model_wrapper import LocalEngineClient
from trinity.explorer.runner import TaskRunner
from trinity.monitor.metrics import eval_at_k, gather, stats, timer
from trinity.plugins import Kind, resolve
from trinity.synchronizer.methods import SyncMethod, WeightUpdate

logger = logging.getLogger(__name__)


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
        models = config.explorer.inference_models()
        # every engine name before any engine starts: a typo in an auxiliary model's fails at once
        classes = [resolve(Kind.ROLLOUT_ENGINE, model.engine_type, f"{key}.engine_type") for key, model in models]
        self.engines, *self.auxiliary = [
            self._start_engines(key, model, cls) for (key, model), cls in zip(models, classes, strict=True)
        ]
        inputs = config.buffer.explorer_input
        self.tasksets = [TasksetReader(storage, seed=config.buffer.seed) for storage in inputs.tasksets]
        for reader, state in zip(
            self.tasksets, meta.get("tasksets", []), strict=False
        ):  # a taskset added on resume starts fresh
            reader.load_state_dict(state)
        self._ended = [False] * len(self.tasksets)
        self.sync: SyncMethod = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)
        self.sync.connect(self.engines)
        self.writer = (
            open_experience_writer(config.buffer.trainer_input.experience_buffer, self.name, config.ray_namespace)
            if config.mode != "bench"
            else None
        )
        self.version = 0
        self._resume_weights()
        self.runner = TaskRunner(config, self.engines, self.auxiliary)
        self.pipeline = ExperiencePipeline.from_config(config)

    def _resume_weights(self) -> None:
        """A resumed run starts from the trainer's last checkpoint, which it republishes."""
        from trinity.trainer.trainer import trainer_meta_path

        trainer_meta = read_json(trainer_meta_path(self.config)) if self.config.continue_from_checkpoint else None
        if trainer_meta and trainer_meta["step"] > 0:
            wait = self.config.synchronizer.sync_timeout if self.config.mode == "both" else 0
            update = self.sync.fetch(trainer_meta["step"], timeout=wait)
            if update is not None:
                self._load(update)

    def _start_engines(
        self, key: str, model: InferenceModelConfig, engine_cls: type[RolloutEngine]
    ) -> list[LocalEngineClient]:
        """``model``'s ``engine_num`` engines; a failure to start names the model's config ``key``."""
        try:
            return [LocalEngineClient(engine_cls(model, self.config.model)) for _ in range(model.engine_num)]
        except Exception as exc:
            cause = str(exc) if isinstance(exc, EngineStartError) else f"{type(exc).__name__}: {exc}"
            raise EngineStartError(f"{key}: {cause}") from exc

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Explore until the tasksets end; returns a summary."""
        explorer = self.config.explorer
        start_step = self.step
        if explorer.eval_on_startup and self.step == 0:
            self.evaluate()
        while True:
            tasks = self.next_tasks()  # first: at the end of data, finish without waiting for weights
            if tasks is None:
                break
            self.maybe_sync()
            metrics: dict[str, float] = {}
            with timer(metrics, "explore_step"):
                experiences, failures = self.explore(tasks, metrics)
            with timer(metrics, "write_experiences"):
                self.writer.write(experiences)
            self.step += 1
            self.save_meta()
            metrics.update(self.rollout_metrics(experiences, failures))
            self.monitor.log(metrics, self.step)
            if self.step == start_step + 1:
                freeze_long_lived_objects()
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

    def explore(self, tasks: list[Task], metrics: dict[str, float]) -> tuple[list[Experience], int]:
        """The step's experiences through the pipeline, and the number of failed tasks.

        While the pipeline's filters leave fewer task groups than the step has tasks, more task
        batches run (at most the pipeline's ``refill_rounds``, while the tasksets last); the
        step keeps its first ``len(tasks)`` groups. Pipeline metrics add up over the batches.
        """
        batch_id = str(self.step + 1)
        experiences, failures = self.runner.run(tasks, batch_id)
        experiences, totals = self.pipeline(experiences)
        rounds = 0
        while rounds < self.pipeline.refill_rounds and len(by_group(experiences)) < len(tasks):
            more = self.next_tasks(refill=True)
            if more is None:
                break
            rounds += 1
            extra, extra_failures = self.runner.run(more, f"{batch_id}.{rounds}")
            extra, extra_metrics = self.pipeline(extra)
            experiences, failures = experiences + extra, failures + extra_failures
            for key, value in extra_metrics.items():
                totals[key] = totals.get(key, 0.0) + value
        if self.pipeline.operators:
            kept = list(by_group(experiences).values())[: len(tasks)]
            experiences = [exp for group in kept for exp in group]
            metrics.update({**totals, "pipeline/refill_rounds": float(rounds)})
        return experiences, failures

    def next_tasks(self, refill: bool = False) -> list[Task] | None:
        """The next batch: tasksets take turns by step, skipping those that ended. A ``refill``
        batch adds to the current step (see ``explore``)."""
        for offset in range(len(self.tasksets)):
            index = (self.step + offset) % len(self.tasksets)
            if self._ended[index]:
                continue
            try:
                return self.tasksets[index].read_batch(refill)
            except EndOfTaskset:
                if not refill:
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
        if not update.loaded:  # else the sync method's fetch has put them in (nccl) and logged its time
            calls = [e.call("update_weights", update.state_dict, update.path, update.version) for e in self.engines]
            for call in calls:
                call.result()
        self.version = update.version
        logger.info(
            "%s: weights of version %d loaded in %.2f s", self.name, update.version, time.perf_counter() - started
        )

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
            experiences, _ = self.runner.run(tasks, batch_id=f"eval/{storage.name}/{self.step}")
            for exp in experiences:
                runs.setdefault(exp.eid.task, []).append({"reward": exp.reward or 0.0, **exp.metrics})
        return eval_at_k(storage.name, runs.values())

    def shutdown(self) -> None:
        for client in [*self.engines, *(c for clients in self.auxiliary for c in clients)]:
            client.close()
        self.monitor.close()
