"""Workflows whose timing the runner tests control (named by dotted path: ``runner_workflows.X``)."""

from __future__ import annotations

import asyncio
import time

from trinity.common.experience import Experience
from trinity.explorer.workflow import Workflow, set_reward

STARTS: list[tuple[str, int, float]] = []
"""``(task id, run, start time)`` of every run, in start order (the tests clear it)."""


def _experience(model, task) -> Experience:
    (exp,) = model.generate("1+1=", n=1, max_tokens=2)
    return set_reward(exp, {"accuracy": float(task.raw.get("reward", 1.0))})


class SleepyWorkflow(Workflow):
    """One run: sleeps ``raw["seconds"]`` (in the event loop), then samples one response."""

    can_repeat = False

    async def run_async(self) -> list[Experience]:
        STARTS.append((self.task.task_id, len(STARTS), time.monotonic()))
        await asyncio.sleep(float(self.task.raw.get("seconds", 0)))
        return [await asyncio.to_thread(_experience, self.model, self.task)]


class BlockingWorkflow(SleepyWorkflow):
    """The same, sleeping in its thread (a sync workflow)."""

    async def run_async(self) -> list[Experience]:
        return await asyncio.to_thread(self.run)

    def run(self) -> list[Experience]:
        STARTS.append((self.task.task_id, len(STARTS), time.monotonic()))
        time.sleep(float(self.task.raw.get("seconds", 0)))
        return [_experience(self.model, self.task)]


class RepeatingWorkflow(Workflow):
    """Samples its repeats itself (``n`` at once), recording how many it was asked for."""

    async def run_async(self) -> list[Experience]:
        STARTS.append((self.task.task_id, self.repeat_times, time.monotonic()))
        experiences = await self.model.generate_async("1+1=", n=self.repeat_times, max_tokens=2)
        return [set_reward(e, {"accuracy": 1.0}) for e in experiences]
