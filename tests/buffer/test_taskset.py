"""Tasksets from real files: formats, per-row overrides, epochs and steps, resume, bad data."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trinity.buffer import BadDataError, EndOfTaskset, TasksetReader, load_rows
from trinity.config.schema import DataSelectorConfig, FormatConfig, GenerationConfig, TasksetConfig


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def questions(n: int, **extra) -> list[dict]:
    return [{"question": f"q{i}", "answer": str(i), "difficulty": (i * 7) % n, **extra} for i in range(n)]


def taskset(path: Path, **overrides) -> TasksetConfig:
    values = dict(
        name="math",
        storage_type="file",
        path=str(path),
        format=FormatConfig(prompt_key="question", response_key="answer"),
        batch_size=2,
        total_epochs=1,
        repeat_times=4,
        default_workflow_type="math_workflow",
        default_reward_fn_type="math_reward",
    )
    return TasksetConfig(**{**values, **overrides})


def answers(tasks) -> list[int]:
    return [int(t.raw["answer"]) for t in tasks]


def drain(reader: TasksetReader) -> list[list[int]]:
    batches = []
    while True:
        try:
            batches.append(answers(reader.read_batch()))
        except EndOfTaskset:
            return batches


def test_tasks_carry_the_taskset_settings(tmp_path):
    rows = questions(3)
    rows[1]["wf"], rows[2]["rf"] = "countdown_workflow", "format_reward"
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", rows),
        format=FormatConfig(prompt_key="question", workflow_key="wf", reward_fn_key="rf", system_prompt="Be brief."),
        rollout_args=GenerationConfig(temperature=0.7),
        workflow_args={"max_turns": 2},
        batch_size=3,
    )
    reader = TasksetReader(storage)
    tasks = reader.read_batch()
    assert len(reader) == 3
    assert [t.workflow_type for t in tasks] == ["math_workflow", "countdown_workflow", "math_workflow"]
    assert [t.reward_fn_type for t in tasks] == ["math_reward", "math_reward", "format_reward"]
    first = tasks[0]
    assert first.rollout_args == {"temperature": 0.7}
    assert first.workflow_args == {"max_turns": 2}
    assert first.format["prompt_key"] == "question" and first.format["system_prompt"] == "Be brief."
    assert (first.repeat_times, first.taskset_name, first.index, first.is_eval) == (4, "math", 0, False)
    assert first.task_id == "math:0"


def test_epochs_run_on_across_batches(tmp_path):
    reader = TasksetReader(taskset(write_jsonl(tmp_path / "t.jsonl", questions(5)), batch_size=3, total_epochs=2))
    assert drain(reader) == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]


def test_total_steps_wins_over_epochs(tmp_path):
    reader = TasksetReader(taskset(write_jsonl(tmp_path / "t.jsonl", questions(3)), total_steps=4, total_epochs=1))
    assert drain(reader) == [[0, 1], [2, 0], [1, 2], [0, 1]]


def test_refill_batches_do_not_count_as_steps(tmp_path):
    """Dynamic sampling's extra batches belong to the step just read, even its last."""
    reader = TasksetReader(taskset(write_jsonl(tmp_path / "t.jsonl", questions(3)), total_steps=2, total_epochs=9))
    reader.read_batch()
    reader.read_batch()
    assert len(reader.read_batch(refill=True)) == reader.batch_size
    with pytest.raises(EndOfTaskset, match="total_steps"):
        reader.read_batch()
    assert reader.state_dict()["steps"] == 2


def test_eval_taskset_reads_everything_once_in_order(tmp_path):
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", questions(5)),
        is_eval=True,
        total_steps=1,
        default_eval_workflow_type="math_eval_workflow",
        data_selector=DataSelectorConfig(selector_type="shuffle"),
    )
    reader = TasksetReader(storage)
    batches = drain(reader)
    assert batches == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("selector", ["sequential", "shuffle", "random"])
def test_resume_continues_at_the_next_row(tmp_path, selector):
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", questions(7)),
        batch_size=3,
        total_epochs=3,
        data_selector=DataSelectorConfig(selector_type=selector, seed=5),
    )
    expected = drain(TasksetReader(storage))
    first = TasksetReader(storage)
    head = [answers(first.read_batch()) for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))  # as the explorer's checkpoint meta stores it
    resumed = TasksetReader(storage)
    resumed.load_state_dict(state)
    assert head + drain(resumed) == expected
    assert len(expected) == 7


