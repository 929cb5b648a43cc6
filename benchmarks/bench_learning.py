"""The learning matrix: every cell of tests/learning (algorithm types, workflow families, sync
styles, two-process and serve modes, engines, the off-policy block) run for its step budget over
``--seeds`` seeds; writes docs/learning.md whole (a table: start before any update, end, change,
spread over the seeds, margin, dip, wall time, staleness, verdict; its commit and date in the
header) and docs/learning.png (each cell's curves).

    python benchmarks/bench_learning.py [--only SUBSTRING ...] [--skip SUBSTRING ...] [--short]
                                        [--controls] [--seeds N] [--jobs N]
                                        [--workdir DIR] [--out docs/learning.md]

Each cell runs as ``trinity run`` in a subprocess, once per seed (0 .. N-1), ``--jobs`` at a time
(default 1; with 2 on 2 cores the matrix takes about a third less time, each cell's wall time
grows; the cells with a runner of their own run one at a time in the main thread, beside the
pool's). A
cell learns when the mean of its change over the seeds is at least its margin and the margin is
at least twice the change's spread (its standard deviation over the seeds); with one seed the
spread is unknown and the row says so. A cell with a ``baseline`` (the async sync styles: the
fixed sync's cell) must also end within its ``baseline_margin`` of that cell's final measure; one
that ``drops_tasks`` (over_rollout) must have dropped some. ``--controls`` also runs each cell's
controls (its mechanism broken: advantages negated, rewards shuffled, weights not synced, the mask
off by one turn, ...), a row each, which must not learn: they show that a cell's measure can fail.
``--only`` / ``--skip`` choose cells; the file then lists those not run. The file is written
whole by every run: rows are never carried over from an earlier one. The CI learning tests
(tests/learning) run a few cells and their first controls on shorter budgets; this is the whole
matrix, minutes per cell and seed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "learning"), str(REPO / "tests")]
from learning_cells import Cell, CellResult, Workspace, run_cell  # noqa: E402  (shared with the learning tests)

CELL_MODULES = ("single_turn_cells", "multi_turn_cells", "judge_agent_cells", "async_cells")
"""The modules of tests/learning whose ``CELLS`` make the matrix, in the table's order."""


SHORT_STEPS = 40
"""``--short``: a cell's budget is its learning test's (or at most this many steps)."""


@dataclass
class Row:
    """A cell's (or a control's) outcome over the seeds: a result per seed that ran, and why the
    others did not."""

    cell: Cell
    control: str = ""
    results: list[CellResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    baseline_end: float = math.nan
    """The final measure of the cell's baseline (mean over the same seeds and budget), where it has one."""

    @property
    def label(self) -> str:
        return f"{self.cell.name} · control: {self.control}" if self.control else self.cell.name

    def mean(self, name: str) -> float:
        values = [getattr(r, name) for r in self.results if math.isfinite(getattr(r, name))]
        return statistics.fmean(values) if values else math.nan

    @property
    def spread(self) -> float:
        """The standard deviation of the change over the seeds (NaN with fewer than two)."""
        changes = [r.change for r in self.results if math.isfinite(r.change)]
        return statistics.stdev(changes) if len(changes) > 1 else math.nan

    @property
    def learned(self) -> bool | None:
        """Mean change at least the margin, and the margin at least twice the spread; None: no result."""
        if not self.results:
            return None
        change, spread = self.mean("change"), self.spread
        return change >= self.cell.margin and (not math.isfinite(spread) or self.cell.margin >= 2 * spread)

    @property
    def reaches_baseline(self) -> bool | None:
        if not self.results or self.cell.baseline is None or not math.isfinite(self.baseline_end):
            return None
        return self.mean("end") >= self.baseline_end - self.cell.baseline_margin

    @property
    def dropped_tasks(self) -> int:
        return sum(r.dropped_tasks for r in self.results)

    @property
    def verdict(self) -> str:
        if not self.results:
            return "failed to run: " + "; ".join(dict.fromkeys(self.errors))
        change, spread, margin = self.mean("change"), self.spread, self.cell.margin
        if self.control:  # a control must not learn
            verdict = "did not learn (as it must)" if change < margin else "LEARNED: the measure cannot fail"
        elif change < margin:
            verdict = "does not learn"
        elif math.isfinite(spread) and margin < 2 * spread:
            verdict = f"NOT SHOWN: the margin is under twice the spread ({fmt(2 * spread)})"
        else:
            verdict = "learns"
        if len(self.results) < 2:
            verdict += " (one seed: spread unknown)"
        if self.errors:
            verdict += f"; {len(self.errors)} seed(s) failed to run: {self.errors[0]}"
        if self.reaches_baseline is not None and not self.control:
            name, gap = self.cell.baseline.name, self.cell.baseline_margin
            reached = "within" if self.reaches_baseline else "NOT within"
            verdict += f"; ends {reached} {gap} of {name} ({fmt(self.baseline_end)})"
        if self.cell.drops_tasks:
            dropped = self.dropped_tasks
            verdict += f"; {dropped} tasks dropped" if dropped else "; NO TASK DROPPED (over_rollout never acted)"
        return verdict


def cell_modules() -> list:
    """The modules of :data:`CELL_MODULES` that are there."""
    import importlib

    modules = []
    for name in CELL_MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return modules


def all_cells() -> list[Cell]:
    return [cell for module in cell_modules() for cell in module.CELLS]


def without_cells() -> dict[str, str]:
    """Workflows that have no cell, and why (each module's ``NOT_CELLS``)."""
    return {name: why for module in cell_modules() for name, why in getattr(module, "NOT_CELLS", {}).items()}


def run_row(cell: Cell, workspace: Workspace, out: Path, seeds: int, control: str = "", short: bool = False) -> Row:
    row = Row(cell, control)
    extra = cell.controls[control](workspace) if control else []
    steps = (cell.test_steps or min(cell.steps, SHORT_STEPS)) if short else cell.steps
    for seed in range(seeds):
        try:
            result = run_cell(
                cell, workspace, out / f"seed{seed}", steps=steps, seed=seed, extra=extra, subprocess_run=True
            )
        except Exception as exc:  # one run's failure is said in its row, not the end of the matrix
            row.errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            traceback.print_exc()
        else:
            row.results.append(result)
    return row


def run_all(runs: list[tuple], jobs: int, finished: Callable[[Row], None]) -> None:
    """Run every row, ``jobs`` at a time. Rows whose cell has a ``runner`` run in this (the main)
    thread, one after another: a runner may run trinity in this process, which sets signal
    handlers. The other rows run ``trinity run`` subprocesses from a pool beside them."""
    slots, lock = threading.Semaphore(jobs), threading.Lock()

    def row_in_a_slot(run: tuple) -> Row:
        with slots:
            row = run_row(*run)
        with lock:
            finished(row)
        return row

    def in_main(run: tuple) -> bool:
        return jobs == 1 or run[0].runner is not None

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(row_in_a_slot, run) for run in runs if not in_main(run)]
        for run in filter(in_main, runs):
            row_in_a_slot(run)
        for future in futures:
            future.result()


