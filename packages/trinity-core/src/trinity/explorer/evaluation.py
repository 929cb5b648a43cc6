"""Evaluation: every eval taskset run once with the engines' current weights, and ``mode: bench``.

Explored runs evaluate every ``explorer.eval_interval`` steps (and at the start with
``eval_on_startup``); bench evaluates saved checkpoints in step order. Metrics are logged as
``eval/<taskset>/...`` at the step they evaluate.
"""

from __future__ import annotations

import logging
from typing import Any

from trinity.buffer import EndOfTaskset, TasksetReader
from trinity.config.schema import Config, TasksetConfig
from trinity.explorer.engines import RolloutEngines
from trinity.explorer.runner import TaskRunner
from trinity.job_dir import saved_checkpoints
from trinity.monitor.base import MonitorGroup
from trinity.monitor.metrics import eval_at_k, timer
from trinity.synchronizer.methods import WeightUpdate

logger = logging.getLogger(__name__)


class Evaluator:
    """Runs ``buffer.explorer_input.eval_tasksets`` on the runner's engines."""

    def __init__(self, config: Config, runner: TaskRunner, monitor: MonitorGroup):
        self.config = config
        self.runner = runner
        self.monitor = monitor

    async def evaluate(self, step: int) -> dict[str, float]:
        """Run every eval taskset once with the current weights; logs the metrics at ``step``."""
        metrics: dict[str, float] = {}
        for storage in self.config.buffer.explorer_input.eval_tasksets:
            with timer(metrics, f"eval/{storage.name}"):
                metrics.update(await self._evaluate_taskset(storage, step))
        if metrics:
            self.monitor.log(metrics, step)
        return metrics

    async def _evaluate_taskset(self, storage: TasksetConfig, step: int) -> dict[str, float]:
        reader = TasksetReader(storage)
        runs: dict[str, list[dict[str, float]]] = {}
        while True:
            try:
                tasks = reader.read_batch()
            except EndOfTaskset:
                break
            outcome = await self.runner.run_batch(tasks, batch_id=f"eval/{storage.name}/{step}")
            for exp in outcome.experiences:
                runs.setdefault(exp.eid.task, []).append({"reward": exp.reward or 0.0, **exp.metrics})
        return eval_at_k(storage.name, runs.values(), self.config.monitor.detailed_stats)

    def benchmark(self, engines: RolloutEngines, role: str, step: int) -> dict[str, Any]:
        """Mode bench: evaluate every saved checkpoint (or the latest only) in step order; without
        one, the initial model (logged at ``step``, the explorer's)."""
        takes_weights = engines.clients[0].engine.takes_weights
        checkpoints = saved_checkpoints(self.config) if takes_weights else []
        if self.config.explorer.bench_on_latest_checkpoint:
            checkpoints = checkpoints[-1:]
        results = {}
        if not checkpoints and takes_weights:
            logger.warning(
                "%s: no checkpoint under %s: evaluating the initial model", role, self.config.checkpoint_job_dir
            )
        if not checkpoints:
            results[0] = self.runner.loop.run_until_complete(self.evaluate(step))
        for saved, weights in checkpoints:
            engines.load(WeightUpdate(saved, path=str(weights)))
            results[saved] = self.runner.loop.run_until_complete(self.evaluate(saved))
        return {"role": role, "evaluated_steps": list(results), "metrics": results}
