"""Metric names shared by the explorer and trainer (the names veRL users know).

``stats("critic/score", rewards)`` gives ``critic/score/mean|max|min``;
``gather("rollout", metrics_of_each_experience)`` gives ``rollout/<metric>/mean|max|min``;
``eval_at_k(taskset, runs_of_each_task)`` gives ``eval/<taskset>/<metric>/mean@k|best@k`` (and more with
``monitor.detailed_stats``);
``timer(metrics, "step")`` adds ``time/step``. The full table is in trinity-monitors' README.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager


def stats(prefix: str, values: Iterable[float]) -> dict[str, float]:
    """``<prefix>/mean``, ``/max`` and ``/min`` of ``values``; empty when there are none."""
    values = [float(v) for v in values]
    if not values:
        return {}
    return {
        f"{prefix}/mean": sum(values) / len(values),
        f"{prefix}/max": max(values),
        f"{prefix}/min": min(values),
    }


def _columns(records: Iterable[Mapping[str, float]]) -> dict[str, list[float]]:
    """Each metric's values over ``records``, skipping records that lack it."""
    columns: dict[str, list[float]] = {}
    for record in records:
        for key, value in record.items():
            columns.setdefault(key, []).append(float(value))
    return columns


def gather(prefix: str, records: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """:func:`stats` of each metric over ``records`` (one dict per experience), under ``prefix``.

    A metric missing from some records is summarised over those that have it.
    """
    result: dict[str, float] = {}
    for key, values in _columns(records).items():
        result.update(stats(f"{prefix}/{key}", values))
    return result


def eval_at_k(
    taskset: str, task_runs: Iterable[Sequence[Mapping[str, float]]], detailed: bool = False
) -> dict[str, float]:
    """``eval/<taskset>/<metric>/mean@k`` and ``best@k`` from the ``k`` runs of each eval task.

    ``task_runs`` holds, per task, the metric dicts of its repeated rollouts. ``mean@k``
    averages each task's mean over its runs, ``best@k`` each task's best run, both then
    averaged over tasks. ``k`` is the largest number of runs a task has. ``detailed``
    (``monitor.detailed_stats``) adds ``std@k`` and ``worst@k`` (each task's spread and worst
    run, averaged) and ``mean@k/std|max|min``: how the task means spread over the tasks.
    """
    columns: dict[str, list[list[float]]] = {}
    k = 0
    for runs in task_runs:
        k = max(k, len(runs))
        for key, values in _columns(runs).items():
            columns.setdefault(key, []).append(values)
    result: dict[str, float] = {}
    for key, tasks in columns.items():
        prefix = f"eval/{taskset}/{key}"
        means = [statistics.fmean(values) for values in tasks]
        result[f"{prefix}/mean@{k}"] = statistics.fmean(means)
        result[f"{prefix}/best@{k}"] = statistics.fmean(max(values) for values in tasks)
        if detailed:
            result[f"{prefix}/std@{k}"] = statistics.fmean(statistics.pstdev(values) for values in tasks)
            result[f"{prefix}/worst@{k}"] = statistics.fmean(min(values) for values in tasks)
            result[f"{prefix}/mean@{k}/std"] = statistics.pstdev(means)
            result[f"{prefix}/mean@{k}/max"] = max(means)
            result[f"{prefix}/mean@{k}/min"] = min(means)
    return result


@contextmanager
def timer(metrics: dict[str, float], name: str) -> Iterator[None]:
    """Time the ``with`` block into ``metrics["time/<name>"]`` (seconds), even if it raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        metrics[f"time/{name}"] = time.perf_counter() - start