def prepare(workspace: Workspace, plan: list[tuple[Cell, str]]) -> None:
    """Build the models and data every planned run needs, one at a time, before runs share them
    (the cells' makers cache what they build in the workspace, unlocked)."""
    _ = workspace.warm_model, workspace.tiny_model, workspace.arithmetic
    for cell, control in plan:
        workspace.start_model(cell.model)
        cell.overrides(workspace)
        if control:
            cell.controls[control](workspace)


def slug(cell: Cell, control: str) -> str:
    """A folder name for a cell's (or control's) run."""
    return "".join(ch if ch.isalnum() else "_" for ch in f"{cell.name}_{control}")


def fmt(value: float | None, spec: str = ".3f") -> str:
    return f"{value:{spec}}" if isinstance(value, float) and math.isfinite(value) else "–"


def record(row: Row) -> dict:
    """A row as the table and the plot read it (``docs/learning.json``)."""
    m = row.cell.measure
    return {
        "cell": row.label,
        "control": bool(row.control),
        "family": row.cell.family,
        "measure": m.label + ("" if m.higher_is_better else " (lower is better)"),
        "start": row.mean("start"),
        "end": row.mean("end"),
        "change": row.mean("change"),
        "spread": row.spread,
        "margin": row.cell.margin,
        "dip": row.mean("dip"),
        "steps": row.results[0].steps if row.results else None,
        "seeds": len(row.results),
        "wall_s": row.mean("wall_s"),
        "staleness": row.mean("staleness"),
        "learned": row.learned,
        "verdict": row.verdict,
        "note": "" if row.control else row.cell.note,
        "series": [r.series for r in row.results],
    }


