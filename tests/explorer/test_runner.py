"""The task runner: jobs of repeats, concurrent modes, over-rollout, timeouts, on the tiny model."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import runner_workflows as flows

from helpers.engine_helpers import transformers_client
from trinity.common.experience import Task
from trinity.config.schema import Config
from trinity.explorer.runner import TaskRunner, over_rollout_minimum
from trinity.rollout.client import EngineClient


@pytest.fixture(scope="module")
def client(tiny_model_dir: Path):
    config = config_of(tiny_model_dir)
    with transformers_client(config.explorer.rollout_model, config.model) as client:
        yield client


def config_of(model: Path, **explorer) -> Config:
    config = Config.model_validate(
        {
            "model": {"model_path": str(model), "max_prompt_tokens": 16, "max_response_tokens": 4},
            "explorer": {"rollout_model": {"model_path": str(model), "engine_type": "transformers"}, **explorer},
            "buffer": {"batch_size": 4},
        }
    )
    config.explorer.rollout_model.max_response_tokens = 4
    return config


def tasks(workflow: str, *rows: dict, repeat_times: int = 1) -> list[Task]:
    return [
        Task(
            workflow_type=f"runner_workflows.{workflow}", raw=row, repeat_times=repeat_times, taskset_name="t", index=i
        )
        for i, row in enumerate(rows)
    ]


@pytest.fixture(autouse=True)
def clear_starts():
    flows.STARTS.clear()


def runner(client: EngineClient, model: Path, **explorer) -> TaskRunner:
    return TaskRunner(config_of(model, **explorer), [client], [])


def test_repeats_split_into_jobs_of_max_repeat_times_per_runner(client, tiny_model_dir):
    outcome = runner(client, tiny_model_dir, max_repeat_times_per_runner=3).run(
        tasks("RepeatingWorkflow", {}, repeat_times=8), "1"
    )
    assert sorted(n for _, n, _ in flows.STARTS) == [2, 3, 3]  # 8 repeats: jobs of 3, 3 and 2 samples
    assert sorted(e.eid.run for e in outcome.experiences) == list(range(8))  # each run once, numbered


@pytest.mark.parametrize("mode, seconds", [("sequential", 1.2), ("asynchronous", 0.3), ("multi-threading", 0.3)])
def test_concurrent_mode_runs_a_task_s_repeats_in_turn_or_together(client, tiny_model_dir, mode, seconds):
    workflow = "BlockingWorkflow" if mode == "multi-threading" else "SleepyWorkflow"
    started = time.monotonic()
    outcome = runner(client, tiny_model_dir, concurrent_mode=mode).run(
        tasks(workflow, {"seconds": 0.3}, repeat_times=4), "1"
    )
    elapsed = time.monotonic() - started
    assert len(outcome.experiences) == 4 and sorted(e.eid.run for e in outcome.experiences) == [0, 1, 2, 3]
    starts = sorted(t for _, _, t in flows.STARTS)
    if mode == "sequential":
        assert starts[-1] - starts[0] >= 0.85 and elapsed >= 1.2  # each run after the one before
    else:
        assert starts[-1] - starts[0] < 0.2 and elapsed < 1.0  # all four at once, in one runner slot


def test_over_rollout_takes_the_first_tasks_and_cancels_the_straggler(client, tiny_model_dir):
    config = {"over_rollout": {"ratio": 0.25, "wait_after_min": 0.5}}
    task_runner = runner(client, tiny_model_dir, **config)
    assert over_rollout_minimum(task_runner.config) == 3  # ceil(4 x 0.75)
    started = time.monotonic()
    outcome = task_runner.loop.run_until_complete(
        task_runner.run_batch(tasks("SleepyWorkflow", {}, {}, {}, {"seconds": 30}), "1", min_done=3)
    )
    assert time.monotonic() - started < 5  # not the straggler's 30 s
    assert (outcome.dropped_tasks, outcome.failed_tasks, len(outcome.experiences)) == (1, 0, 3)
    assert {e.eid.task for e in outcome.experiences} == {"t:0", "t:1", "t:2"}


def test_over_rollout_keeps_the_finished_runs_of_a_partial_task(client, tiny_model_dir):
    config = {"over_rollout": {"ratio": 0.5, "wait_after_min": 0.3, "return_partial_tasks": True}}
    config["concurrent_mode"] = "asynchronous"
    task_runner = runner(client, tiny_model_dir, **config)
    rows = [{}, {"seconds": 0.05}]  # task 0 finishes; task 1's four runs... one of them hangs
    work = tasks("SleepyWorkflow", *rows, repeat_times=4)
    work[1].raw = {"seconds": 0.05}
    hanging = tasks("SleepyWorkflow", {"seconds": 30}, repeat_times=1)[0]
    hanging.index = 1
    outcome = task_runner.loop.run_until_complete(task_runner.run_batch([work[0], hanging], "1", min_done=1))
    assert outcome.dropped_tasks == 1
    assert [e.eid.task for e in outcome.experiences] == ["t:0"] * 4  # the straggler had finished nothing


def test_dynamic_timeout_cuts_a_run_at_ratio_times_the_recent_mean(client, tiny_model_dir):
    config = {"max_timeout": 60, "max_retry_times": 0, "dynamic_timeout": {"enable": True, "ratio": 3.0}}
    task_runner = runner(client, tiny_model_dir, **config)
    quick = task_runner.run(tasks("SleepyWorkflow", *[{"seconds": 0.2}] * 4), "1")  # warm-up: mean run ~0.2 s
    assert len(quick.experiences) == 4 and task_runner.task_timeout() < 3
    started = time.monotonic()
    slow = task_runner.run(tasks("SleepyWorkflow", {"seconds": 0.2}, {"seconds": 30}), "2")
    assert time.monotonic() - started < 5  # cut at ~3 x 0.2 s, not after max_timeout 60 s
    assert (slow.failed_tasks, slow.failed_runs, len(slow.experiences)) == (1, 1, 1)
    assert [(task, error.split(" after")[0]) for task, error in slow.errors] == [("t:1", "timed out")]


def test_runner_state_is_reported_every_interval_while_a_batch_runs(client, tiny_model_dir, caplog):
    with caplog.at_level("INFO", logger="trinity.explorer.runner"):
        runner(client, tiny_model_dir, runner_state_report_interval=1).run(
            tasks("SleepyWorkflow", {"seconds": 1.4}, {"seconds": 0.1}), "7"
        )
        runner(client, tiny_model_dir).run(tasks("SleepyWorkflow", {"seconds": 1.2}), "8")  # 0: no report
    reports = [r.getMessage() for r in caplog.records if r.getMessage().startswith("runner state")]
    assert reports == ["runner state: batch 7: 1 of 2 tasks done; 1 of 8 runners busy"]
