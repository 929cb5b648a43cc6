"""The run report (``trinity view``, and the end of ``trinity run``): plots, config and summary.

It reads only what a run leaves in its job folder — ``monitor/<role>.jsonl`` (every metric of
every step, whatever the trackers), ``config.yaml`` (the resolved config), ``meta/summary.json``
and the ``global_step_N`` checkpoints — and writes ``report.html`` with PNG plots beside it
in ``plots/``. A folder whose stages each have a job folder (``stages:``) gets one report with
a section per stage.
"""

from __future__ import annotations

import html
import importlib
import json
import logging
import math
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trinity.common.files import write_json
from trinity.config import Config, to_yaml
from trinity.monitor.learnable import describe_trend, nothing_learnable, reward_trend

logger = logging.getLogger(__name__)

REPORT_NAME = "report.html"
PLOTS_DIR = "plots"
SUMMARY_FILE = Path("meta") / "summary.json"
CONFIG_FILE = "config.yaml"
STEP_PREFIX = "global_step_"
JOB_FOLDER_LINE = "job folder: "
"""How ``trinity run`` starts the line naming a stage's job folder, as the stage starts."""


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a metrics file; a line still being written (or torn by a crash) is skipped."""
    records = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


@dataclass
class Series:
    """One metric of one role: its values by step."""

    role: str
    key: str
    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.role}: {self.key}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def metric_series(role: str, records: list[dict[str, Any]], pattern: str) -> list[Series]:
    """Every numeric metric whose key matches ``pattern``, by step."""
    found: dict[str, Series] = {}
    for record in records:
        step = _number(record.get("step"))
        if step is None:
            continue
        for key, value in record.items():
            number = _number(value)
            if number is None or key in ("step", "timestamp") or not re.search(pattern, key):
                continue
            series = found.setdefault(key, Series(role, key))
            series.steps.append(step)
            series.values.append(number)
    return list(found.values())


def throughput(role: str, records: list[dict[str, Any]]) -> list[Series]:
    """Experiences per second of each step (steps per second where a role counts none)."""
    series = Series(role, "experiences/s")
    timed = [r for r in records if _number(r.get("timestamp")) is not None and _number(r.get("step")) is not None]
    for before, record in zip(timed, timed[1:], strict=False):
        seconds = record["timestamp"] - before["timestamp"]
        count = _number(record.get("experience_count", record.get("rollout/experience_count")))
        if seconds > 0:
            series.steps.append(record["step"])
            series.values.append((count if count is not None else 1.0) / seconds)
    if timed and all(_number(r.get("experience_count", r.get("rollout/experience_count"))) is None for r in timed):
        series.key = "steps/s"
    return [series] if series.steps else []


# (file stem, title, y label, the metric keys it plots; None: throughput, from the timestamps)
PANELS: list[tuple[str, str, str, str | None]] = [
    ("reward", "Reward", "mean reward", r"^(rollout/reward/mean|critic/score/mean|eval/.+/mean@\d+)$"),
    ("loss", "Loss", "loss", r"^(actor|critic)/(?!.*(kl|entropy)).*loss$"),
    ("kl", "KL", "KL", r"^(actor|critic)/.*kl"),
    ("entropy", "Entropy", "entropy", r"^actor/.*entropy"),
    ("response_length", "Response length", "tokens", r"^(rollout/)?response_length/mean$"),
    ("staleness", "Staleness", "policy versions", r"^(staleness_mean|rollout/staleness/mean)$"),
    ("throughput", "Throughput", "per second", None),
]
HEADLINE = re.compile("|".join(f"(?:{pattern})" for *_, pattern in PANELS if pattern))
"""The keys of the plotted metrics: what ``trinity log`` shows of each step."""


def panel_series(pattern: str | None, role: str, records: list[dict[str, Any]]) -> list[Series]:
    return throughput(role, records) if pattern is None else metric_series(role, records, pattern)


def _smoothed(values: list[float]) -> list[float]:
    """A trailing mean over a twentieth of the run, so the trend shows through the noise."""
    window = max(1, len(values) // 20)
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def import_plotting_ahead() -> None:
    """Import what ``plot`` needs (matplotlib's figure and Agg canvas: 0.4 s on 2 cores) in a daemon
    thread; ``trinity run`` calls it once its roles run, so that the report after the last step
    does not wait for it."""

    def load() -> None:
        for module in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
            importlib.import_module(module)

    threading.Thread(target=load, name="report-imports", daemon=True).start()


def plot(series: list[Series], title: str, ylabel: str, path: Path) -> None:
    """A PNG of the series against step (raw faint, smoothed solid)."""
    from matplotlib.figure import Figure  # lazily: only reports need matplotlib; no pyplot state

    figure = Figure(figsize=(6.4, 3.4))
    # Fixed margins, not a layout engine: constrained layout measured every tick label and took
    # over half of the report's time; the tick formatter keeps labels short (offsets, 1e-5).
    figure.subplots_adjust(left=0.13, right=0.98, top=0.9, bottom=0.15)
    axes = figure.subplots()
    for line in series:
        raw = axes.plot(line.steps, line.values, alpha=0.3, linewidth=1)[0]
        if len(line.values) >= 40:
            axes.plot(line.steps, _smoothed(line.values), color=raw.get_color(), linewidth=1.8, label=line.label)
        else:
            raw.set(alpha=1.0, marker="." if len(line.values) < 20 else "", label=line.label)
    axes.set(title=title, xlabel="step", ylabel=ylabel)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def checkpoint_step(folder: Path) -> int:
    """N of a ``global_step_N`` checkpoint folder; -1 for any other name."""
    suffix = folder.name.removeprefix(STEP_PREFIX)
    return int(suffix) if suffix.isdigit() else -1


@dataclass
class Job:
    """One job folder (a stage) and what its run left there."""

    name: str
    folder: Path
    metrics: dict[str, list[dict[str, Any]]]

    @classmethod
    def read(cls, folder: Path, name: str) -> Job:
        monitor = folder / "monitor"
        files = sorted(p for p in monitor.glob("*.jsonl") if not p.stem.endswith("_tables"))
        return cls(name, folder, {p.stem: read_records(p) for p in files})

    def summary(self) -> dict[str, Any]:
        """What ran and how it went: from meta/summary.json where the run wrote one, else the files."""
        written = self.folder / SUMMARY_FILE
        summary: dict[str, Any] = json.loads(written.read_text()) if written.is_file() else {}
        rows: dict[str, Any] = {}
        if "mode" in summary:
            rows["mode"] = summary["mode"]
        if "seconds" in summary:
            rows["duration"] = f"{summary['seconds']:.0f} s"
        if "stopped" in summary:
            rows["stopped"] = f"by {summary['stopped']} (what was checkpointed stays)"
        for role, records in self.metrics.items():
            steps = [r["step"] for r in records if _number(r.get("step")) is not None]
            rows[f"{role} steps"] = f"{int(max(steps))}" if steps else "none logged"
            trend = reward_trend(records)
            if trend:
                rows[f"{role} reward"] = describe_trend(trend)
            stall = nothing_learnable(records)
            if stall:
                rows[f"{role} learning"] = stall
        checkpoints = sorted(
            (p for p in self.folder.glob(f"{STEP_PREFIX}*") if checkpoint_step(p) >= 0), key=checkpoint_step
        )
        if checkpoints:
            rows["last checkpoint"] = str(checkpoints[-1])
        if summary.get("model_path"):
            rows["final model"] = summary["model_path"]
        placed = summary.get("placement", {})
        if any(p["gpu_ids"] for p in placed.values()) or len({p["node_id"] for p in placed.values()}) > 1:
            rows["placement"] = "; ".join(
                f"{role} on node {p['node'] or p['node_id']}, GPUs {','.join(p['gpu_ids']) or 'none'}"
                for role, p in placed.items()
            )
        return rows


class NoRunFound(ValueError):
    """The folder holds no job: no ``monitor/`` in it or in any folder directly under it."""


def find_jobs(folder: Path) -> list[Job]:
    """The job folder itself, or its stages' job folders (in the order they ran)."""
    if (folder / "monitor").is_dir():
        return [Job.read(folder, folder.name)]
    stages = [p for p in folder.iterdir() if (p / "monitor").is_dir()] if folder.is_dir() else []
    if not stages:
        raise NoRunFound(f"{folder}: no run here (no monitor/ folder in it or in a stage folder under it)")
    stages.sort(key=lambda p: min((f.stat().st_mtime for f in (p / "monitor").iterdir()), default=0.0))
    return [Job.read(p, p.name) for p in stages]


def _table(rows: dict[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1400px; color: #1d2330; }
h1 { font-size: 1.4em; } h2 { border-bottom: 1px solid #dde1e8; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0 1em; } th, td { text-align: left; padding: .2em 1em .2em 0; }
th { font-weight: 600; color: #5b6475; } .plots { display: flex; flex-wrap: wrap; gap: .5em; }
.plots img { width: 640px; max-width: 100%; border: 1px solid #dde1e8; } pre { background: #f6f7f9; padding: 1em; }
.missing { color: #5b6475; }
"""


def write_report(folder: str | Path) -> Path:
    """Write ``report.html`` (and its ``plots/``) in ``folder``; returns the report's path."""
    folder = Path(folder).resolve()
    jobs = find_jobs(folder)
    sections = []
    for job in jobs:
        prefix = f"{job.name}_" if len(jobs) > 1 else ""
        images, missing = [], []
        for stem, title, ylabel, pattern in PANELS:
            series = [s for role, records in job.metrics.items() for s in panel_series(pattern, role, records)]
            if not series:
                missing.append(title.lower())
                continue
            path = folder / PLOTS_DIR / f"{prefix}{stem}.png"
            plot(series, title, ylabel, path)
            images.append(f'<img src="{PLOTS_DIR}/{path.name}" alt="{html.escape(title)}">')
        config = job.folder / CONFIG_FILE
        parts = [
            f"<h2>{html.escape(job.name)}</h2>",
            _table(job.summary()),
            f'<div class="plots">{"".join(images)}</div>',
        ]
        if missing:
            parts.append(f'<p class="missing">Not logged by this run: {", ".join(missing)}.</p>')
        if config.is_file():
            parts.append(
                f"<details><summary>config ({config})</summary><pre>{html.escape(config.read_text())}</pre></details>"
            )
        sections.append("\n".join(parts))
    report = folder / REPORT_NAME
    report.write_text(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>trinity report: {html.escape(folder.name)}"
        f"</title><style>{_STYLE}</style></head><body><h1>trinity run report</h1><p>{html.escape(str(folder))}</p>"
        + "\n".join(sections)
        + "</body></html>\n"
    )
    return report


def record_config(config: Config) -> None:
    """Keep the resolved config in the job folder (the run's record; the report shows it)."""
    folder = Path(config.checkpoint_job_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(to_yaml(config))


def record_summary(summary: dict[str, Any]) -> None:
    """Keep a finished stage's summary (mode, seconds, steps, final model) for the report."""
    write_json(Path(summary["job_dir"]) / SUMMARY_FILE, json.loads(json.dumps(summary, default=str)))


def report_after_run(summaries: list[dict[str, Any]]) -> Path | None:
    """The report of a finished run, in its job folder (the folder of its stages' job folders).

    A report that cannot be written is a warning: the run itself has succeeded.
    """
    dirs = [str(Path(s["job_dir"]).resolve()) for s in summaries if s.get("job_dir")]
    if not dirs:
        return None
    try:
        return write_report(os.path.commonpath(dirs))
    except (NoRunFound, OSError, ValueError) as exc:
        logger.warning("no report written: %s", exc)
        return None
