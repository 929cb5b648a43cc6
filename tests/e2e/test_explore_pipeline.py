"""The explorer's pipeline: the batches of a sync interval overlap and are written in step order;
``fully_async`` runs ahead of the trainer with at most ``max_inflight_batches`` batches in flight
and at most ``sync_offset`` versions of staleness."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from e2e_helpers import EXPLORE_ONLY, trinity_run, write_experiment, written_experiences
from test_run import assert_ok, metrics

TIMED_WORKFLOW = """
import asyncio
import json
import time
from pathlib import Path
from trinity.plugin_api import hookimpl
from trinity_workflows.workflows import MathWorkflow

LOG = Path(__file__).with_name("runs.jsonl")

class TimedWorkflow(MathWorkflow):
    \"\"\"The math workflow; the first task of batch 1 takes 3 s more. Logs each run's batch, start and end.\"\"\"

    async def run_async(self):
        start = time.time()
        if self.task.raw.get("slow_batch") == 1 and self.task.index == 0:
            await asyncio.sleep(3)
        experiences = await super().run_async()
        with LOG.open("a") as log:
            log.write(json.dumps({"index": self.task.index, "start": start, "end": time.time()}) + "\\n")
        return experiences

@hookimpl
def trinity_register_workflows(register):
    register("timed_workflow", TimedWorkflow)
"""


def test_the_batches_of_a_sync_interval_overlap_and_are_written_in_order(
    tmp_path, tiny_model_dir, arithmetic_data, monkeypatch
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "timed.py").write_text(textwrap.dedent(TIMED_WORKFLOW))
    rows = [json.loads(line) for line in (arithmetic_data / "tasks.jsonl").read_text().splitlines()][:8]
    data = tmp_path / "data"
    data.mkdir()
    (data / "tasks.jsonl").write_text("".join(json.dumps({**row, "slow_batch": 1}) + "\n" for row in rows))
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        data,
        *EXPLORE_ONLY,
        "buffer.batch_size=2",
        "buffer.total_steps=4",
        "algorithm.repeat_times=2",
        "synchronizer.sync_interval=4",  # the four batches of one interval run together
        "explorer.runner_per_model=8",
        "buffer.explorer_input.default_workflow_type=timed_workflow",
        "buffer.explorer_input.taskset.data_selector.selector_type=sequential",
    )
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugins))
    assert_ok(trinity_run(config))
    runs = [json.loads(line) for line in (plugins / "runs.jsonl").read_text().splitlines()]
    slow = next(r for r in runs if r["index"] == 0)
    later = [r for r in runs if r["index"] >= 2]  # batches 2-4 (rows 2-7)
    assert len(later) == 6 and all(r["end"] < slow["end"] for r in later), "later batches waited for the slow task"
    steps = [r["step"] for r in metrics(tmp_path, "explorer") if "rollout/experience_count" in r]
    assert steps == [1, 2, 3, 4]  # written and logged in step order all the same
    batches = [int(e.eid.batch) for e in written_experiences(tmp_path, 16)]
    assert batches == sorted(batches) and set(batches) == {1, 2, 3, 4}


def test_fully_async_runs_ahead_of_the_trainer_within_max_inflight_batches(tmp_path, tiny_model_dir, arithmetic_data):
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "buffer.batch_size=4",
        "buffer.total_steps=8",
        "algorithm.repeat_times=4",
        "synchronizer.sync_style=fully_async",
        "synchronizer.sync_offset=1",
        "explorer.max_inflight_batches=2",
        "trainer.save_interval=0",
    )
    assert_ok(trinity_run(config))
    explorer = [r for r in metrics(tmp_path, "explorer") if "rollout/experience_count" in r]
    trainer = metrics(tmp_path, "trainer")
    assert [r["step"] for r in explorer] == list(range(1, 9)) and len(trainer) == 8
    assert max(r["rollout/inflight_batches"] for r in explorer) == 2  # never more in flight
    assert max(r["rollout/staleness/max"] for r in explorer) == 1, "the explorer ran not, or too far, ahead"
    assert all(r["rollout/staleness/min"] >= 0 for r in explorer)


def test_a_taskset_position_saved_mid_interval_is_the_last_written_batch(tmp_path, tiny_model_dir, arithmetic_data):
    """Batches are read ahead of their writes: the meta file names the written step and the
    taskset position right after that step's read, so a restart reads the next batch."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        *EXPLORE_ONLY,
        "buffer.batch_size=3",
        "buffer.total_steps=2",
        "algorithm.repeat_times=2",
        "synchronizer.sync_interval=2",
        "buffer.explorer_input.taskset.data_selector.selector_type=sequential",
    )
    assert_ok(trinity_run(config))
    meta = json.loads((tmp_path / "ckpt" / "quickstart" / "arithmetic" / "meta" / "explorer.json").read_text())
    assert meta["step"] == 2 and meta["tasksets"][0]["index"] == 6 and meta["tasksets"][0]["steps"] == 2
    assert_ok(trinity_run(config, "buffer.total_steps=3"))  # resumed: one more batch, rows 6-8
    meta = json.loads((tmp_path / "ckpt" / "quickstart" / "arithmetic" / "meta" / "explorer.json").read_text())
    assert meta["step"] == 3 and meta["tasksets"][0]["index"] == 9
    assert Path(tmp_path / "ckpt").is_dir()


def test_partial_rollout_marks_each_token_with_its_weights_version(tmp_path, tiny_model_dir, arithmetic_data):
    """fully_async with partial rollout: syncs land while long responses are sampled; the
    experiences of an interrupted response carry two versions, in order, and the trainer's
    metrics count its tokens by their own staleness (about 14 s in a warm Ray). Responses are long
    (384 tokens, about 1 s a batch) and steps small (4 rows): a step's train-and-sync, 0.1-0.3 s,
    lands inside the next batch's sampling even on a loaded machine."""
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        arithmetic_data,
        "buffer.batch_size=2",
        "buffer.total_steps=4",
        "algorithm.repeat_times=2",
        "buffer.trainer_input.experience_buffer.storage_type=sql",  # read back below
        "synchronizer.sync_style=fully_async",
        "synchronizer.sync_offset=1",
        "synchronizer.partial_rollout=true",
        "explorer.max_inflight_batches=2",
        "explorer.rollout_model.ignore_eos=true",
        "model.max_response_tokens=384",
        "trainer.save_interval=0",
    )
    assert_ok(trinity_run(config))
    experiences = written_experiences(tmp_path, 16, timeout=10)
    assert len(experiences) == 16
    for exp in experiences:
        versions = exp.info["token_versions"]
        assert len(versions) == exp.response_length and versions == sorted(versions)
        assert versions[0] == exp.model_version
    split = [exp for exp in experiences if exp.info["token_versions"][-1] > exp.model_version]
    assert split, "no sync interrupted a response"
    trainer = metrics(tmp_path, "trainer")
    assert max(r["partial_rollout_fraction"] for r in trainer) > 0
    assert all(r["staleness_token_mean"] <= r["staleness_mean"] for r in trainer)
