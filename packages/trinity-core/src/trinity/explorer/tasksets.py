"""The explorer's training tasksets: they take turns by step, and learn each task's pass rate.

A taskset added on resume starts fresh; one that ended is skipped. The pass rates go to each
taskset's selector, which the curriculum selectors (``difficulty_based``,
``offline_easy2hard``) order their next tasks by.
"""

from __future__ import annotations

from typing import Any

from trinity.buffer import EndOfTaskset, TasksetReader
from trinity.common.experience import Experience, Task
from trinity.config.schema import Config
from trinity.explorer.runner import task_pass_rates
from trinity.plugins import Kind, resolve


def import_task_plugins(config: Config) -> None:
    """Import every taskset's default workflow and reward function before any engine starts:
    one that cannot be imported (a missing dependency) ends the run at once, naming it and
    the config key, instead of failing every task of every step."""
    inputs = config.buffer.explorer_input
    for storage in (*inputs.tasksets, *inputs.eval_tasksets):
        if storage.default_workflow_type:
            resolve(Kind.WORKFLOW, storage.default_workflow_type, "default_workflow_type")
        if storage.default_reward_fn_type:
            resolve(Kind.REWARD_FN, storage.default_reward_fn_type, "default_reward_fn_type")


class Tasksets:
    """``buffer.explorer_input.tasksets``, resumed from their saved ``states``."""

    def __init__(self, config: Config, states: list[dict[str, Any]]):
        self.readers = [TasksetReader(storage) for storage in config.buffer.explorer_input.tasksets]
        for reader, state in zip(self.readers, states, strict=False):  # a taskset added on resume starts fresh
            reader.load_state_dict(state)
        self._ended = [False] * len(self.readers)

    def planned_steps(self) -> int:
        """The steps of all tasksets, for ``trinity run``'s progress display."""
        return sum(reader.planned_steps() for reader in self.readers)

    def next_batch(self, turn: int, refill: bool = False) -> list[Task] | None:
        """The batch of step ``turn + 1``: the tasksets take turns, skipping those that ended; None
        once all have. A ``refill`` batch adds to the current step and ends no taskset."""
        for offset in range(len(self.readers)):
            index = (turn + offset) % len(self.readers)
            if self._ended[index]:
                continue
            try:
                return self.readers[index].read_batch(refill)
            except EndOfTaskset:
                if not refill:
                    self._ended[index] = True
        return None

    def positions(self) -> list[dict[str, Any]]:
        """What a resume reads next, taskset by taskset."""
        return [reader.state_dict() for reader in self.readers]

    def report_pass_rates(self, experiences: list[Experience]) -> None:
        """Each task's pass rate to its taskset's selector, from the experiences as the pipeline
        scored them, before its filters dropped any."""
        rates = task_pass_rates(experiences)
        for reader in self.readers:
            if reader.storage.name in rates:
                reader.update_pass_rates(*rates[reader.storage.name])