def test_shuffle_is_seeded_and_new_each_epoch(tmp_path):
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", questions(20)),
        batch_size=20,
        total_epochs=2,
        data_selector=DataSelectorConfig(selector_type="shuffle", seed=1),
    )
    epochs = drain(TasksetReader(storage))
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(20))
    assert epochs[0] != epochs[1] and epochs[0] != list(range(20))
    assert drain(TasksetReader(storage)) == epochs
    storage.data_selector.seed = 2
    assert drain(TasksetReader(storage)) != epochs


def test_offline_easy2hard_sorts_by_the_feature_keys(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", questions(5))  # difficulty = (7 i) % 5: 0, 2, 4, 1, 3
    order = drain(
        TasksetReader(
            taskset(
                path,
                batch_size=5,
                data_selector=DataSelectorConfig(selector_type="offline_easy2hard", feature_keys=["difficulty"]),
            )
        )
    )
    assert order == [[0, 3, 1, 4, 2]]
    descending = DataSelectorConfig(
        selector_type="offline_easy2hard", feature_keys=["difficulty"], kwargs={"descending": True}
    )
    assert drain(TasksetReader(taskset(path, batch_size=5, data_selector=descending))) == [[2, 4, 1, 3, 0]]


def test_easy2hard_without_the_feature_names_the_file(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", questions(3))
    config = DataSelectorConfig(selector_type="offline_easy2hard", feature_keys=["score"])
    with pytest.raises(BadDataError, match=rf"{path}.*row 1 has no numeric \['score'\]"):
        TasksetReader(taskset(path, data_selector=config))


def test_difficulty_based_follows_the_pass_rates(tmp_path):
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", questions(20)),
        batch_size=5,
        total_steps=40,
        data_selector=DataSelectorConfig(selector_type="difficulty_based", kwargs={"target": 0.5, "tau": 0.05}),
    )
    reader = TasksetReader(storage)
    reader.update_pass_rates(list(range(10)), [1.0] * 10)  # rows 0-9 solved every time: too easy
    reader.update_pass_rates(list(range(10, 20)), [0.5] * 10)
    picked = [t.index for _ in range(20) for t in reader.read_batch()]
    assert sum(i >= 10 for i in picked) > 0.9 * len(picked)
    restored = TasksetReader(storage)
    restored.load_state_dict(json.loads(json.dumps(reader.state_dict())))
    assert [t.index for t in restored.read_batch()] == [t.index for t in reader.read_batch()]


def test_messages_prompts(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "calc"}]}]
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", rows), format=FormatConfig(prompt_type="messages", messages_key="messages")
    )
    (task,) = TasksetReader(storage).read_batch()
    assert task.raw["messages"][0]["content"] == "hi" and task.format["tools_key"] == "tools"


def test_parquet_file_and_hf_directory_layouts(tmp_path):
    rows = questions(4)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    assert drain(TasksetReader(taskset(tmp_path / "t.parquet", batch_size=4))) == [[0, 1, 2, 3]]
    layout = tmp_path / "hf"
    layout.mkdir()
    write_jsonl(layout / "train.jsonl", rows[:3])
    write_jsonl(layout / "test.jsonl", rows[3:])
    assert [row["answer"] for row in load_rows(taskset(layout, split="test"))] == ["3"]
    assert drain(TasksetReader(taskset(layout, batch_size=5))) == [[0, 1, 2]]


def test_save_to_disk_directory_with_split(tmp_path):
    import datasets

    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(questions(2)), "test": datasets.Dataset.from_list(questions(3))}
    ).save_to_disk(tmp_path / "saved")
    assert len(load_rows(taskset(tmp_path / "saved", split="test"))) == 3


def test_missing_prompt_key_names_file_and_row(tmp_path):
    rows = questions(4)
    del rows[2]["question"]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(BadDataError, match=rf"{path}, row 3: no prompt: column 'question'"):
        TasksetReader(taskset(path))


def test_workflows_that_read_no_prompt_take_rows_without_one(tmp_path):
    """FrozenLake's rows are maps (``size``, ``p``, ``seed``); a row naming a workflow that does
    read prompts (``format.workflow_key``) still needs one."""
    rows = [{"size": 3, "seed": i} for i in range(3)]
    path = write_jsonl(tmp_path / "lakes.jsonl", rows)
    reader = TasksetReader(taskset(path, default_workflow_type="frozen_lake_workflow"))
    assert [t.raw["seed"] for t in reader.read_batch()] == [0, 1]
    rows[1]["workflow"] = "math_workflow"
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    fmt = FormatConfig(prompt_key="question", workflow_key="workflow")
    with pytest.raises(BadDataError, match=rf"{path}, row 2: no prompt: column 'question'"):
        TasksetReader(taskset(path, default_workflow_type="frozen_lake_workflow", format=fmt))


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        (
            "t.jsonl",
            b'{"question": "ok", "answer": "1"}\n\n{"question": "caf\xe9", "answer": "2"}\n',
            ", row 3: UnicodeDecodeError",
        ),
        ("t.jsonl", b'{"question": "ok"}\n["a list"]\n', ", row 2: ValueError: a row must be a JSON object"),
        ("t.parquet", b"this is not parquet", ": cannot load"),
    ],
)
def test_undecodable_files_name_file_and_row(tmp_path, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BadDataError, match=re.escape(f"{path}{problem}")):
        TasksetReader(taskset(path))


