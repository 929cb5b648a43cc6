"""The task pipeline (``data_processor.task_pipeline``): raw data to the taskset, before exploring.

``trinity run`` runs it first when it is configured: the rows of the ``inputs`` files go through the
Data-Juicer recipe, whose statistics become a quality and a difficulty score per row (each scaled to
[0, 1], 1 the better: by its known range, else the data's min and max), as Trinity-RFT does;
``priority = sum(priority_weights[k] * score_k)`` orders the rows, best first, and ``top_k`` keeps
the best. They are written as jsonl to ``output.path``, which the explorer then reads; an output
that exists already is kept, so a resumed run does not redo it (``docs/data.md``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from trinity.buffer.data_juicer import STATS_KEY, DataJuicerError, open_recipe, recipe
from trinity.buffer.taskset import load_rows
from trinity.config.schema import DataJuicerServiceConfig, StorageConfig, TaskPipelineConfig

logger = logging.getLogger(__name__)

KEY = "data_processor.task_pipeline"

SCORES: dict[str, dict[str, tuple[bool, float | None, float | None]]] = {
    "quality_score": {  # statistic: (higher is better, range low, range high; None: the data's)
        "alnum_ratio": (True, 0.0, 1.0),
        "char_rep_ratio": (False, 0.0, 1.0),
        "flagged_words_ratio": (False, 0.0, 1.0),
        "special_char_ratio": (False, 0.0, 1.0),
        "stopwords_ratio": (True, 0.0, 1.0),
        "word_rep_ratio": (False, 0.0, 1.0),
        "llm_quality_score": (True, 0.0, 1.0),
    },
    "difficulty_score": {
        "perplexity": (True, None, None),
        "lang_score": (False, 0.0, 1.0),
        "llm_difficulty_score": (True, 0.0, 1.0),
    },
}
"""Data-Juicer statistics behind each score (Trinity-RFT's grouping)."""

DEFAULT_WEIGHTS = {"difficulty": -0.7, "diversity": 0.8, "usage_frequency": -0.5, "quality": 1.0}


def task_output_file(output: StorageConfig) -> Path:
    """The jsonl file the pipeline writes for ``output``."""
    path = Path(output.path or "")
    return path if path.suffix == ".jsonl" else path / "output.jsonl"


def run_task_pipeline(pipeline: TaskPipelineConfig, service: DataJuicerServiceConfig | None = None) -> dict[str, float]:
    """Run the pipeline into its output taskset (on the Data-Juicer ``service`` when given);
    returns ``task_pipeline/...`` metrics."""
    if pipeline.output is None or not pipeline.output.path:
        raise DataJuicerError(f"{KEY}.output", "no output taskset (the first taskset when unset) with a path")
    target = task_output_file(pipeline.output)
    if target.exists():
        logger.info("task pipeline: %s exists already: exploring it as it is", target)
        return {}
    if not pipeline.inputs:
        raise DataJuicerError(f"{KEY}.inputs", "required: the raw data files to process")
    rows: list[dict[str, Any]] = []
    for i, path in enumerate(pipeline.inputs):
        if not os.path.isfile(path):
            raise DataJuicerError(f"{KEY}.inputs[{i}]", f"no file at {path!r} (inputs are files: jsonl, parquet, ...)")
        rows += [dict(row) for row in load_rows(StorageConfig(name=f"inputs[{i}]", path=path))]
    operators = [{op.name: op.args} for op in pipeline.operators]
    config = recipe(KEY, operators, pipeline.config_path, pipeline.num_process, pipeline.target_fields or "text")
    runner = open_recipe(KEY, config, service)
    try:
        processed = prioritised(runner.run(rows), pipeline.priority_weights or DEFAULT_WEIGHTS, pipeline.top_k)
    finally:
        runner.close()
    keep = pipeline.target_fields
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w") as out:
        for row in processed:
            row.pop(STATS_KEY, None)
            out.write(json.dumps({k: row[k] for k in keep} if keep else row, default=str) + "\n")
    logger.info("task pipeline: %d of %d rows written to %s", len(processed), len(rows), target)
    return {"task_pipeline/input_rows": float(len(rows)), "task_pipeline/output_rows": float(len(processed))}


def prioritised(rows: list[dict[str, Any]], weights: dict[str, float], top_k: int) -> list[dict[str, Any]]:
    """The rows best first by priority (when the recipe computed statistics), the first ``top_k``."""
    scored = [row for row in rows if row.get(STATS_KEY)]
    if not scored:
        return rows if top_k < 0 else rows[:top_k]
    data_range = {
        stat: (min(values), max(values))
        for stats_of in SCORES.values()
        for stat in stats_of
        if (values := [row[STATS_KEY][stat] for row in scored if isinstance(row[STATS_KEY].get(stat), (int, float))])
    }
    for row in rows:
        stats = row.get(STATS_KEY) or {}
        for score, stats_of in SCORES.items():
            parts = [
                _scaled(stats[s], *spec, data_range[s])
                for s, spec in stats_of.items()
                if s in data_range and s in stats
            ]
            row[score] = sum(parts) / len(parts) if parts else 0.0
        row["priority"] = (
            weights.get("quality", 0.0) * row["quality_score"]
            + weights.get("difficulty", 0.0) * row["difficulty_score"]
            + weights.get("usage_frequency", 0.0) * float(stats.get("consumed_cnt", 0))
        )
    ordered = sorted(rows, key=lambda row: -row["priority"])
    return ordered if top_k < 0 else ordered[:top_k]


def _scaled(value: float, higher: bool, low: float | None, high: float | None, seen: tuple[float, float]) -> float:
    if low is None or high is None:
        low, high = seen
    span = (high - low) or 1.0
    share = (float(value) - low) / span
    return share if higher else 1.0 - share
