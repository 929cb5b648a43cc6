"""The explorer: turns task batches into experiences with the rollout engines and workflows.

Each step reads ``buffer.batch_size`` tasks and hands them to the task runner (workflows run
concurrently, ``runner_per_model`` per engine, with timeouts, retries and over-rollout); the
batches of one sync interval run together, so a slow task does not hold the next batch
back. A batch's experiences pass through the experience pipeline
(``data_processor.experience_pipeline``: filters, reward shaping; a filter that drops task
groups may have the step run more tasks until it has its ``batch_size`` groups again, as
DAPO's dynamic sampling does) and are written to the experience buffer in step order with
their rollout metrics. Between intervals the explorer takes new weights from the
synchronizer per ``sync_style`` (``fully_async``: whenever they are newer, up to
``max_inflight_batches`` batches in flight); it evaluates the eval tasksets every
``eval_interval`` steps. Its position (step, taskset state as of that step's read) commits
with the step's experiences in one buffer transaction (a copy goes to ``meta/<name>.json``
after), so a restarted explorer continues exactly after the last step the buffer holds.
Opening the writer fences off an older process of the same name (it fails at its next write).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
from collections import deque
from typing import Any

from trinity.algorithm.experience_ops import ExperiencePipeline, by_group
from trinity.buffer import EndOfTaskset, TasksetReader, open_experience_writer
from trinity.checkpoints import explorer_meta_path, saved_checkpoints, trainer_meta_path
from trinity.common.crash import crash_point
from trinity.common.errors import first_line
from trinity.common.experience import TRUNCATED_FROM, Experience, Task
from trinity.common.files import read_json, write_json
from trinity.config.check import engine_gpus
from trinity.config.schema import Config, InferenceModelConfig, TasksetConfig
from trinity.engine.base import EngineCrashed, EngineStartError, RolloutEngine
from trinity.engine.client import EngineClient
from trinity.explorer.runner import BatchOutcome, TaskRunner, over_rollout_minimum, task_pass_rates
from trinity.monitor.learnable import (
    EMPTY_RESPONSES,
    EXPERIENCES,
    TRUNCATED_PROMPT_LENGTH,
    TRUNCATED_PROMPTS,
    CauseWarnings,
)
from trinity.monitor.metrics import eval_at_k, gather, stats, timer
from trinity.placement import cuda_device, first_devices
from trinity.plugins import Kind, resolve
from trinity.runtime import freeze_long_lived_objects, setup_role
from trinity.synchronizer.methods import SyncMethod, SyncTimeout, TrainerFinished, WeightUpdate

logger = logging.getLogger(__name__)

MAX_ENGINE_RESTARTS = 3
"""Restarts of crashed rollout engines one explorer allows (all its engines together) before
an engine's crash ends the run."""


@dataclasses.dataclass
class HeldStep:
    """A serve-mode step through the experience pipeline whose write found the buffer out of reach."""

    step: int
    kept: list[Experience]
    dropped: int
    metrics: dict[str, float]
    tried: bool = False
    """A write was attempted: it may have landed (the writer's state says)."""


