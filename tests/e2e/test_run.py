"""``trinity run`` end to end on a tiny model: modes, sync, resume, failures, stages."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from e2e_helpers import EXPLORE_ONLY, frozen_at, trinity_run, trinity_start, write_experiment

from helpers.ray_cluster import ray_head
from helpers.role_processes import RUN_TAG, role_pids
from trinity.common.files import read_json
from trinity.monitor.console import read_jsonl
from trinity.monitor.learnable import reward_trend

JOB = Path("ckpt") / "quickstart" / "arithmetic"


def metrics(tmp_path: Path, role: str, job: Path = JOB) -> list[dict]:
    return read_jsonl(tmp_path / job / "monitor" / f"{role}.jsonl")


def job_log(tmp_path: Path, job: Path = JOB) -> str:
    """Every role's log file of the job (``trinity run`` shows progress, not their lines)."""
    return "".join(path.read_text() for path in sorted((tmp_path / job / "log").rglob("*.log")))


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"


@pytest.mark.slow
def test_quickstart_stages_learn_arithmetic(tmp_path, tiny_model_dir, arithmetic_data):
    """SFT warm-up then GRPO in mode both: the rollout reward rises by a clear margin over the
    warm model's, measured before any update (0.719 at the shipped seeds). The GRPO stage takes 75
    of the quickstart's 200 steps (CI's time), its lr warm-up included: its last steps score
    about 0.91 by then (0.907-0.925 over seeds 0, 1, 2, 42)."""
    config = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, "buffer.total_epochs=48", stages=True)
    result = trinity_run(config)
    assert_ok(result)
    sft_job, grpo_job = JOB / "sft_warmup", JOB / "grpo"
    assert read_json(tmp_path / sft_job / "meta" / "stage_done.json")["stage"] == 0
    assert read_json(tmp_path / grpo_job / "meta" / "stage_done.json")["stage"] == 1
    start, end = reward_trend(read_jsonl(tmp_path / grpo_job / "monitor" / "explorer.jsonl"))
    assert end - start >= 0.15, (start, end)
    assert "reward:" in result.stdout and "final model:" in result.stdout
    # Progress, not walls: a line per role every console_interval, no per-step log lines.
    output = (result.stdout + result.stderr).splitlines()
    assert len(output) < 60, "\n".join(output)
    assert any(re.match(r"\[explorer\] step \d+/75 \(\d+%\)", line) for line in output), result.stdout
    assert any(re.match(r"\[trainer\] step 60/60 \(100%\)", line) for line in output), result.stdout
    # GRPO's trainer takes one step per explorer step (one run, train batch = a step's experiences)
    assert any(re.match(r"\[trainer\] step \d+/75 \(\d+%\)", line) for line in output), result.stdout
    assert "trinity.console" not in result.stdout + result.stderr
    # The GRPO stage started from the SFT stage's final weights.
    sft_final = read_json(tmp_path / sft_job / "meta" / "stage_done.json")["model_path"]
    assert Path(sft_final).is_dir()
    # Run again: both stages are finished and skipped.
    again = trinity_run(config)
    assert_ok(again)
    assert "finished in" not in again.stdout


def test_ppo_with_critic_runs(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "algorithm.algorithm_type=ppo",
        "algorithm.repeat_times=2",
        "buffer.batch_size=4",
        "buffer.total_steps=3",
        "trainer.save_interval=2",
    )
    assert_ok(trinity_run(config))
    trainer = metrics(tmp_path, "trainer")
    assert [r["step"] for r in trainer] == [1, 2, 3]
    assert all("critic/vf_loss" in r and "actor/pg_loss" in r for r in trainer)
    assert (tmp_path / JOB / "global_step_2").is_dir() and (tmp_path / JOB / "global_step_3").is_dir()
    explorer = metrics(tmp_path, "explorer")
    assert [r["rollout/experience_count"] for r in explorer] == [8, 8, 8]


