"""The trainer: reads experiences, applies the algorithm, updates the model, publishes weights.

Each step reads ``train_batch_size`` experiences (``StepReader``), turns them into a batch with
the sample strategy, adds values / reference logprobs, the KL reward penalty and advantages
where the algorithm computes them trainer-side, and runs one engine step. Weights are published
every ``sync_interval`` steps; checkpoints (``Checkpoints``) are saved every ``save_interval``
steps and at the end. A trainer left without a live writer stops with ``WritersGone``
(non-zero) after saving what it trained.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from trinity.algorithm.rollout_correction import RolloutCorrector
from trinity.buffer import BufferTimeout, EndOfBuffer, WritersGone
from trinity.common.batch import Batch
from trinity.common.experience import Experience
from trinity.config.schema import Config
from trinity.job_dir import HF_WEIGHTS_SUBDIR, checkpoint_dir
from trinity.monitor.learnable import LEARNABLE_TOKENS, NO_GRADIENT, CauseWarnings
from trinity.monitor.metrics import timer
from trinity.plugins import Kind, resolve
from trinity.runtime import freeze_long_lived_objects, setup_role
from trinity.synchronizer.signals import SyncSignals
from trinity.trainer.reading import ExpertDataEnded, StepReader, StopRequested
from trinity.trainer.save_and_resume import Checkpoints
from trinity.trainer.step_metrics import RolloutPreview, batch_metrics, learning_signal, warn_unlearnable

logger = logging.getLogger(__name__)


class Trainer:
    """Trains on what the explorers wrote, one ``train_batch_size`` batch per step."""

    def __init__(self, config: Config, threads: int | None = None):
        self.config = config
        self.name = config.trainer.name
        self.monitor = setup_role(config, self.name, threads)
        self.preview = RolloutPreview(config.model)  # trainer.enable_preview
        algo = config.algorithm
        self.algorithm = resolve(Kind.ALGORITHM_TYPE, algo.algorithm_type)
        self.advantage_fn = resolve(Kind.ADVANTAGE_FN, algo.advantage_fn)(**algo.advantage_fn_args)
        self.policy_loss_fn = resolve(Kind.POLICY_LOSS_FN, algo.policy_loss_fn)(**algo.policy_loss_fn_args)
        self.kl_penalty_fn = resolve(Kind.KL_FN, algo.kl_penalty_fn)(**algo.kl_penalty_fn_args)
        self.sample_strategy = resolve(Kind.SAMPLE_STRATEGY, algo.sample_strategy)(**algo.sample_strategy_args)
        self.correction = RolloutCorrector.from_config(config)
        self.engine = resolve(Kind.TRAINER_ENGINE, config.trainer.trainer_type, "trainer.trainer_type")(config)
        self._stop = threading.Event()
        expert = self.sample_strategy.expert_reads(config.buffer.train_batch_size)
        self.signals = SyncSignals(config)  # explorers' waits in, the trainer's end out
        self.readers = StepReader(config, self.name, self.algorithm.data_schema, expert, self._stop, self.signals)
        self.sync = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)
        self.stopped_early = ""  # why training ended before total_steps, for the run's summary
        self.warnings = CauseWarnings(self.name)
        self.checkpoints = Checkpoints(config, self.name, self.engine, self.readers)
        resumed = self.checkpoints.resume()
        self.step = resumed or 0
        if resumed is not None:
            self.publish()  # explorers resume from these weights

    def planned_steps(self) -> int | None:
        """``trainer.total_steps``; else the steps a supervised dataset makes; else None (until
        the buffer ends). For ``trinity run``'s progress display."""
        total = self.config.trainer.total_steps
        return total if total is not None else self.readers.planned_steps()

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` or the end of the buffer; returns a summary."""
        total = self.config.trainer.total_steps
        start_step = self.step
        save_interval = self.config.trainer.save_interval
        saved: dict[str, float] = {}  # the last save's time goes into the next step's line
        while (total is None or self.step < total) and not self._stop.is_set():
            metrics, saved = saved, {}
            try:
                with timer(metrics, "read_experiences"):
                    experiences = self.readers.read(self.step)
            except (BufferTimeout, ExpertDataEnded) as exc:
                self.stopped_early = str(exc) if isinstance(exc, ExpertDataEnded) else f"stopping: {exc}"
                logger.warning("%s: %s", self.name, self.stopped_early)
                break
            except (EndOfBuffer, StopRequested):
                break
            except WritersGone:
                if self.step != self.checkpoints.saved_step:
                    self.checkpoints.save(self.step)  # what was trained stays: a restarted run goes on from here
                raise
            with timer(metrics, "train_step"):
                metrics.update(self.train_step(experiences))
            self.step += 1
            if self.step % self.config.synchronizer.sync_interval == 0:
                with timer(metrics, "sync_weights"):
                    self.publish()
            self.monitor.log(metrics, self.step)  # before the save: a checkpointed step has its line
            if save_interval and self.step % save_interval == 0:
                with timer(saved, "save_checkpoint"):
                    self.checkpoints.save(self.step, final=self.step == total)
            if self.step == start_step + 1:
                freeze_long_lived_objects()
        if self.step % self.config.synchronizer.sync_interval:
            self.publish()
        self.signals.finish(self.step)  # an explorer waiting for a later version stops instead
        self.checkpoints.save_final(self.step)
        model_path = checkpoint_dir(self.config, self.step) / HF_WEIGHTS_SUBDIR
        result = {
            "role": self.name,
            "steps": self.step - start_step,
            "final_step": self.step,
            "model_path": str(model_path),
        }
        if self.stopped_early:
            result["stopped_early"] = self.stopped_early
        return result

    def request_stop(self) -> None:
        """End ``run`` after the current step: it saves and returns (``trinity run`` on SIGTERM)."""
        self._stop.set()

    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        """One update from ``experiences``; returns its metrics."""
        if self.config.trainer.enable_preview:
            self.monitor.log_table("rollout_preview", self.preview.rows(experiences), self.step + 1)
        batch, metrics = self.sample_strategy.sample(experiences, self.step, self.step)
        if batch.batch_size == 0:  # e.g. staleness_control dropped every row
            logger.warning("%s: no experience of step %d is left after sampling: no update", self.name, self.step + 1)
            return {**metrics, NO_GRADIENT: 1.0}
        if batch.multi_modal_inputs is not None and not self.engine.takes_images:
            raise ValueError(
                f"trainer.trainer_type {self.config.trainer.trainer_type}: experiences with images need a trainer "
                "that passes them to the model (torch)"
            )
        if not self.config.algorithm.bypass_old_logprobs and batch.old_logprobs is not None:
            # the rollout engine's logprobs stay for the rollout correction; the actor recomputes the old ones
            batch = batch.with_fields(rollout_logprobs=batch.old_logprobs, old_logprobs=None)
        if self.algorithm.compute_advantage_in_trainer:
            batch, prepared = self.prepare(batch)
            metrics.update(prepared)
            if batch.batch_size == 0:  # e.g. grpo's std_threshold dropped every group
                logger.warning("%s: the advantage function left no row of step %d: no update", self.name, self.step + 1)
                return {**metrics, NO_GRADIENT: 1.0}
        elif self.correction is not None and not self.correction.bypass:
            batch, corrected = self.correction.apply_to_batch(self.engine.prepare_batch(batch))
            metrics.update(corrected)
        metrics.update(self.engine.train_step(batch))
        metrics.update(batch_metrics(batch))
        metrics.update(learning_signal(batch))
        metrics[NO_GRADIENT] = float(not metrics[LEARNABLE_TOKENS] or metrics.get("actor/grad_norm") == 0)
        warn_unlearnable(self.warnings, batch, metrics, self.step + 1)
        return metrics

    def prepare(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
        """What the engine fills (old/ref logprobs, values), the KL reward penalty, the rollout
        correction of decoupled mode, advantages, and what the policy loss needs from the whole
        batch (``PolicyLossFn.prepare``)."""
        batch = self.engine.prepare_batch(batch, entropy_scores=self.advantage_fn.needs_entropy_scores)
        batch, kl_metrics = self.kl_penalty_fn.apply_to_reward(batch)
        corrected: dict[str, float] = {}
        if self.correction is not None:  # decoupled mode: weights and rejections before advantages, as verl
            batch, corrected = self.correction.apply_to_batch(batch)
        batch, adv_metrics = self.advantage_fn(batch)
        if batch.batch_size:
            batch, loss_metrics = self.policy_loss_fn.prepare(batch, self.engine.compute_logprobs)
            adv_metrics.update(loss_metrics)
        return batch, {**{f"critic/{k}": v for k, v in kl_metrics.items()}, **adv_metrics, **corrected}

    def publish(self) -> None:
        self.sync.publish(self.engine.weights_for_sync(), self.step, fence=self.readers.reader.fenced)

    def shutdown(self) -> None:
        self.readers.close()
        self.monitor.close()
