"""The data side of a short run: experience operators record what they did as metrics, the
pass rates the explorer observes reorder an ``offline_easy2hard`` taskset's next epoch, and a
task pipeline writes the taskset with Data-Juicer before the explorer reads it."""

from __future__ import annotations

import json
import math
import textwrap

from e2e_helpers import EXPLORE_ONLY, trinity_run, write_experiment, written_experiences
from test_run import assert_ok, metrics

SCORED_WORKFLOW = """
import json
from pathlib import Path
from trinity.plugin_api import hookimpl
from trinity_workflows.workflows import MathWorkflow

LOG = Path(__file__).with_name("order.jsonl")

class ScoredWorkflow(MathWorkflow):
    \"\"\"The math workflow on the real tiny model, rewarded by the row's known solve rate (the
    random model solves nothing); the first run of a row marked nan_first gets no valid reward.\"\"\"

    async def run_async(self):
        with LOG.open("a") as log:
            log.write(json.dumps([self.task.index, self.task.raw["question"]]) + "\\n")
        experiences = await super().run_async()
        for i, exp in enumerate(experiences):
            exp.reward = float("nan") if i == 0 and self.task.raw.get("nan_first") else self.task.raw["score"]
        return experiences

@hookimpl
def trinity_register_workflows(register):
    register("scored_workflow", ScoredWorkflow)
"""

ROWS = [  # the difficulty column calls row 0 easiest; the scores say the opposite
    {"question": "1+1", "answer": "2", "difficulty": 0, "score": 0.0},
    {"question": "1+2", "answer": "3", "difficulty": 1, "score": 0.4, "nan_first": True},
    {"question": "2+2", "answer": "4", "difficulty": 2, "score": 0.7},
    {"question": "2+3", "answer": "5", "difficulty": 3, "score": 1.0},
]


def scored_setup(tmp_path, rows):
    """The scored workflow as a plugin and ``rows`` as data/tasks.jsonl: (plugins, data) folders."""
    plugins, data = tmp_path / "plugins", tmp_path / "data"
    plugins.mkdir()
    data.mkdir()
    (plugins / "scored.py").write_text(textwrap.dedent(SCORED_WORKFLOW))
    (data / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return plugins, data


def test_pass_rates_reorder_the_next_epoch_and_operators_report_metrics(tmp_path, tiny_model_dir, monkeypatch):
    plugins, data = scored_setup(tmp_path, ROWS)
    pipeline = [
        {"name": "invalid_reward_filter"},
        {"name": "pass_rate_calculator"},
        {"name": "reward_filter", "args": {"threshold": 0.1}},
    ]
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        data,
        *EXPLORE_ONLY,
        "buffer.batch_size=1",
        "buffer.total_epochs=2",
        "algorithm.repeat_times=2",
        "synchronizer.sync_interval=1",  # each step is written (and fed back) before the next is read
        "buffer.explorer_input.default_workflow_type=scored_workflow",
        "buffer.explorer_input.taskset.data_selector.selector_type=offline_easy2hard",
        "buffer.explorer_input.taskset.data_selector.feature_keys=[difficulty]",
        f"data_processor.experience_pipeline.operators={json.dumps(pipeline)}",
    )
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugins))
    assert_ok(trinity_run(config))
    order = [json.loads(line)[0] for line in (plugins / "order.jsonl").read_text().splitlines()]
    assert order == [0, 1, 2, 3, 3, 2, 1, 0]  # epoch 2: easiest first by the observed pass rates
    steps = [m for m in metrics(tmp_path, "explorer") if "rollout/experience_count" in m]
    assert [m["pipeline/invalid_reward_filter/filtered_count"] for m in steps] == [0, 1, 0, 0, 0, 0, 1, 0]
    assert [m["pipeline/reward_filter/filtered_count"] for m in steps] == [2, 0, 0, 0, 0, 0, 0, 2]
    assert [m["pipeline/pass_rate_calculator/pass_rate/mean"] for m in steps[:4]] == [0.0, 0.4, 0.7, 1.0]
    assert (
        steps[1]["pipeline/pass_rate_calculator/valid_ratio"] == 1.0
        and steps[3]["pipeline/pass_rate_calculator/valid_ratio"] == 0.0
    )
    written = written_experiences(tmp_path, 10)  # per epoch: none of row 0, one run of row 1, both of rows 2 and 3
    assert len(written) == 10 and all(math.isfinite(e.reward) and e.reward >= 0.1 for e in written)
    assert {e.eid.task: e.info["pass_rate"] for e in written}["arithmetic:2"] == 0.7


def test_trinity_run_writes_the_taskset_with_the_task_pipeline_first(tmp_path, tiny_model_dir, monkeypatch):
    """Raw rows go through a real Data-Juicer recipe (a too-short question is filtered); the
    explorer then runs exactly the rows the pipeline wrote, into a taskset folder."""
    raw = [{**row, "question": f"What is {row['question']}?"} for row in ROWS]
    raw[2]["question"] = "?"
    plugins, data = scored_setup(tmp_path, raw)
    tasks = tmp_path / "tasks"
    task_pipeline = {
        "inputs": [str(data / "tasks.jsonl")],
        "num_process": 1,
        "operators": [{"name": "text_length_filter", "args": {"min_len": 5}}],
        "target_fields": ["question", "score"],
    }
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        data,
        *EXPLORE_ONLY,
        "buffer.batch_size=1",
        "buffer.total_epochs=1",
        "algorithm.repeat_times=2",
        "buffer.explorer_input.default_workflow_type=scored_workflow",
        "buffer.explorer_input.taskset.data_selector.selector_type=sequential",
        f"buffer.explorer_input.taskset.path={tasks}",
        f"data_processor.task_pipeline={json.dumps(task_pipeline)}",
    )
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugins))
    assert_ok(trinity_run(config, timeout=400))
    written = [json.loads(line) for line in (tasks / "output.jsonl").read_text().splitlines()]
    assert [row["question"] for row in written] == ["What is 1+1?", "What is 1+2?", "What is 2+3?"]
    ran = [json.loads(line)[1] for line in (plugins / "order.jsonl").read_text().splitlines()]
    assert ran == ["What is 1+1?", "What is 1+2?", "What is 2+3?"]
