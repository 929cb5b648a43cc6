"""The explorer: turns task batches into experiences with the rollout engines and workflows.

``Explorer`` composes its parts, each in its own module: the engines' lifecycle
(``engines``), the tasksets (``tasksets``), the step scheduler (``scheduler``), the writer
(``step_writer``), evaluation and bench (``evaluation``) and the serve proxy's host
(``serve_host``). ``StepScheduler.take_weights`` moves weights when the sync style's policy says.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from trinity.algorithm.experience_ops import ExperiencePipeline
from trinity.config.schema import Config
from trinity.explorer.engines import RolloutEngines
from trinity.explorer.evaluation import Evaluator
from trinity.explorer.rollout_metrics import UnlearnableWarnings
from trinity.explorer.runner import TaskRunner
from trinity.explorer.scheduler import StepScheduler
from trinity.explorer.serve_host import ServeHost
from trinity.explorer.step_writer import StepWriter
from trinity.explorer.tasksets import Tasksets, import_task_plugins
from trinity.runtime import setup_role
from trinity.synchronizer.signals import TrainerFinished

logger = logging.getLogger(__name__)


class Explorer:
    """One explorer (``explorer.name``); several may feed one trainer."""

    def __init__(self, config: Config, threads: int | None = None):
        self.config = config
        self.name = config.explorer.name
        self.monitor = setup_role(config, self.name, threads)
        os.environ.update({k: str(v) for k, v in config.explorer.env_vars.items()})
        self.writer = StepWriter(config, self.name, self.monitor)  # first: opening fences off an older process
        position = self.writer.resume() if config.continue_from_checkpoint else {}
        import_task_plugins(config)
        self.engines = RolloutEngines(config, self.name, tells_waits=self.writer.buffer is not None)
        self.tasksets = Tasksets(config, position.get("tasksets", []))
        self.engines.resume()
        self.runner = TaskRunner(config, self.engines.clients, self.engines.auxiliary)
        self.pipeline = ExperiencePipeline.from_config(config)
        warnings = UnlearnableWarnings(config, self.name)
        self.scheduler = StepScheduler(
            config, self.runner, self.engines, self.tasksets, self.pipeline, self.writer, warnings
        )
        self.evaluator = Evaluator(config, self.runner, self.monitor)
        self.serve_host = ServeHost(config, self.engines, self.writer, self.pipeline, warnings, self.runner.loop)
        self.stopped_early = ""  # why exploring ended before its data did, for the run's summary

    def planned_steps(self) -> int:
        """The steps of all tasksets (they take turns), for ``trinity run``'s progress display."""
        return self.tasksets.planned_steps()

    def run(self) -> dict[str, Any]:
        """Explore until the tasksets end; returns a summary."""
        start_step = self.writer.step
        self.runner.loop.run_until_complete(self._explore_tasksets())
        result = {"role": self.name, "steps": self.writer.step - start_step, "model_version": self.engines.version}
        if self.stopped_early:
            result["stopped_early"] = self.stopped_early
        return result

    async def _explore_tasksets(self) -> None:
        """Steps until the tasksets end (or the trainer does), evaluating every ``eval_interval``
        steps; then the last step's weights and a final evaluation."""
        interval = self.config.explorer.eval_interval
        if self.config.explorer.eval_on_startup and self.writer.step == 0:
            await self.evaluator.evaluate(self.writer.step)
        steps = self.scheduler
        # the tasks first: at the end of data, finish without waiting for weights
        while (tasks := self.tasksets.next_batch(steps.submitted)) is not None:
            try:
                await steps.take_weights()
            except TrainerFinished as exc:
                self.stopped_early = f"exploring stops after step {steps.submitted}: {exc}"
                logger.warning("%s: %s", self.name, self.stopped_early)
                break
            if await steps.submit(tasks) % interval == 0:
                await steps.drain()
                await self.evaluator.evaluate(self.writer.step)
        await steps.drain()
        self.writer.finish()
        if self.config.buffer.explorer_input.eval_tasksets and self.writer.step % interval:
            await asyncio.to_thread(self.engines.final_sync, self.writer.step)
            await self.evaluator.evaluate(self.writer.step)

    def serve(self) -> None:
        """Mode serve: the OpenAI-compatible proxy of ``trinity.explorer.serve`` over ``serve_host``,
        on ``explorer.listen_address``:``proxy_port`` until the run is stopped."""
        from trinity.explorer.serve import ServeProxy  # its web stack only in this mode

        explorer = self.config.explorer
        proxy = ServeProxy(self.serve_host)
        self.serve_host.loop.run_until_complete(proxy.serve(explorer.listen_address, explorer.proxy_port))

    def benchmark(self) -> dict[str, Any]:
        """Mode bench: evaluate every saved checkpoint (or the latest only) in step order."""
        return self.evaluator.benchmark(self.engines, self.name, self.writer.step)

    def shutdown(self) -> None:
        self.engines.close()
        self.pipeline.close()
        self.monitor.close()