def test_async_explorer_and_trainer_processes_exchange_data_and_weights(tmp_path, tiny_model_dir, arithmetic_data):
    """mode explore and mode train as two processes: sqlite-backed queue, checkpoint sync."""
    common = (
        "synchronizer.sync_method=checkpoint",
        "buffer.batch_size=4",
        "buffer.train_batch_size=16",  # mode train reads its own data: given, not derived (as Trinity-RFT)
        "buffer.total_steps=4",
        "algorithm.repeat_times=4",
    )
    explore = write_experiment(tmp_path / "e", tiny_model_dir, arithmetic_data, "mode=explore", *common)
    train = write_experiment(tmp_path / "t", tiny_model_dir, arithmetic_data, "mode=train", *common)
    # Both processes must name the same experiment directory (the buffer and weights live there).
    train.write_text(train.read_text().replace(str(tmp_path / "t" / "ckpt"), str(tmp_path / "e" / "ckpt")))
    trainer = trinity_start(train, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    explorer = trinity_run(explore)
    assert_ok(explorer)
    out, _ = trainer.communicate(timeout=300)
    assert trainer.returncode == 0, out[-5000:]
    job = tmp_path / "e" / JOB
    trained = read_jsonl(job / "monitor" / "trainer.jsonl")
    assert [r["step"] for r in trained] == [1, 2, 3, 4]
    assert read_json(job / "sync" / "latest.json")["version"] == 4
    explored = read_jsonl(job / "monitor" / "explorer.jsonl")
    assert sum(r["rollout/experience_count"] for r in explored) == 4 * 16


GATED_WORKFLOW = """
import asyncio
from pathlib import Path
from trinity.plugins import hookimpl
from trinity_workflows.workflows import MathWorkflow

GATE = Path(__file__).with_name("open")

class GatedWorkflow(MathWorkflow):
    \"\"\"The math workflow, once the test opens the gate: an explorer that runs but has not finished.\"\"\"

    async def run_async(self):
        while not GATE.exists():
            await asyncio.sleep(0.1)
        return await super().run_async()

@hookimpl
def trinity_register_workflows(register):
    register("gated_workflow", GatedWorkflow)
"""


def registered_writers(buffer: Path) -> set[str]:
    """The writers that have opened the sqlite experience buffer ``buffer``."""
    if not buffer.is_file():
        return set()
    with contextlib.closing(sqlite3.connect(buffer)) as db:
        try:
            return {name for (name,) in db.execute("SELECT name FROM experience_buffer_writers")}
        except sqlite3.OperationalError:  # no table yet
            return set()


def test_a_second_explorer_joins_a_running_async_pair(tmp_path, tiny_model_dir, arithmetic_data, monkeypatch):
    """A train process and an explore process run; a second explorer (another explorer.name)
    joins, runs and finishes while the first is still exploring; the trainer trains on both."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "gated.py").write_text(GATED_WORKFLOW)
    common = ("synchronizer.sync_method=checkpoint", "buffer.batch_size=4", "algorithm.repeat_times=4")
    common += ("buffer.train_batch_size=16",)
    first_steps, second_steps = 3, 2  # 16 experiences a step, on both sides
    train = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "mode=train",
        *common,
        f"buffer.total_steps={first_steps + second_steps}",
    )
    first = write_experiment(
        tmp_path / "first",
        tiny_model_dir,
        arithmetic_data,
        "mode=explore",
        *common,
        f"buffer.total_steps={first_steps}",
        "buffer.explorer_input.default_workflow_type=gated_workflow",
    )
    second = write_experiment(
        tmp_path / "second",
        tiny_model_dir,
        arithmetic_data,
        "mode=explore",
        *common,
        f"buffer.total_steps={second_steps}",
        "explorer.name=explorer_2",
    )
    for config in (first, second):  # one experiment directory: the buffer and the weights live there
        config.write_text(config.read_text().replace(str(config.parent / "ckpt"), str(tmp_path / "ckpt")))
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugins))  # the first explorer's workflow
    trainer = trinity_start(train, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    explorer = trinity_start(first, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    buffer = tmp_path / JOB / "buffer" / "experience_buffer.db"
    deadline = time.monotonic() + 240
    while "explorer" not in registered_writers(buffer):  # the first explorer has opened its writer
        assert trainer.poll() is None and explorer.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    assert_ok(trinity_run(second))  # the first explorer waits at its gate meanwhile
    assert trainer.poll() is None and explorer.poll() is None
    (plugins / "open").touch()
    for process in (explorer, trainer):
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out[-5000:]
    assert len(metrics(tmp_path, "explorer")) == first_steps
    assert len(metrics(tmp_path, "explorer_2")) == second_steps
    # The trainer's steps needed both explorers' experiences, and it ended only when both had.
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == list(range(1, first_steps + second_steps + 1))


def test_runs_join_the_ray_cluster_that_ray_address_names_and_leave_it_clean(tmp_path, tiny_model_dir, arithmetic_data):
    """``cluster.ray_address``: the run connects to that cluster instead of starting one, and
    removes its actors at the end, so the next run of the same experiment there starts clean."""
    with ray_head() as address:
        changes = (f"cluster.ray_address={address}", "buffer.batch_size=4", "algorithm.repeat_times=2")
        first = trinity_run(
            write_experiment(tmp_path, tiny_model_dir, arithmetic_data, *changes, "buffer.total_steps=1"), "--verbose"
        )
        assert_ok(first)
        assert "[trainer] step:1 - " in first.stdout + first.stderr  # --verbose: the roles' own lines
        port = address.rsplit(":", 1)[1]  # Ray names the host by the node's IP
        assert re.search(rf"Connecting to existing Ray cluster at address: \S+:{port}\b", first.stderr)
        assert "Started a local Ray instance" not in first.stdout + first.stderr
        # Same names (explorer, trainer, weight store, queue) in the same cluster: no clash.
        second = trinity_run(
            write_experiment(tmp_path, tiny_model_dir, arithmetic_data, *changes, "buffer.total_steps=2")
        )
        assert_ok(second)
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2]


def test_trainer_killed_mid_run_resumes_from_its_checkpoint(tmp_path, tiny_model_dir, arithmetic_data, monkeypatch):
    common = (
        "synchronizer.sync_method=checkpoint",
        "buffer.batch_size=4",
        "buffer.train_batch_size=16",
        "algorithm.repeat_times=4",
        "buffer.total_steps=6",
    )
    explore = write_experiment(tmp_path, tiny_model_dir, arithmetic_data, "mode=explore", *common)
    assert_ok(trinity_run(explore))  # fill the buffer: 6 steps of 16 experiences
    train = write_experiment(
        tmp_path, tiny_model_dir, arithmetic_data, "mode=train", "trainer.save_interval=2", *common
    )
    meta = tmp_path / JOB / "meta" / "trainer.json"
    monkeypatch.setenv(RUN_TAG, str(tmp_path))  # its actors, apart from a suite's beside it
    # Frozen once its first checkpoint (step 2) is committed, so that the kill lands mid-run: the
    # tiny model's 4 remaining steps take less time than finding the actor's process.
    frozen = frozen_at("trainer.after_commit")
    first = trinity_start(train, env=frozen, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (meta.is_file() and read_json(meta)["step"] >= 2):
        assert first.poll() is None and time.monotonic() < deadline, "the trainer never saved a checkpoint"
        time.sleep(0.1)
    # The trainer actor first: Ray's workers have process groups of their own, and a trainer that
    # outlived its raylet would go on training (and saving) until it noticed.
    trainers = role_pids(str(tmp_path), "TrainerRole")
    assert trainers, "no trainer actor process to kill"
    for pid in trainers:
        os.kill(pid, signal.SIGKILL)
    os.killpg(first.pid, signal.SIGKILL)  # the CLI and the Ray processes of its group
    first.wait()
    killed_at = read_json(meta)["step"]
    assert killed_at == 2, f"killed at step {killed_at}, not where the trainer froze"
    assert_ok(trinity_run(train))
    assert read_json(meta)["step"] == 6
    steps = [r["step"] for r in metrics(tmp_path, "trainer")]
    resumed = steps[steps.index(killed_at + 1) if killed_at + 1 in steps else len(steps) :]
    # After the restart, training went on from the checkpoint's step to the end, once each.
    assert steps[-(6 - killed_at) :] == list(range(killed_at + 1, 7))
    assert resumed


def test_failing_and_hanging_workflows_are_retried_and_the_run_goes_on(
    tmp_path, tiny_model_dir, arithmetic_data, monkeypatch
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "flaky.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            import time
            from pathlib import Path
            from trinity.plugins import hookimpl
            from trinity_workflows.workflows import MathWorkflow

            MARKS = Path(__file__).parent

            class FlakyWorkflow(MathWorkflow):
                \"\"\"Task 0 hangs in a worker thread every time; the others fail on their first attempt.\"\"\"

                async def run_async(self):
                    if self.task.index == 0:
                        await asyncio.to_thread(time.sleep, 30)
                    mark = MARKS / f"tried_{self.task.index}"
                    if not mark.exists():
                        mark.write_text("once")
                        raise RuntimeError("flaky on purpose")
                    return await super().run_async()

            @hookimpl
            def trinity_register_workflows(register):
                register("flaky_workflow", FlakyWorkflow)
            """
        )
    )
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *EXPLORE_ONLY,
        "buffer.batch_size=4",
        "buffer.total_steps=1",
        "buffer.explorer_input.default_workflow_type=flaky_workflow",
        "buffer.explorer_input.taskset.data_selector.selector_type=sequential",
        "explorer.max_timeout=8",  # generous: the other tasks must finish in time on a loaded machine
        "explorer.max_retry_times=1",
    )
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugins))
    result = trinity_run(config)
    assert_ok(result)
    (record,) = metrics(tmp_path, "explorer")
    assert record["rollout/failed_tasks"] == 1
    assert record["rollout/experience_count"] == 3 * 8
    log = (tmp_path / JOB / "log" / "explorer.log").read_text()
    assert "task arithmetic:0 (flaky_workflow), attempt 2/2: timed out after 8 s" in log
    assert "flaky on purpose" in log