def test_parquet_with_a_wrong_schema_names_file_and_row(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"question": [1, 2], "answer": ["1", "2"]}), path)
    with pytest.raises(BadDataError, match=rf"{path}, row 1: column 'question' \(prompt_key\) must be text, got int"):
        TasksetReader(taskset(path))
    pq.write_table(pa.table({"prompt": ["a"]}), path)
    with pytest.raises(BadDataError, match=rf"{path}, row 1: no prompt: column 'question'.*columns: \['prompt'\]"):
        TasksetReader(taskset(path))


def test_skip_bad_rows_counts_and_logs(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    good = [json.dumps(row).encode() for row in questions(3)]
    path.write_bytes(b"\n".join([good[0], b"\xff\xfe not json", good[1], b'{"answer": "no prompt"}', good[2]]) + b"\n")
    storage = taskset(path, format=FormatConfig(prompt_key="question", skip_bad_rows=True), batch_size=10)
    with caplog.at_level(logging.WARNING):
        reader = TasksetReader(storage)
    assert drain(reader) == [[0, 1, 2]]
    assert reader.skipped == 1
    assert "skipped 1 undecodable row" in caplog.text and "skipped 1 row(s) that do not fit" in caplog.text


def test_missing_path_or_hub_id_offline_names_it(tmp_path):
    missing = tmp_path / "no-such-dataset"
    with pytest.raises(BadDataError, match=re.escape(f"{missing}: cannot load")):
        load_rows(taskset(missing))


def test_offline_easy2hard_reorders_later_epochs_by_the_observed_pass_rates(tmp_path):
    """Epoch 1 goes by the difficulty column; the explorer's pass rates then say row 4 is the
    easiest and row 0 the hardest: epoch 2 follows them; row 3, never observed, keeps its ease
    from its place in the feature order (2nd of 5: 0.8)."""
    storage = taskset(
        write_jsonl(tmp_path / "t.jsonl", questions(5)),  # difficulty 0, 2, 4, 1, 3
        batch_size=5,
        total_epochs=3,
        data_selector=DataSelectorConfig(selector_type="offline_easy2hard", feature_keys=["difficulty"]),
    )
    reader = TasksetReader(storage)
    assert answers(reader.read_batch()) == [0, 3, 1, 4, 2]
    reader.update_pass_rates([0, 1, 2, 4], [0.0, 0.5, 0.9, 1.0])
    reader.update_pass_rates([0], [0.2])  # a running mean: row 0 at 0.1
    assert answers(reader.read_batch()) == [4, 2, 3, 1, 0]
    state = json.loads(json.dumps(reader.state_dict()))
    reader.update_pass_rates([0, 0, 0], [1.0, 1.0, 1.0])  # row 0 now at 0.64
    restored = TasksetReader(storage)
    restored.load_state_dict(state)
    restored.update_pass_rates([0, 0, 0], [1.0, 1.0, 1.0])
    assert answers(restored.read_batch()) == answers(reader.read_batch()) == [4, 2, 3, 0, 1]


def test_enable_progress_bar_shows_datasets_progress_while_loading_only(tmp_path, capfd):
    import datasets

    pq.write_table(pa.Table.from_pylist(questions(4)), tmp_path / "t.parquet")
    before = datasets.is_progress_bar_enabled()
    load_rows(taskset(tmp_path / "t.parquet"))  # Trinity-RFT's default: no bars
    quiet = capfd.readouterr().err
    (tmp_path / "t2.parquet").write_bytes((tmp_path / "t.parquet").read_bytes())  # not cached yet: split generated
    load_rows(taskset(tmp_path / "t2.parquet", enable_progress_bar=True))
    shown = capfd.readouterr().err
    assert "Generating train split" in shown and "Generating train split" not in quiet
    assert datasets.is_progress_bar_enabled() == before  # the process's setting is left as it was