class Explorer:
    """One explorer (``explorer.name``); several may feed one trainer."""

    def __init__(self, config: Config, threads: int | None = None):
        self.config = config
        self.name = config.explorer.name
        self.monitor = setup_role(config, self.name, threads)
        os.environ.update({k: str(v) for k, v in config.explorer.env_vars.items()})
        self.meta_path = explorer_meta_path(config, self.name)
        self.writer = (  # first: opening fences off an older process of this name
            open_experience_writer(config.buffer.trainer_input.experience_buffer, self.name, config.ray_namespace)
            if config.mode != "bench"
            else None
        )
        meta = self._resume_position() if config.continue_from_checkpoint else {}
        self.step: int = meta.get("step", 0)
        self._relog_lost_line(meta)
        self._import_task_plugins()
        models = config.explorer.inference_models()
        # every engine name before any engine starts: a typo in an auxiliary model's fails at once
        classes = [resolve(Kind.ROLLOUT_ENGINE, model.engine_type, f"{key}.engine_type") for key, model in models]
        firsts = first_devices(config, [(model, cls) for (_, model), cls in zip(models, classes, strict=True)])
        self.engines, *self.auxiliary = [
            self._start_engines(key, model, cls, first)
            for (key, model), cls, first in zip(models, classes, firsts, strict=True)
        ]
        inputs = config.buffer.explorer_input
        self.tasksets = [TasksetReader(storage) for storage in inputs.tasksets]
        for reader, state in zip(
            self.tasksets, meta.get("tasksets", []), strict=False
        ):  # a taskset added on resume starts fresh
            reader.load_state_dict(state)
        self._ended = [False] * len(self.tasksets)
        self.sync: SyncMethod = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)
        self.sync.connect(self.engines)
        self.version = 0
        self._resume_weights()
        self.runner = TaskRunner(config, self.engines, self.auxiliary)
        self._restart_lock = threading.Lock()
        self._restarts = 0
        self.pipeline = ExperiencePipeline.from_config(config)
        self._pipeline_turn = asyncio.Lock()
        self._submitted = self.step
        self.stopped_early = ""  # why exploring ended before its data did, for the run's summary
        self._first_step = self.step + 1  # after it, long-lived objects leave the cyclic GC
        self.warnings = CauseWarnings(self.name)
        self._held: deque[HeldStep] = deque()  # serve mode: steps whose write found the buffer out of reach
        self._unreported = (0, 0)  # serve mode: experiences written and dropped since a commit last returned

    def _import_task_plugins(self) -> None:
        """Import every taskset's default workflow and reward function before any engine starts:
        one that cannot be imported (a missing dependency) ends the run at once, naming it and
        the config key, instead of failing every task of every step."""
        inputs = self.config.buffer.explorer_input
        for storage in (*inputs.tasksets, *inputs.eval_tasksets):
            if storage.default_workflow_type:
                resolve(Kind.WORKFLOW, storage.default_workflow_type, "default_workflow_type")
            if storage.default_reward_fn_type:
                resolve(Kind.REWARD_FN, storage.default_reward_fn_type, "default_reward_fn_type")

    def _resume_position(self) -> dict[str, Any]:
        """Where the last run stopped: the position committed with the buffer's last rows of
        this explorer, else (a buffer that forgets, e.g. an in-memory queue) the meta file."""
        committed = self.writer.state() if self.writer is not None else None
        return committed or read_json(self.meta_path) or {}

    def _relog_lost_line(self, committed: dict[str, Any]) -> None:
        """The metrics line of the last committed step when a crash came between its commit and
        its meta file (which follows the line): the rows survived, so does their line."""
        written = read_json(self.meta_path) or {}
        if committed.get("metrics") and committed["step"] > written.get("step", 0):
            self.monitor.log(committed["metrics"], committed["step"])
            with self.writer.fenced():
                write_json(self.meta_path, committed, sync=self.config.buffer.durability == "safe")

    def _resume_weights(self) -> None:
        """A resumed run starts from the trainer's last checkpoint, which it republishes."""
        trainer_meta = read_json(trainer_meta_path(self.config)) if self.config.continue_from_checkpoint else None
        if trainer_meta and trainer_meta["step"] > 0:
            wait = self.config.synchronizer.sync_timeout if self.config.in_one_run else 0
            update = self.sync.fetch(trainer_meta["step"], timeout=wait)
            if update is not None:
                self.load_weights(update)

    def _start_engines(
        self, key: str, model: InferenceModelConfig, engine_cls: type[RolloutEngine], first_device: int | None
    ) -> list[EngineClient]:
        """``model``'s ``engine_num`` engines, the ``i``-th on this process's CUDA device
        ``first_device + i x its GPUs`` when they compute here (``trinity.placement``); a
        failure to start names the model's config ``key``."""
        try:
            engines = [model.model_copy(update={"engine_id": i}) for i in range(model.engine_num)]
            clients = []
            for engine in engines:
                device = None if first_device is None else first_device + engine.engine_id * engine_gpus(model)
                with cuda_device(device):
                    clients.append(EngineClient(engine_cls(engine, self.config.model)))
            for client in clients:  # an engine with no endpoint of its own gets trinity's
                if model.enable_openai_api and client.api_url is None:
                    logger.info("%s: OpenAI-compatible endpoint at %s", key, client.serve_openai(model))
            return clients
        except Exception as exc:
            cause = str(exc) if isinstance(exc, EngineStartError) else f"{type(exc).__name__}: {exc}"
            raise EngineStartError(f"{key}: {cause}") from exc

    # --- the loop ---------------------------------------------------------------------------

    def planned_steps(self) -> int:
        """The steps of all tasksets (they take turns), for ``trinity run``'s progress display."""
        return sum(taskset.planned_steps() for taskset in self.tasksets)

    def run(self) -> dict[str, Any]:
        """Explore until the tasksets end; returns a summary."""
        start_step = self.step
        self.runner.loop.run_until_complete(self._explore())
        result = {"role": self.name, "steps": self.step - start_step, "model_version": self.version}
        if self.stopped_early:
            result["stopped_early"] = self.stopped_early
        return result

    async def _explore(self) -> None:
        """Batches go in as their tasks are read; each finishes on its own and is written in step
        order. How many run at once, and when weights move, follows the sync style:

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

        ``trainer_driven`` and ``fully_async`` in one run also wait, before a batch, for the next
        version when more than ``sync_offset`` versions ahead: staleness stays bounded (as
        AReaL's max off-policyness), for an explorer that never waited ran ever further ahead
        on a CPU (staleness 22 by step 40 of the quickstart) and did not learn.
        """
        explorer = self.config.explorer
        if explorer.eval_on_startup and self.step == 0:
            await self.evaluate()
        self._submitted = self.step
        inflight: deque[asyncio.Task] = deque()
        while True:
            tasks = self.next_tasks()  # first: at the end of data, finish without waiting for weights
            if tasks is None:
                break
            try:
                await self.take_weights(inflight)
            except TrainerFinished as exc:
                self.stopped_early = f"exploring stops after step {self._submitted}: {exc}"
                logger.warning("%s: %s", self.name, self.stopped_early)
                break
            step = self._submitted = self._submitted + 1
            previous = inflight[-1] if inflight else None
            positions = [reader.state_dict() for reader in self.tasksets]  # what a resume after this step reads next
            inflight.append(asyncio.ensure_future(self._batch(step, tasks, positions, previous, len(inflight) + 1)))
            await self._bound(inflight)
            if step % explorer.eval_interval == 0:
                await self._drain(inflight)
                await self.evaluate()
        await self._drain(inflight)
        self.writer.finish()
        if self.config.buffer.explorer_input.eval_tasksets and self.step % explorer.eval_interval:
            await asyncio.to_thread(self.final_sync)
            await self.evaluate()

    async def _batch(
        self, step: int, tasks: list[Task], positions: list[dict], previous: asyncio.Task | None, inflight: int
    ) -> None:
        """Run a batch, then (after the batch before it) write its experiences, the explorer's
        position and its metrics."""
        metrics: dict[str, float] = {"rollout/inflight_batches": inflight}
        with timer(metrics, "explore_step"):
            outcome = await self.explore(step, tasks, metrics)
        metrics.update(self.rollout_metrics(outcome, step - 1))
        self.warn_unlearnable(metrics, step)
        if previous is not None:
            await previous  # in step order: a resume position never skips an unwritten batch
        await asyncio.to_thread(self.write, step, outcome.experiences, positions, metrics)
        if step == self._first_step:
            freeze_long_lived_objects()

    async def _bound(self, inflight: deque[asyncio.Task]) -> None:
        """Wait until the batches in flight leave room for the next one."""
        sync = self.config.synchronizer
        if sync.sync_style == "fully_async":
            while len(inflight) >= self.config.explorer.max_inflight_batches:
                await inflight.popleft()
        elif self._submitted % sync.explorer_sync_interval == 0:
            await self._drain(inflight)  # the end of a sync interval: weights may move next
        while inflight and inflight[0].done():
            inflight.popleft().result()  # a batch's error surfaces here

    @staticmethod
    async def _drain(inflight: deque[asyncio.Task]) -> None:
        while inflight:
            await inflight.popleft()

    async def take_weights(self, inflight: deque[asyncio.Task]) -> None:
        """Before a batch goes in, take the trainer's newer weights per ``sync_style`` (see
        ``_explore``); at an interval's end nothing is in flight any more."""
        sync, done, style = self.config.synchronizer, self._submitted, self.config.synchronizer.sync_style
        if done == 0:
            return
        boundary = done % sync.explorer_sync_interval == 0
        ahead = self.version < done - sync.sync_offset  # more than sync_offset versions ahead of the trainer
        if style in ("fixed", "explorer_driven") and not boundary:
            return
        if style == "fixed" and self.config.in_one_run and ahead:
            update = await asyncio.to_thread(self.sync.fetch, done - sync.sync_offset, sync.sync_timeout)
        elif ahead and (style == "explorer_driven" or (self.config.in_one_run and style != "fixed")):
            update = await self._next_version()
        else:
            update = await asyncio.to_thread(self.sync.fetch, self.version + 1, 0)
        if update is not None:
            if style == "trainer_driven" and not boundary:
                await self._drain(inflight)
            await asyncio.to_thread(self.load_weights, update)

    async def _next_version(self) -> WeightUpdate | None:
        """The version after this explorer's, waited for up to ``sync_timeout`` (the batches it
        wrote are what the trainer trains next, so the trainer can always produce it); None,
        with a warning, when it did not come: the explorer goes on with its weights."""
        try:
            return await asyncio.to_thread(self.sync.fetch, self.version + 1, self.config.synchronizer.sync_timeout)
        except SyncTimeout as exc:
            logger.warning("%s: going on with weights of version %d: %s", self.name, self.version, exc)
            return None

    def serve(self) -> None:
        """Mode serve: the OpenAI-compatible proxy of ``trinity.explorer.serve``, until the run is stopped."""
        from trinity.explorer.serve import ServeProxy

        explorer = self.config.explorer
        proxy = ServeProxy(self)
        self.runner.loop.run_until_complete(proxy.serve(explorer.listen_address, explorer.proxy_port))

    def commit(self, experiences: list[Experience]) -> tuple[int, int, int]:
        """Mode serve: the scored experiences through the experience pipeline, as a step's are,
        and the ones it keeps durable in the buffer as the next step; the last step written, and
        how many experiences this call wrote and how many the pipeline dropped.

        A step whose write finds the buffer out of reach (``BufferUnavailable``, raised) is held,
        through the pipeline already, and the next commit writes it first, once: the writer's
        state says whether a failed write landed after all. Nothing scored and nothing held:
        no step (an empty one would only count)."""
        if experiences:
            step = (self._held[-1].step if self._held else self.step) + 1
            for exp in experiences:
                exp.eid = dataclasses.replace(exp.eid, batch=str(step))
            kept, pipeline_metrics = self.pipeline(experiences)
            metrics = self.rollout_metrics(BatchOutcome(kept, 0, 0), self.version)
            metrics.update(pipeline_metrics)
            self.warn_unlearnable(metrics, step)
            self._held.append(HeldStep(step, kept, len(experiences) - len(kept), metrics))
        while self._held:
            held = self._held[0]
            landed = held.tried and (self.writer.state() or {}).get("step", 0) >= held.step
            held.tried = True
            self.write(held.step, [] if landed else held.kept, [], held.metrics)  # landed: its position again
            self._held.popleft()
            self._unreported = (self._unreported[0] + len(held.kept), self._unreported[1] + held.dropped)
        (written, dropped), self._unreported = self._unreported, (0, 0)
        return self.step, written, dropped

    def benchmark(self) -> dict[str, Any]:
        """Mode bench: evaluate every saved checkpoint (or the latest only) in step order."""
        checkpoints = saved_checkpoints(self.config) if self.engines[0].engine.takes_weights else []
        if self.config.explorer.bench_on_latest_checkpoint:
            checkpoints = checkpoints[-1:]
        results = {}
        if not checkpoints and self.engines[0].engine.takes_weights:
            logger.warning(
                "%s: no checkpoint under %s: evaluating the initial model", self.name, self.config.checkpoint_job_dir
            )
        if not checkpoints:
            results[0] = self.runner.loop.run_until_complete(self.evaluate())
        for step, weights in checkpoints:
            self.load_weights(WeightUpdate(step, path=str(weights)))
            self.step = step
            results[step] = self.runner.loop.run_until_complete(self.evaluate())
        return {"role": self.name, "evaluated_steps": list(results), "metrics": results}

    async def explore(self, step: int, tasks: list[Task], metrics: dict[str, float]) -> BatchOutcome:
        """The step's experiences through the pipeline.

        While the pipeline's filters leave fewer task groups than the step has tasks, more task
        batches run (at most the pipeline's ``refill_rounds``, while the tasksets last); the
        step keeps its first ``len(tasks)`` groups. Pipeline metrics add up over the batches.
        """
        minimum = over_rollout_minimum(self.config)
        outcome = await self._run_batch(tasks, str(step), minimum)
        ran = list(outcome.experiences)
        outcome.experiences, totals = await self._through_pipeline(outcome.experiences)
        self.feed_back(ran)
        rounds = 0
        while rounds < self.pipeline.refill_rounds and len(by_group(outcome.experiences)) < len(tasks):
            more = self.next_tasks(refill=True)
            if more is None:
                break
            rounds += 1
            extra = await self._run_batch(more, f"{step}.{rounds}", minimum)
            ran = list(extra.experiences)
            extra.experiences, extra_metrics = await self._through_pipeline(extra.experiences)
            self.feed_back(ran)
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
        written), once ``restart_crashed_engines`` has the engines back."""
        while True:
            try:
                return await self.runner.run_batch(tasks, batch_id, minimum)
            except EngineCrashed as crash:
                await asyncio.to_thread(self.restart_crashed_engines, crash)

    def restart_crashed_engines(self, crash: EngineCrashed) -> None:
        """Restart every crashed rollout engine and load the newest published weights into it
        (the version an experience records is the one its engine held). Batches in flight that
        saw the same crash find the engines back already. ``crash`` ends the run when an engine
        cannot restart, the sync method cannot feed a new engine (nccl), or the explorer's
        ``MAX_ENGINE_RESTARTS`` are used up."""
        what = first_line(crash)
        with self._restart_lock:
            crashed = [client for client in self.engines if client.engine.crashed]
            if not crashed:
                return
            refusal = (
                f"engine_type {self.config.explorer.rollout_model.engine_type!r} cannot restart"
                if not all(client.engine.restartable for client in crashed)
                else f"sync_method {self.config.synchronizer.sync_method!r} cannot feed a restarted engine"
                if not self.sync.feeds_new_engines
                else f"all {MAX_ENGINE_RESTARTS} engine restarts of the run are used"
                if self._restarts + len(crashed) > MAX_ENGINE_RESTARTS
                else None
            )
            if refusal:
                raise EngineCrashed(f"{what} (not restarted: {refusal})") from crash
            update = self.sync.fetch(self.version, timeout=0) if self.version else None
            if self.version and update is None:
                raise EngineCrashed(f"{what} (not restarted: no weights of version {self.version} are published)")
            for client in crashed:
                self._restarts += 1
                logger.warning(
                    "%s: %s; restarting it (restart %d of %d)",
                    self.name,
                    what,
                    self._restarts,
                    MAX_ENGINE_RESTARTS,
                )
                client.restart()
                if update is not None:
                    client.call("update_weights", update.state_dict, update.path, update.version).result()
                logger.warning("%s: engine restarted with the weights of version %d", self.name, client.model_version)

    def feed_back(self, experiences: list[Experience]) -> None:
        """Each task's pass rate to its taskset's selector (the curriculum selectors use it), from
        the experiences as the pipeline scored them, before its filters dropped any."""
        rates = task_pass_rates(experiences)
        for reader in self.tasksets:
            if reader.storage.name in rates:
                reader.feedback(*rates[reader.storage.name])

    def next_tasks(self, refill: bool = False) -> list[Task] | None:
        """The next batch: tasksets take turns by step, skipping those that ended. A ``refill``
        batch adds to the current step (see ``explore``)."""
        for offset in range(len(self.tasksets)):
            index = (self._submitted + offset) % len(self.tasksets)
            if self._ended[index]:
                continue
            try:
                return self.tasksets[index].read_batch(refill)
            except EndOfTaskset:
                if not refill:
                    self._ended[index] = True
        return None

    def write(self, step: int, experiences: list[Experience], positions: list[dict], metrics: dict[str, float]) -> None:
        """Step ``step``'s experiences, tagged with this explorer's name, the position after it
        (tasksets read up to that batch) and its metrics in one buffer transaction; then its
        metrics line, then the meta file, which says the line is out (``_relog_lost_line``)."""
        for exp in experiences:
            exp.eid = dataclasses.replace(exp.eid, explorer=self.name)
        position = {"step": step, "model_version": self.version, "tasksets": positions, "metrics": dict(metrics)}
        with timer(metrics, "write_experiences"):
            self.writer.write(experiences, state=position)
        crash_point("explorer.after_append")
        self.step = step
        self.monitor.log(metrics, step)
        with self.writer.fenced():
            write_json(self.meta_path, position, sync=self.config.buffer.durability == "safe")
        crash_point("explorer.after_meta")

    # --- weights ----------------------------------------------------------------------------

    def final_sync(self) -> None:
        """Wait for the trainer's weights after the last explored step (mode both)."""
        if self.config.in_one_run and self.step > self.version:
            try:
                update = self.sync.fetch(self.step, timeout=self.config.synchronizer.sync_timeout)
            except TrainerFinished as exc:
                update = self.sync.fetch(exc.last_version, timeout=0)  # the last there is
            if update is not None and update.version > self.version:
                self.load_weights(update)

    def load_weights(self, update: WeightUpdate) -> None:
        """Put a published version into every rollout engine."""
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
    def rollout_metrics(outcome: BatchOutcome, policy_version: int) -> dict[str, float]:
        """The batch's metrics; ``staleness`` of an experience: how many versions its weights lag
        behind ``policy_version``, the one an on-policy batch is explored with (its step - 1).
        Truncated prompts and empty responses are counted as ``trinity.monitor.learnable`` names them."""
        experiences = outcome.experiences
        truncated = [e for e in experiences if e.truncate_status == "prompt_truncated"]
        metrics = stats("rollout/reward", [e.reward for e in experiences if e.reward is not None])
        metrics.update(stats("rollout/response_length", [e.response_length for e in experiences]))
        metrics.update(stats("rollout/staleness", [policy_version - e.model_version for e in experiences]))
        metrics.update(gather("rollout", [e.metrics for e in experiences]))
        metrics["rollout/experience_count"] = len(experiences)
        metrics["rollout/failed_tasks"] = outcome.failed_tasks
        metrics["rollout/failed_runs"] = outcome.failed_runs
        metrics["rollout/dropped_tasks"] = outcome.dropped_tasks
        metrics[TRUNCATED_PROMPTS] = len(truncated)
        metrics.update(
            stats(TRUNCATED_PROMPT_LENGTH, [e.info[TRUNCATED_FROM] for e in truncated if TRUNCATED_FROM in e.info])
        )
        metrics[EMPTY_RESPONSES] = sum(e.response_length == 0 for e in experiences)
        return metrics

    def warn_unlearnable(self, metrics: dict[str, float], step: int) -> None:
        """Warn of prompts over the limit (any), and of a step whose responses are all empty for
        another reason (an engine that returns no token ids); ``CauseWarnings`` says when."""
        count, truncated = metrics[EXPERIENCES], metrics[TRUNCATED_PROMPTS]
        if truncated:
            limit = self.config.explorer.rollout_model.max_prompt_tokens  # model.max_prompt_tokens unless set apart
            apart = limit != self.config.model.max_prompt_tokens
            key = "explorer.rollout_model.max_prompt_tokens" if apart else "model.max_prompt_tokens"
            longest = metrics.get(f"{TRUNCATED_PROMPT_LENGTH}/max")
            self.warnings.warn(
                "truncated prompts",
                step,
                truncated == count,
                f"{truncated} of {count} prompts exceeded {key} {limit}"
                + (f" (longest {longest:.0f})" if longest else "")
                + f": nothing was generated for them; raise {key} or shorten the prompt",
            )
        if count and metrics[EMPTY_RESPONSES] == count and truncated < count:
            cut = f" ({truncated} of truncated prompts)" if truncated else ""
            self.warnings.warn(
                "empty responses",
                step,
                True,
                f"all {count} responses had no token{cut}: nothing to learn from them; check "
                "explorer.rollout_model.engine_type (an external endpoint must return token ids) and the workflow",
            )

    async def evaluate(self) -> dict[str, float]:
        """Run every eval taskset once with the current weights; logs ``eval/<taskset>/...``."""
        metrics: dict[str, float] = {}
        for storage in self.config.buffer.explorer_input.eval_tasksets:
            with timer(metrics, f"eval/{storage.name}"):
                metrics.update(await self._evaluate_taskset(storage))
        if metrics:
            self.monitor.log(metrics, self.step)
        return metrics

    async def _evaluate_taskset(self, storage: TasksetConfig) -> dict[str, float]:
        reader = TasksetReader(storage)
        runs: dict[str, list[dict[str, float]]] = {}
        while True:
            try:
                tasks = reader.read_batch()
            except EndOfTaskset:
                break
            outcome = await self.runner.run_batch(tasks, batch_id=f"eval/{storage.name}/{self.step}")
            for exp in outcome.experiences:
                runs.setdefault(exp.eid.task, []).append({"reward": exp.reward or 0.0, **exp.metrics})
        return eval_at_k(storage.name, runs.values(), self.config.monitor.detailed_stats)

    def shutdown(self) -> None:
        for client in [*self.engines, *(c for clients in self.auxiliary for c in clients)]:
            client.close()
        self.pipeline.close()
        self.monitor.close()