def table(records: list[dict]) -> list[str]:
    lines = [
        "| cell | family | measure | start (before any update) | end | change | spread | margin | dip | steps "
        "| seeds | wall | staleness | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        cells = [
            rec["cell"],
            rec["family"],
            rec["measure"],
            fmt(rec["start"]),
            fmt(rec["end"]),
            fmt(rec["change"], "+.3f"),
            fmt(rec["spread"]),
            str(rec["margin"]),
            fmt(rec["dip"], ".2f"),
            str(rec["steps"] or "–"),
            str(rec["seeds"]),
            f"{fmt(rec['wall_s'], '.0f')} s",
            fmt(rec["staleness"], ".2f"),
            rec["verdict"] + (f" ({rec['note']})" if rec.get("note") else ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(records: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    drawn = [rec for rec in records if rec["series"] and not rec["control"]]
    if not drawn:
        return
    columns = 4
    lines = math.ceil(len(drawn) / columns)
    figure = Figure(figsize=(4 * columns, 2.6 * lines), layout="constrained")
    for index, rec in enumerate(drawn):
        axes = figure.add_subplot(lines, columns, index + 1)
        for series in rec["series"]:
            axes.plot(range(1, len(series) + 1), series, linewidth=1)
        axes.set_title(f"{rec['cell']} ({'learns' if rec['learned'] else 'no'})", fontsize=8)
        axes.set_xlabel("step", fontsize=7)
        axes.set_ylabel(rec["measure"], fontsize=7)
        axes.tick_params(labelsize=6)
    figure.savefig(path, dpi=80)


def commit() -> str:
    """The checkout's commit, and whether files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
    )
    name = head.stdout.strip() or "unknown"
    return f"{name} (with uncommitted changes)" if dirty.stdout.strip() else name


def write_doc(records: list[dict], out: Path, args: argparse.Namespace, left_out: list[Cell], seconds: float) -> None:
    cells = [rec for rec in records if not rec["control"]]
    controls = [rec for rec in records if rec["control"]]
    learned = sum(1 for rec in cells if rec["learned"])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# The learning matrix",
        "",
        f"Written whole by `python benchmarks/bench_learning.py` at commit {commit()}, {now}, on "
        f"{platform.machine()}, {_cores()} cores, {args.jobs} run(s) at a time, in {seconds / 60:.0f} minutes: "
        f"**{learned} of {len(cells)} cells learn by their margin** over {args.seeds} seed(s).",
        "",
        "Each cell of `tests/learning/*_cells.py` runs `trinity run` for its step budget"
        + (" (`--short`: its learning test's, or at most 40 steps)" if args.short else "")
        + f" once per seed (0 to {args.seeds - 1}) on a tiny model built locally (nothing is downloaded). "
        "**start** is the policy before any update (the first explorer step, sampled by the weights the run "
        "started with; a step-0 evaluation; a trainer's loss before its first optimizer step), **end** the mean "
        "of the last steps (or the last evaluation), both averaged over the seeds; **change** is their mean "
        "difference in the measure's good direction and **spread** its standard deviation over the seeds. A cell "
        "learns when its mean change is at least its **margin** and the margin at least twice the spread. "
        "**dip**: how far the worst 10-step running mean fell below the start (a collapse before learning). "
        "The CI learning tests (`tests/learning`) run some of these cells, each with its first control, on "
        "shorter budgets. Wall times (per seed) include `trinity run`'s start-up.",
        "",
        *table(cells),
        "",
    ]
    if controls:
        lines += [
            "## Controls: the mechanism broken",
            "",
            "Each control is its cell with one mechanism broken; it must not learn, which shows that the "
            "cell's measure can fail.",
            "",
            *table(controls),
            "",
        ]
    if left_out:
        lines += ["Not run this time (`--only`, `--skip`):", ""]
        lines += [f"- {cell.name} ({cell.family}){': ' + cell.note if cell.note else ''}" for cell in left_out]
        lines.append("")
    without = without_cells()
    if without:
        lines += ["## Workflows without a cell", ""]
        lines += [f"- {names}: {why}" for names, why in without.items()]
        lines.append("")
    lines += [f"![every cell's measure per step, a curve per seed]({out.with_suffix('.png').name})", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    plot(records, out.with_suffix(".png"))
    out.with_suffix(".json").write_text(json.dumps({"rows": records}, indent=1) + "\n")


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=[], help="run the cells whose name contains one of these")
    parser.add_argument("--skip", nargs="*", default=[], help="leave out the cells whose name contains one of these")
    parser.add_argument("--short", action="store_true", help="each cell for its learning test's budget (or 40 steps)")
    parser.add_argument("--controls", action="store_true", help="also run each cell's controls, a row each")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per cell (0 .. N-1)")
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once")
    parser.add_argument("--workdir", type=Path, help="keep the models, data and runs here (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "learning.md")
    args = parser.parse_args()
    cells = all_cells()
    chosen = [
        c
        for c in cells
        if (not args.only or any(s in c.name for s in args.only)) and not any(s in c.name for s in args.skip)
    ]
    left_out = [c for c in cells if c not in chosen]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        workspace = Workspace(root / "workspace")
        started = time.monotonic()
        plan = [(cell, "") for cell in chosen] + [(c, label) for c in chosen if args.controls for label in c.controls]
        prepare(workspace, plan)
        rows: list[Row] = []

        def finished(row: Row) -> None:
            rows.append(row)
            described = "; ".join(r.describe() for r in row.results) or row.verdict
            print(f"[{len(rows)}/{len(plan)}] {row.label}: {described}", flush=True)

        runs = [
            (cell, workspace, root / "runs" / slug(cell, control), args.seeds, control, args.short)
            for cell, control in plan
        ]
        run_all(runs, args.jobs, finished)
        rows.sort(key=lambda row: plan.index((row.cell, row.control)))
        ends = {row.cell.name: row.mean("end") for row in rows if not row.control}
        for row in rows:
            if row.cell.baseline is not None:
                row.baseline_end = ends.get(row.cell.baseline.name, math.nan)
        write_doc([record(row) for row in rows], args.out, args, left_out, time.monotonic() - started)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
