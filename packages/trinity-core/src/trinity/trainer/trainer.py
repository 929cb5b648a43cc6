"""The trainer: reads experiences, applies the algorithm, updates the model, publishes weights.

Each step reads ``train_batch_size`` experiences (part of them from an auxiliary expert
buffer when the sample strategy asks, as ``mix`` does), turns them into a batch with the sample
strategy, adds values / reference logprobs, the KL reward penalty and advantages where
the algorithm computes them trainer-side, and runs one engine step. Weights are published
every ``sync_interval`` steps; checkpoints are saved every ``save_interval`` steps and at
the end, with the actor's HF weights in each (``trainer.save_hf_checkpoint: always``), in the
last (``last``, the default: bench mode and the next stage read them) or in none (``never``).

Resume contract: a checkpoint is written to a temp dir and renamed into place, then the
metadata naming it together with the buffer reader's position, then the reader commits.
A crash anywhere restarts from the last metadata, so no batch is lost and no step is
trained twice. The rename and the metadata run fenced by the reader's generation: a
trainer that another process has replaced (an orphan of a killed run) fails instead of
writing. A trainer left without a live writer stops with ``WritersGone`` (non-zero) after
saving what it trained.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trinity.algorithm.rollout_correction import RolloutCorrector
from trinity.buffer import BufferTimeout, EndOfBuffer, WritersGone, open_experience_reader
from trinity.checkpoints import (
    HF_WEIGHTS_SUBDIR,
    checkpoint_dir,
    has_hf_weights,
    prune_checkpoints,
    trainer_meta_path,
    write_checkpoint,
)
from trinity.common.batch import Batch
from trinity.common.crash import crash_point
from trinity.common.experience import Experience
from trinity.common.files import read_json, write_json
from trinity.config.schema import Config, StorageConfig
from trinity.monitor.learnable import (
    LEARNABLE_TOKENS,
    NO_GRADIENT,
    ZERO_ADVANTAGE_FRACTION,
    ZERO_ADVANTAGE_GROUPS,
    CauseWarnings,
    uniform_score,
)
from trinity.monitor.metrics import stats, timer
from trinity.plugins import Kind, resolve
from trinity.runtime import freeze_long_lived_objects, setup_role

logger = logging.getLogger(__name__)

_THREAD_SAVE_LOCK = threading.Lock()
_READ_SLICE = 1.0
PREVIEW_ROWS = 4
"""Experiences of a step shown in the ``rollout_preview`` table (``trainer.enable_preview``)."""
"""Seconds of one wait on the buffer before checking whether an explorer waits on us."""


@contextmanager
def save_guard(config: Config) -> Iterator[None]:
    """Serialise saves per ``trainer.save_strategy``.

    ``single_thread``: one save at a time in the whole system (thread lock and a file lock
    under checkpoint_root_dir); ``single_process`` and ``single_node``: the file lock
    only (on one node these coincide); ``unrestricted``: no lock.
    """
    strategy = config.trainer.save_strategy
    if strategy == "unrestricted":
        yield
        return
    lock_path = Path(config.checkpoint_root_dir).expanduser() / ".trinity_save.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    thread_lock = _THREAD_SAVE_LOCK if strategy == "single_thread" else threading.Lock()
    with thread_lock, open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _StopRequested(Exception):
    """``request_stop`` came while the trainer waited for experiences."""


class Trainer:
    """Trains on what the explorers wrote, one ``train_batch_size`` batch per step."""

    def __init__(self, config: Config, threads: int | None = None):
        self.config = config
        self.name = config.trainer.name
        self.monitor = setup_role(config, self.name, threads)
        self._preview_tokenizer: Any = None  # loaded for the first preview (trainer.enable_preview)
        algo = config.algorithm
        self.algorithm = resolve(Kind.ALGORITHM_TYPE, algo.algorithm_type)
        self.advantage_fn = resolve(Kind.ADVANTAGE_FN, algo.advantage_fn)(**algo.advantage_fn_args)
        self.policy_loss_fn = resolve(Kind.POLICY_LOSS_FN, algo.policy_loss_fn)(**algo.policy_loss_fn_args)
        self.kl_penalty_fn = resolve(Kind.KL_FN, algo.kl_penalty_fn)(**algo.kl_penalty_fn_args)
        self.sample_strategy = resolve(Kind.SAMPLE_STRATEGY, algo.sample_strategy)(**algo.sample_strategy_args)
        self.correction = RolloutCorrector.from_config(config)
        self.engine = resolve(Kind.TRAINER_ENGINE, config.trainer.trainer_type, "trainer.trainer_type")(config)
        storage = config.buffer.trainer_input
        self.reader = self._open_reader(storage.experience_buffer, self.algorithm.data_schema)
        self.expert_reader, self.expert_rows, self.expert_buffer = None, 0, ""
        expert = self.sample_strategy.expert_reads(config.buffer.train_batch_size)
        if expert:
            self.expert_buffer, self.expert_rows = expert
            self.expert_reader = self._open_reader(storage.auxiliary_buffers[self.expert_buffer], "sft")
        self.sync = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method)(config)
        self._stop = threading.Event()
        self.stopped_early = ""  # why training ended before total_steps, for the run's summary
        self.warnings = CauseWarnings(self.name)
        self.step = 0
        self.saved_step = 0
        self.saved_hf = True  # whether the last checkpoint holds HF weights
        meta = read_json(trainer_meta_path(config)) if config.continue_from_checkpoint else None
        if meta:
            self.step = self.saved_step = self.engine.load_checkpoint(meta["checkpoint"])
            self.saved_hf = has_hf_weights(Path(meta["checkpoint"]))
            self.reader.load_state_dict(meta["reader"])
            if self.expert_reader is not None:
                self.expert_reader.load_state_dict(meta["expert_reader"])
            logger.info("%s: resumed from %s (step %d)", self.name, meta["checkpoint"], self.step)
            self.publish()  # explorers resume from these weights

    def _open_reader(self, storage: StorageConfig, schema: str):
        """An experience buffer, or a supervised dataset (SFT/DPO rows in files) as one."""
        if schema != "rollout" and storage.storage_type == "file":
            from trinity.trainer.supervised import SupervisedReader

            return SupervisedReader(storage, self.config.model, schema, self.config.buffer.seed)
        return open_experience_reader(storage, self.name, auto_commit=False, namespace=self.config.ray_namespace)

    @property
    def readers(self) -> list:
        """The rollout reader and, with expert data, the expert reader."""
        return [r for r in (self.reader, self.expert_reader) if r is not None]

    def planned_steps(self) -> int | None:
        """``trainer.total_steps``; else the steps a supervised dataset makes; else None (until
        the buffer ends). For ``trinity run``'s progress display."""
        if self.config.trainer.total_steps is not None:
            return self.config.trainer.total_steps
        from trinity.trainer.supervised import SupervisedReader

        if isinstance(self.reader, SupervisedReader):
            return self.reader.planned_steps(self.config.buffer.train_batch_size - self.expert_rows)
        return None

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
                    experiences = self.read_batch() + self.read_expert()
            except (EndOfBuffer, _StopRequested):
                break
            except BufferTimeout as exc:
                self.stopped_early = f"stopping: {exc}"
                logger.warning("%s: %s", self.name, self.stopped_early)
                break
            except WritersGone:
                if self.step != self.saved_step:
                    self.save()  # what was trained stays: a restarted run goes on from here
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
                    self.save(final=self.step == total)
            if self.step == start_step + 1:
                freeze_long_lived_objects()
        if self.step % self.config.synchronizer.sync_interval:
            self.publish()
        self.sync.finish(self.step)  # an explorer waiting for a later version stops instead
        if self.step != self.saved_step or (self.hf_weights(final=True) and not self.saved_hf):
            self.save(final=True)
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

    def read_batch(self) -> list[Experience]:
        """``train_batch_size`` experiences, or fewer when no more can come in time.

        Fewer: the buffer ended, ``max_read_timeout`` passed, or an explorer is blocked
        waiting for the weights this very step will produce (its last step came up short,
        e.g. failed tasks), so waiting longer would deadlock.

        While a writer is silent (it missed a heartbeat), the wait goes past ``max_read_timeout``
        until ``writer_timeout`` tells a dead explorer (``WritersGone``: the run fails, naming it)
        from a stalled one, whichever timeout is the shorter.
        """
        wanted = self.config.buffer.train_batch_size - self.expert_rows
        wait = self.config.buffer.trainer_input.experience_buffer.max_read_timeout
        started, since = time.monotonic(), time.time()
        deadline = started + wait
        got: list[Experience] = []
        while len(got) < wanted:
            remaining = deadline - time.monotonic()
            try:
                got += self.reader.read(wanted - len(got), timeout=max(0.0, min(_READ_SLICE, remaining)))
            except BufferTimeout as exc:
                if self._stop.is_set() and not got:
                    raise _StopRequested from None
                dead = self.reader.dead_writers(since)
                if remaining <= _READ_SLICE and not got and not dead:
                    undecided = time.monotonic() - started < self._writer_timeout + 2 * _READ_SLICE
                    if undecided and self.reader.silent_writers():
                        deadline += _READ_SLICE  # not over before the silent writer is known dead or alive
                        continue
                    raise BufferTimeout(exc.buffer, wait) from None
                if dead:
                    raise WritersGone(exc.buffer, dead, time.monotonic() - started, self._writer_timeout) from None
            except EndOfBuffer:
                if not got:
                    raise
                break
            if got and (remaining <= _READ_SLICE or (len(got) < wanted and self._explorer_blocked())):
                break
        return got

    def read_expert(self) -> list[Experience]:
        """This step's expert rows (the sample strategy's ``expert_reads``), tagged as such."""
        if self.expert_reader is None:
            return []
        try:
            rows = self.expert_reader.read(self.expert_rows)
        except EndOfBuffer as exc:
            self.stopped_early = (
                f"the expert data ended ({exc}): training stops after step {self.step}; raise "
                f"buffer.trainer_input.auxiliary_buffers.{self.expert_buffer}.total_epochs to train longer"
            )
            logger.warning("%s: %s", self.name, self.stopped_early)
            raise
        for exp in rows:
            exp.info["is_expert"] = True
        return rows

    @property
    def _writer_timeout(self) -> float:
        return self.config.buffer.trainer_input.experience_buffer.writer_timeout

    def _explorer_blocked(self) -> bool:
        awaited = self.sync.awaited()
        return awaited is not None and awaited > self.step

    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        """One update from ``experiences``; returns its metrics."""
        if self.config.trainer.enable_preview:
            self.log_preview(experiences)
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
        metrics.update(self.batch_metrics(batch))
        metrics.update(self.learning_signal(batch))
        metrics[NO_GRADIENT] = float(not metrics[LEARNABLE_TOKENS] or metrics.get("actor/grad_norm") == 0)
        self.warn_unlearnable(batch, metrics)
        return metrics

    def log_preview(self, experiences: list[Experience]) -> None:
        """``trainer.enable_preview``: the step's first experiences as text, a ``rollout_preview``
        table in the monitors (wandb's Table, tensorboard's text, the console's tables file)."""
        if self._preview_tokenizer is None:
            from transformers import AutoTokenizer

            model = self.config.model
            self._preview_tokenizer = AutoTokenizer.from_pretrained(
                model.model_path, trust_remote_code=model.trust_remote_code
            )
        decode = self._preview_tokenizer.decode
        rows = [
            {
                "task": exp.eid.task,
                "run": exp.eid.run,
                "reward": exp.reward,
                "prompt": decode(exp.tokens[: exp.prompt_length].tolist()),
                "response": decode(exp.tokens[exp.prompt_length :].tolist()),
            }
            for exp in experiences[:PREVIEW_ROWS]
        ]
        self.monitor.log_table("rollout_preview", rows, self.step + 1)

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

    @staticmethod
    def batch_metrics(batch: Batch) -> dict[str, float]:
        mask = batch.response_mask
        metrics = stats("critic/score", batch.rewards.tolist())
        metrics.update(stats("response_length", mask.sum(dim=1).tolist()))
        if batch.advantages is not None:
            valid = batch.advantages[mask > 0]
            metrics.update(stats("critic/advantages", valid.tolist() if valid.numel() else []))
        return metrics

    @staticmethod
    def learning_signal(batch: Batch) -> dict[str, float]:
        """What the step could learn from (keys of ``trinity.monitor.learnable``): the tokens under
        the loss mask with a nonzero advantage (all of them where the batch has no advantages, and
        an expert row's in a mix), and the groups with response tokens whose advantages are all 0."""
        mask = batch.response_mask > 0
        if batch.advantages is None:
            return {LEARNABLE_TOKENS: float(mask.sum())}
        signal = mask & (batch.advantages != 0)
        expert = batch.is_expert if batch.is_expert is not None else mask.new_zeros(batch.batch_size)
        learnable = signal | (mask & expert[:, None])
        groups: dict[int, tuple[bool, bool]] = {}  # group -> (any response token, any nonzero advantage)
        rows = zip(
            batch.group_ids.tolist(), mask.any(dim=1).tolist(), signal.any(dim=1).tolist(), expert.tolist(), strict=True
        )
        for group, tokens, nonzero, is_expert in rows:
            if not is_expert:
                had_tokens, had_signal = groups.get(group, (False, False))
                groups[group] = (had_tokens or tokens, had_signal or nonzero)
        zero = sum(tokens and not nonzero for tokens, nonzero in groups.values())
        return {
            LEARNABLE_TOKENS: float(learnable.sum()),
            ZERO_ADVANTAGE_GROUPS: zero,
            ZERO_ADVANTAGE_FRACTION: zero / len(groups) if groups else 0.0,
        }

    def warn_unlearnable(self, batch: Batch, metrics: dict[str, float]) -> None:
        """Warn of a step whose groups all had zero advantage, or else of one with no gradient,
        naming why; ``CauseWarnings`` says when."""
        step, groups, score = self.step + 1, metrics.get(ZERO_ADVANTAGE_GROUPS), uniform_score(metrics)
        if metrics.get(ZERO_ADVANTAGE_FRACTION) == 1 and score is not None:
            self.warnings.warn(
                "one score",
                step,
                True,
                f"all {batch.batch_size} samples scored {score:g} (zero advantage): none is better "
                "to learn from; the task is solved if that is the best score, else check the reward function",
            )
        elif metrics.get(ZERO_ADVANTAGE_FRACTION) == 1:
            self.warnings.warn(
                "equal rewards",
                step,
                True,
                f"{groups} of {groups} groups had equal rewards (zero advantage): nothing to learn from them; "
                "check the reward function or raise algorithm.repeat_times",
            )
        elif metrics[NO_GRADIENT]:
            tokens = int(metrics[LEARNABLE_TOKENS])
            why = (
                f"grad_norm was 0 with {tokens} tokens of nonzero advantage: the policy loss gave none; "
                "check algorithm.policy_loss_fn_args"
                if tokens
                else f"none of its {batch.batch_size} rows has a response token to train on (empty responses: "
                "see the explorer's warnings)"
                if not batch.response_mask.any()
                else "no response token has a nonzero advantage: check the reward function or raise "
                "algorithm.repeat_times"
            )
            self.warnings.warn("no gradient", step, True, f"no gradient: {why}")

    def publish(self) -> None:
        self.sync.publish(self.engine.weights_for_sync(), self.step, fence=self.reader.fenced)

    def hf_weights(self, final: bool) -> bool:
        """Whether a checkpoint gets the actor's HF weights: ``trainer.save_hf_checkpoint``
        ``always``, or ``last`` for the run's final one (the next stage and bench mode read them)."""
        policy = self.config.trainer.save_hf_checkpoint
        return policy == "always" or (policy == "last" and final)

    def save(self, final: bool = False) -> None:
        """Checkpoint, then the metadata naming it and the reader position, then commit."""
        target = checkpoint_dir(self.config, self.step)
        hf_weights = self.hf_weights(final)
        with save_guard(self.config):
            write_checkpoint(
                target, lambda tmp: self.engine.save_checkpoint(str(tmp), self.step, hf_weights), self.reader.fenced
            )
        meta = {"step": self.step, "checkpoint": str(target), "reader": self.reader.state_dict()}
        if self.expert_reader is not None:
            meta["expert_reader"] = self.expert_reader.state_dict()
        with self.reader.fenced():
            write_json(trainer_meta_path(self.config), meta, sync=self.config.buffer.durability == "safe")
        crash_point("trainer.after_meta")
        for reader in self.readers:
            reader.commit()
        crash_point("trainer.after_commit")
        self.saved_step, self.saved_hf = self.step, has_hf_weights(target)
        logger.info("%s: saved %s", self.name, target)
        prune_checkpoints(self.config, self.config.trainer.max_checkpoints_to_keep)

    def shutdown(self) -> None:
        for reader in self.readers:
            reader.close()
        self.monitor.close()