def test_an_auxiliary_model_that_cannot_start_fails_the_run_naming_its_key(tmp_path, tiny_model_dir, arithmetic_data):
    """The explorer's constructor raises; the run's error still says which model and why."""
    missing = tmp_path / "no_judge"
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *EXPLORE_ONLY,
        f"explorer.auxiliary_models=[{{model_path: {missing}, engine_type: transformers}}]",
    )
    result = trinity_run(config)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    cause = r"explorer failed: EngineStartError: explorer\.auxiliary_models\[0\]: \w+: .*" + re.escape(str(missing))
    assert re.search(cause, output), output[-3000:]


EXPERT = "buffer.trainer_input.auxiliary_buffers.sft_dataset"


def mix_experiment(tmp_path: Path, model: Path, data: Path, *changes: str) -> Path:
    """mix on 4 tasks x 4 samples a step, with the quickstart's SFT answers as its expert buffer:
    16 rollouts and 16 expert rows a step (expert_data_ratio 0.5)."""
    return write_experiment(
        tmp_path,
        model,
        data,
        "algorithm.algorithm_type=mix",
        "algorithm.repeat_times=4",
        "buffer.batch_size=4",
        "buffer.train_batch_size=32",
        f"{EXPERT}.storage_type=file",
        f"{EXPERT}.path={data / 'sft.jsonl'}",
        f"{EXPERT}.format.prompt_type=plaintext",
        f"{EXPERT}.format.prompt_key=question",
        f"{EXPERT}.format.response_key=answer",
        *changes,
    )


