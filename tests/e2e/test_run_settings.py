"""The run-level settings of the configuration guide, as a run's files show them: logs per
node and level, the explorer's environment variables, evaluation on start-up and every
``eval_interval`` steps, the Ray timeline, a replay buffer on a sqlite queue; and a run on a machine where a ``ray start`` cluster died unstopped."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sqlite3
import tempfile
import textwrap
from pathlib import Path

import pytest
from e2e_helpers import trinity_run, write_experiment
from omegaconf import OmegaConf

from helpers.ports import free_port
from trinity.monitor.console import read_jsonl

JOB = Path("ckpt") / "quickstart" / "arithmetic"

ENV_WORKFLOW = """
import gc
import os
from pathlib import Path
from trinity.plugins import hookimpl
from trinity_workflows.workflows import MathWorkflow

class EnvWorkflow(MathWorkflow):
    \"\"\"The math workflow, noting what TRINITY_E2E_MARK is where it runs, its niceness, and
    how many objects its process has frozen out of the cyclic GC (one line per run).\"\"\"

    async def run_async(self):
        Path(__file__).with_name(f"seen_{self.task.index}").write_text(os.environ.get("TRINITY_E2E_MARK", "unset"))
        Path(__file__).with_name(f"nice_{self.task.index}").write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
        with Path(__file__).with_name("frozen").open("a") as log:
            log.write(f"{gc.get_freeze_count()}\\n")
        return await super().run_async()

@hookimpl
def trinity_register_workflows(register):
    register("env_workflow", EnvWorkflow)
"""


@pytest.fixture
def dead_cluster_record(monkeypatch):
    """Ray's temp dir (short: Ray's socket paths live under it) recording a cluster that is gone,
    as a ``ray start --block`` ended by a signal leaves it."""
    ray_tmpdir = Path(tempfile.mkdtemp(prefix="raytmp", dir="/tmp"))
    (ray_tmpdir / "ray").mkdir()
    (ray_tmpdir / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmpdir))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield
    shutil.rmtree(ray_tmpdir, ignore_errors=True)


def test_a_run_with_the_default_folders_writes_only_checkpoints_into_its_working_directory(
    tmp_path, tiny_model_dir, arithmetic_data
):
    """No ``checkpoint_root_dir``, ``project`` or ``name``: the job folder is
    ``./checkpoints/Trinity-RFT/rft`` and nothing else appears in the working directory (about 15 s)."""
    config_path = write_experiment(
        tmp_path / "cwd", tiny_model_dir, arithmetic_data, "buffer.batch_size=4", "algorithm.repeat_times=2"
    )
    config = OmegaConf.load(config_path)
    for key in ("checkpoint_root_dir", "project", "name"):
        del config[key]
    OmegaConf.save(config, config_path)
    result = trinity_run(config_path, "buffer.total_steps=1", timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    assert sorted(p.name for p in config_path.parent.iterdir()) == ["checkpoints", "experiment.yaml"]
    job = config_path.parent / "checkpoints" / "Trinity-RFT" / "rft"
    assert read_jsonl(job / "monitor" / "explorer.jsonl") and (job / "meta").is_dir()


def test_logs_env_vars_and_evaluation_follow_the_run_settings(
    tmp_path, tiny_model_dir, arithmetic_data, monkeypatch, dead_cluster_record
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "env_workflow.py").write_text(textwrap.dedent(ENV_WORKFLOW))
    eval_set = (
        f"{{name: arith_eval, storage_type: file, path: {arithmetic_data / 'tasks.jsonl'},"
        " format: {prompt_key: question, response_key: answer}}"
    )
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "buffer.batch_size=4",
        "algorithm.repeat_times=2",
        "buffer.total_steps=2",
        "buffer.explorer_input.default_workflow_type=env_workflow",
        "log.level=WARNING",
        "log.group_by_node=true",
        "explorer.env_vars={TRINITY_E2E_MARK: from-config}",
        "explorer.eval_on_startup=true",
        "explorer.eval_interval=1",
        f"buffer.explorer_input.eval_tasksets=[{eval_set}]",
        "monitor.enable_ray_timeline=true",
        f"buffer.trainer_input.experience_buffer.path={tmp_path / 'replay.db'}",
        "buffer.trainer_input.experience_buffer.replay_buffer={enable: true, reuse_cooldown_time: 1.0}",
    )
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugins))
    result = trinity_run(config, timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "is gone: starting a local Ray" in result.stderr  # not minutes of retrying the dead cluster

    # log.group_by_node: <job dir>/log/<node ip>/<actor name>.log; log.level WARNING: no INFO lines
    (node_dir,) = (tmp_path / JOB / "log").iterdir()
    ipaddress.ip_address(node_dir.name)
    assert sorted(p.name for p in node_dir.iterdir()) == ["explorer.log", "trainer.log"]
    assert " INFO " not in (node_dir / "explorer.log").read_text()

    # explorer.env_vars: set where the workflows run
    seen = {p.read_text() for p in plugins.glob("seen_*")}
    assert seen == {"from-config"}

    # the Ray that trinity run starts runs the roles at its own priority, not Ray's worker default of +15
    assert {p.read_text() for p in plugins.glob("nice_*")} == {str(os.getpriority(os.PRIO_PROCESS, 0))}
    # after its first step, the explorer froze what it holds (modules, model, engine) out of the
    # cyclic GC's full collections: the workflows of the startup eval and step 1 ran before that
    frozen = [int(line) for line in (plugins / "frozen").read_text().split()]
    assert frozen[0] == 0 and frozen[-1] > 100_000, frozen

    # eval_on_startup (step 0) and eval_interval 1 (after steps 1 and 2): the whole eval taskset each time
    evals = [r for r in read_jsonl(tmp_path / JOB / "monitor" / "explorer.jsonl") if "time/eval/arith_eval" in r]
    assert [r["step"] for r in evals] == [0, 1, 2]
    assert all(0.0 <= r["eval/arith_eval/accuracy/mean@1"] <= 1.0 for r in evals), evals[0].keys()

    # monitor.enable_ray_timeline: Chrome trace events of the run's actor calls, the roles' runs among them
    events = json.loads((tmp_path / JOB / "monitor" / "timeline.json").read_text())
    assert all({"name", "cat", "ph", "pid", "tid", "ts"} <= event.keys() for event in events)
    roles = {event["cat"] for event in events if event["ph"] == "X" and event["dur"] > 0}
    assert {"task::ExplorerRole.call", "task::TrainerRole.call"} <= roles, sorted(roles)

    # the replay buffer: the explorer wrote 2 steps x 4 tasks x 2 runs; the trainer's 2 batches of 8
    # were read through the replay table, which keeps each experience's use count. Its second batch
    # is step 1's again (back after the 1 s cooldown) unless step 2's arrived first.
    with sqlite3.connect(tmp_path / "replay.db") as db:
        written = db.execute("SELECT count(*) FROM experience_buffer_exp").fetchone()[0]
        replayed, reads = db.execute("SELECT count(*), sum(use_count) FROM experience_buffer_replay").fetchone()
    assert written == 16 and reads == 16 and replayed in (8, 16), (written, replayed, reads)
