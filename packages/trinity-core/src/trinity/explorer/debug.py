"""``trinity debug``: the configured workflow on a few tasks with the rollout model, no trainer, no Ray.

The explorer's own parts run in this process: ``RolloutEngines`` starts the rollout model,
``TaskRunner`` runs each task's workflow as a batch of its own (so each shows as it ends, a failed
run with its traceback), and the tasks are the first taskset's first, in its selector's order.
Nothing is retried and weights sync by checkpoint (none come: there is no trainer).
``find_problems`` names what would keep a run from learning; ``score_responses`` is
``--module reward``. What is printed and written: ``trinity.explorer.debug_view``.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from trinity.buffer import TasksetReader
from trinity.common.experience import TRUNCATED_FROM, Experience, Task
from trinity.config import load_stage_configs
from trinity.config.schema import Config, TasksetConfig
from trinity.explorer.engines import RolloutEngines
from trinity.explorer.runner import TaskRunner
from trinity.explorer.tasksets import import_task_plugins
from trinity.plugins import Kind, resolve


class DebugError(ValueError):
    """A config or input ``trinity debug`` cannot work with; the message says which and why."""


@dataclass(frozen=True)
class Problem:
    """What would keep a run from learning: ``kind`` (error, truncation, empty response,
    no trained token, all-equal rewards), where it was seen and why it matters."""

    kind: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.where}: {self.detail}"

    @classmethod
    def error(cls, where: str, traceback_text: str) -> Problem:
        """A failure, named by its traceback's last line (the exception)."""
        return cls("error", where, traceback_text.strip().splitlines()[-1])


@dataclass
class TaskResult:
    """What one task's workflow made: its experiences, each failed run's traceback, the
    problems seen in them, and the seconds it took."""

    task: Task
    experiences: list[Experience]
    errors: list[str]
    seconds: float
    problems: list[Problem] = field(default_factory=list)


def debug_config(path: str, overrides: list[str]) -> Config:
    """The config of the first stage with a taskset, made to debug: no retries (a failure shows
    at once), one engine per model, weights by checkpoint (memory sync needs Ray). Raises
    ``ConfigError`` naming each key ``trinity run`` would refuse, ``PluginError`` for a workflow
    that cannot be imported."""
    for config in load_stage_configs(path, overrides, run=True):
        if debugged_taskset(config) is not None:
            import_task_plugins(config)
            config.explorer.max_retry_times = 0
            config.synchronizer.sync_method = "checkpoint"
            for _, model in config.explorer.inference_models():
                model.engine_num, model.sync_method = 1, "checkpoint"
            return config
    raise DebugError(f"{path} has no taskset (buffer.explorer_input.taskset): there is no workflow to debug")


def debugged_taskset(config: Config) -> TasksetConfig | None:
    """The first training taskset, else the first eval taskset."""
    inputs = config.buffer.explorer_input
    return next(iter([*inputs.tasksets, *inputs.eval_tasksets]), None)


def read_tasks(config: Config, count: int) -> list[Task]:
    """The taskset's first ``count`` tasks (fewer when it has fewer), in its selector's order:
    those a run's first step takes. Data that cannot be read is a ``DebugError`` naming the file."""
    storage = debugged_taskset(config).model_copy(update={"batch_size": count, "total_epochs": 1, "total_steps": None})
    try:
        return TasksetReader(storage).read_batch()
    except ValueError as exc:  # BadDataError among them
        raise DebugError(str(exc)) from exc


class DebugRun:
    """The rollout engines and the task runner of one ``trinity debug``, in this process."""

    def __init__(self, config: Config):
        os.environ.update({k: str(v) for k, v in config.explorer.env_vars.items()})
        self.config = config
        self.engines = RolloutEngines(config, "debug")
        self.runner = TaskRunner(config, self.engines.clients, self.engines.auxiliary)

    @property
    def tokenizer(self) -> Any | None:
        """The rollout model's tokenizer, None for an engine without one (an external endpoint)."""
        try:
            return self.engines.clients[0].chat_tokenizer.tokenizer
        except TypeError:
            return None

    def run(self, task: Task) -> TaskResult:
        """All of ``task``'s runs (its ``repeat_times``), as a run's step would make them."""
        started = time.monotonic()
        outcome = self.runner.run([task], batch_id="debug")
        errors = [error for _, error in outcome.errors]
        result = TaskResult(task, outcome.experiences, errors, time.monotonic() - started)
        result.problems = find_problems(self.config, result)
        return result

    def close(self) -> None:
        """Stop the engines, and the runner's event loop with its worker threads."""
        self.engines.close()
        self.runner.loop.close()