def test_mix_trains_on_rollouts_and_expert_data(tmp_path, tiny_model_dir, arithmetic_data):
    """algorithm mix: half of each batch comes from the auxiliary SFT dataset, and its position is
    saved with the checkpoint."""
    config = mix_experiment(
        tmp_path, tiny_model_dir, arithmetic_data, "buffer.total_steps=2", f"{EXPERT}.total_epochs=10"
    )
    assert_ok(trinity_run(config))
    trainer = metrics(tmp_path, "trainer")
    assert [r["step"] for r in trainer] == [1, 2]
    assert all(r["experience_count"] == 32 and r["expert_fraction"] == 0.5 for r in trainer)
    assert all("actor/expert/sft_loss" in r and "actor/usual/pg_loss" in r for r in trainer), trainer[0].keys()
    assert read_json(tmp_path / JOB / "meta" / "trainer.json")["expert_reader"]["served"] == 32


def test_a_trainer_that_ends_first_stops_the_explorer_with_the_reason(tmp_path, tiny_model_dir, arithmetic_data):
    """mix's 25 expert rows, read once, end the training at step 2 of 8: the run ends then, saying
    why and which key to raise, instead of the explorer waiting ``sync_timeout`` for version 3."""
    config = mix_experiment(  # read once, the 25 expert rows make two steps
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "buffer.total_steps=8",
        "synchronizer.sync_timeout=600",
        "trainer.save_interval=0",
    )
    started = time.monotonic()
    result = trinity_run(config)
    assert_ok(result)
    assert time.monotonic() - started < 300  # not the 600 s of sync_timeout
    output = result.stdout + result.stderr
    assert f"raise {EXPERT}.total_epochs to train longer" in output, output[-3000:]
    assert "exploring stops after step 3: the trainer finished at version 2" in output, output[-3000:]
    assert [r["step"] for r in metrics(tmp_path, "trainer")] == [1, 2]
