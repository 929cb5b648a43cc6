"""``task_dir``: a folder of tasksets, one per data file, each with the folder entry's settings."""

from __future__ import annotations

import json

from config_helpers import issues_of, write

from trinity.buffer import TasksetReader
from trinity.config import load_config


def folder_of_tasksets(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for stem, n in (("gsm8k", 3), ("aime", 2)):
        rows = [{"q": f"{stem} {i}", "a": str(i)} for i in range(n)]
        (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "README.md").write_text("not data")
    return folder


def test_each_data_file_of_the_folder_is_a_taskset_with_the_entry_settings(tmp_path):
    folder = folder_of_tasksets(tmp_path)
    entry = f"{{task_dir: {folder}, format: {{prompt_key: q, response_key: a}}, default_workflow_type: math_workflow}}"
    cfg = load_config(
        write(tmp_path),
        [
            "buffer.explorer_input.taskset=null",
            f"buffer.explorer_input.tasksets=[{{name: math, {entry[1:]}]",
            f"buffer.explorer_input.eval_tasksets=[{entry}]",
        ],
    )
    tasksets = cfg.buffer.explorer_input.tasksets
    assert [t.name for t in tasksets] == ["math/aime", "math/gsm8k"]
    assert [t.path for t in tasksets] == [str(folder / "aime.jsonl"), str(folder / "gsm8k.jsonl")]
    assert all(t.format.prompt_key == "q" and t.repeat_times == 4 and t.task_dir is None for t in tasksets)
    evals = cfg.buffer.explorer_input.eval_tasksets
    assert [(t.name, t.is_eval, t.repeat_times) for t in evals] == [("aime", True, 1), ("gsm8k", True, 1)]
    batch = TasksetReader(tasksets[1]).read_batch()
    assert [t.raw["q"] for t in batch] == ["gsm8k 0", "gsm8k 1", "gsm8k 2"]
    assert {t.taskset_name for t in batch} == {"math/gsm8k"}


WORKFLOW = "default_workflow_type: math_workflow"


def test_a_task_dir_that_cannot_be_read_names_its_key(tmp_path):
    folder = folder_of_tasksets(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    found = issues_of(
        write(tmp_path),
        [
            f"buffer.explorer_input.taskset.task_dir={folder}",  # path is set too
            f"buffer.explorer_input.eval_tasksets=[{{task_dir: {empty}, {WORKFLOW}}}, {{task_dir: {tmp_path / 'none'}, {WORKFLOW}}}]",
        ],
    )
    assert found == {
        "buffer.explorer_input.taskset.task_dir": "give either path or task_dir, not both",
        "buffer.explorer_input.eval_tasksets[0].task_dir": f"'{empty}' holds no data file "
        "(.jsonl, .json, .parquet, .csv, .arrow)",
        "buffer.explorer_input.eval_tasksets[1].task_dir": f"'{tmp_path / 'none'}' is not a folder",
    }