def run_label(experience: Experience) -> str:
    """``run <n>``, and ``turn <k>`` for a step-wise workflow's experiences."""
    eid = experience.eid
    return f"run {eid.run}" + (f" turn {eid.step}" if eid.step else "")


def run_name(experience: Experience) -> str:
    """``task <id> run <n>``: where a problem of ``experience`` was seen."""
    return f"task {experience.eid.task} {run_label(experience)}"


def find_problems(config: Config, result: TaskResult) -> list[Problem]:
    """The task's problems in the order they show: failed runs, each experience's, then its group's rewards."""
    found = [Problem.error(f"task {result.task.task_id}", error) for error in result.errors]
    for experience in result.experiences:
        found += _experience_problems(config, experience)
    groups: dict[str, list[float]] = {}
    for experience in result.experiences:
        if experience.reward is not None:
            groups.setdefault(experience.eid.task, []).append(experience.reward)
    return found + [
        Problem(
            "all-equal rewards",
            f"task {group}",
            f"all {len(rewards)} rewards are {rewards[0]:g}: a group baseline (GRPO's) gives them no advantage",
        )
        for group, rewards in groups.items()
        if len(rewards) > 1 and len(set(rewards)) == 1
    ]


def _experience_problems(config: Config, experience: Experience) -> list[Problem]:
    where = run_name(experience)
    if experience.truncate_status == "prompt_truncated":
        key, limit = _limit(config, "max_prompt_tokens")
        length = experience.info.get(TRUNCATED_FROM)
        tokens = f" of {length} tokens" if length else ""
        return [Problem("truncation", where, f"a prompt{tokens} is over {key} {limit}: nothing was generated for it")]
    if experience.response_length == 0:
        return [Problem("empty response", where, "the response has no token: there is nothing to learn from it")]
    found = []
    if experience.truncate_status == "response_truncated":
        key, limit = _limit(config, "max_response_tokens")
        found.append(Problem("truncation", where, f"the response hit {key} {limit}: it was cut before its end"))
    if experience.action_mask is not None and not experience.action_mask.any():
        found.append(
            Problem(
                "no trained token",
                where,
                f"the action mask is 0 on all {experience.response_length} response tokens: nothing of it is trained",
            )
        )
    return found


def _limit(config: Config, name: str) -> tuple[str, int]:
    """The rollout model's token limit ``name`` and the key that sets it."""
    limit = getattr(config.explorer.rollout_model, name)
    apart = limit != getattr(config.model, name)  # model.<name> unless the rollout model sets its own
    return (f"explorer.rollout_model.{name}" if apart else f"model.{name}"), limit


@dataclass
class Scored:
    """A response scored by its task's reward function: the components, or the traceback of the failure."""

    task: Task
    response: str
    truth: Any = None
    reward_fn: str | None = None
    components: dict[str, float] | None = None
    error: str | None = None


def score_responses(tasks: list[Task], responses: list[str]) -> list[Scored]:
    """``responses[i]`` scored against ``tasks[i]``'s truth by the reward function its workflow
    uses (the workflow's own ``truth`` and ``score``); without responses, each task's truth itself
    (a right answer should get the top reward). Raises ``DebugError`` when tasks are fewer."""
    if len(responses) > len(tasks):
        raise DebugError(f"{len(responses)} responses to score, but the taskset has {len(tasks)} tasks")
    given = responses or [None] * len(tasks)
    return [_score(task, response) for task, response in zip(tasks[: len(given)], given, strict=True)]


def _score(task: Task, response: str | None) -> Scored:
    scored = Scored(task, "" if response is None else response)
    try:
        workflow = resolve(Kind.WORKFLOW, task.workflow_type)(task, None)  # scoring needs no model
        scored.truth, scored.reward_fn = workflow.truth, workflow.task.reward_fn_type
        if response is None:
            scored.response = str(scored.truth)
        prompt = task.raw.get(task.format.get("prompt_key") or "prompt")
        scored.components = workflow.score(scored.response, scored.truth, prompt)
    except Exception as exc:  # the reward function's bug is what the user came to see
        scored.error = "".join(traceback.format_exception(exc))
    return scored
