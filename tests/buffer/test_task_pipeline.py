"""The task pipeline with a real Data-Juicer recipe: filter raw rows, order them by the quality
the recipe scores, keep the target fields, write the taskset."""

from __future__ import annotations

import json

import pytest

from trinity.buffer.data_juicer import DataJuicerError
from trinity.buffer.task_pipeline import prioritised, run_task_pipeline
from trinity.config.schema import OperatorConfig, TaskPipelineConfig, TasksetConfig

RAW = [
    {"question": "What is two plus two?", "answer": "4", "source": "a"},
    {"question": "?", "answer": "1", "source": "b"},  # too short: filtered
    {"question": "2+2=?? ## !! $$ %% ^^ &&", "answer": "4", "source": "c"},  # few alphanumerics: low quality
    {"question": "Add three and five, then double it.", "answer": "16", "source": "d"},
]


def pipeline(tmp_path, **changes) -> TaskPipelineConfig:
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in RAW))
    values = dict(
        operators=[
            OperatorConfig(name="text_length_filter", args={"min_len": 5}),
            OperatorConfig(name="alphanumeric_filter", args={"min_ratio": 0.0}),
        ],
        num_process=1,
        inputs=[str(raw)],
        target_fields=["question", "answer"],
        output=TasksetConfig(name="tasks", path=str(tmp_path / "out")),
    )
    return TaskPipelineConfig(**{**values, **changes})


def test_the_recipe_filters_scores_orders_and_writes_the_taskset(tmp_path):
    metrics = run_task_pipeline(pipeline(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "out" / "output.jsonl").read_text().splitlines()]
    assert metrics == {"task_pipeline/input_rows": 4.0, "task_pipeline/output_rows": 3.0}
    assert [r["answer"] for r in rows][-1] == "4" and rows[-1]["question"].startswith("2+2")  # lowest quality last
    assert all(set(r) == {"question", "answer"} for r in rows)
    assert run_task_pipeline(pipeline(tmp_path, top_k=1)) == {}  # written already: kept as it is
    top = run_task_pipeline(pipeline(tmp_path, top_k=1, output=TasksetConfig(path=str(tmp_path / "top.jsonl"))))
    assert top["task_pipeline/output_rows"] == 1.0 and len((tmp_path / "top.jsonl").read_text().splitlines()) == 1


def test_priority_follows_the_weights():
    rows = [
        {"id": i, "__dj__stats__": {"alnum_ratio": q, "perplexity": p}}
        for i, (q, p) in enumerate([(0.9, 10.0), (0.5, 50.0)])
    ]
    assert [r["id"] for r in prioritised([dict(r) for r in rows], {"quality": 1.0}, -1)] == [0, 1]
    assert [r["id"] for r in prioritised([dict(r) for r in rows], {"difficulty": 1.0}, -1)] == [1, 0]  # harder first
    assert [r["id"] for r in prioritised([dict(r) for r in rows], {"quality": 1.0, "difficulty": 2.0}, 1)] == [1]


def test_missing_inputs_and_bad_recipes_name_their_key(tmp_path):
    with pytest.raises(DataJuicerError, match=r"task_pipeline.inputs\[0\]: no file at"):
        run_task_pipeline(pipeline(tmp_path, inputs=[str(tmp_path / "none.jsonl")]))
    with pytest.raises(DataJuicerError, match="data_processor.task_pipeline: Data-Juicer rejects the recipe"):
        run_task_pipeline(pipeline(tmp_path, operators=[OperatorConfig(name="no_such_filter")]))
