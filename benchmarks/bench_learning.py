"""The learning matrix: every cell of tests/learning (algorithm types, workflow families, sync
styles, two-process and serve modes, engines) run for its step budget with fixed seeds; writes
docs/learning.md (a table: start -> end, change, margin, wall time, staleness) and
docs/learning.png (each cell's curve).

    python benchmarks/bench_learning.py [--only SUBSTRING ...] [--skip SUBSTRING ...] [--update]
                                        [--short] [--controls] [--seed N] [--jobs N]
                                        [--workdir DIR] [--out docs/learning.md]

Each cell runs as ``trinity run`` in a subprocess, ``--jobs`` at a time (default 1; with 2 on 2
cores the matrix takes about a third less time, each cell's wall time grows; the cells whose runner
runs trinity in this process, sft and dpo, need the default). A cell with a
``baseline`` (the async sync styles: the fixed sync's cell) must also end within its
``baseline_margin`` of that cell's final measure. ``--controls`` also
runs each cell's controls (its mechanism broken: advantages negated, weights not synced, the
mask off by one turn, ...), which must not learn: they show that a cell's measure can fail.
``--only`` runs the cells whose name contains one of the substrings and writes the rows it ran
(the file then says which were left out); with ``--update`` it keeps the other rows of the last
matrix (``docs/learning.json``), so one cell is run again after a change. The CI learning tests (tests/learning) run a few cells
on shorter budgets; this is the whole matrix, minutes per cell.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
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
    """A cell's (or a control's) outcome: its result, or why it has none."""

    cell: Cell
    control: str = ""
    result: CellResult | None = None
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.cell.name} · control: {self.control}" if self.control else self.cell.name

    baseline_end: float = math.nan
    """The final measure of the cell's baseline (same seed and budget), where it has one."""

    @property
    def reaches_baseline(self) -> bool | None:
        if self.result is None or self.cell.baseline is None or not math.isfinite(self.baseline_end):
            return None
        return self.result.end >= self.baseline_end - self.cell.baseline_margin

    @property
    def verdict(self) -> str:
        if self.result is None:
            return "failed to run"
        if self.control:  # a control must not learn
            return "did not learn (as it must)" if not self.result.learned else "LEARNED: the measure cannot fail"
        verdict = "learns" if self.result.learned else "does not learn"
        if self.reaches_baseline is not None:
            name, gap = self.cell.baseline.name, self.cell.baseline_margin
            reached = "within" if self.reaches_baseline else "NOT within"
            verdict += f"; ends {reached} {gap} of {name} ({fmt(self.baseline_end)})"
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


def run_row(cell: Cell, workspace: Workspace, out: Path, seed: int, control: str = "", short: bool = False) -> Row:
    row = Row(cell, control)
    extra = cell.controls[control](workspace) if control else []
    steps = (cell.test_steps or min(cell.steps, SHORT_STEPS)) if short else cell.steps
    try:
        row.result = run_cell(cell, workspace, out, steps=steps, seed=seed, extra=extra, subprocess_run=True)
    except Exception as exc:  # one cell's failure is a row of the table, not the end of the matrix
        row.error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        traceback.print_exc()
    return row


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
    """A row as the table, the plot and ``--update`` read it (``docs/learning.json``)."""
    r, m = row.result, row.cell.measure
    verdict = row.verdict if r is not None else f"failed to run: {row.error}"
    return {
        "cell": row.label,
        "control": bool(row.control),
        "family": row.cell.family,
        "measure": m.label + ("" if m.higher_is_better else " (lower is better)"),
        "start": r.start if r else None,
        "end": r.end if r else None,
        "change": r.change if r else None,
        "margin": row.cell.margin,
        "steps": r.steps if r else None,
        "wall_s": r.wall_s if r else None,
        "staleness": r.staleness if r else None,
        "learned": r.learned if r else None,
        "verdict": verdict,
        "note": "" if row.control else row.cell.note,
        "series": r.series if r else [],
    }


def table(records: list[dict]) -> list[str]:
    lines = [
        "| cell | family | measure | start → end | change | margin | steps | wall | staleness | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        cells = [
            rec["cell"],
            rec["family"],
            rec["measure"],
            f"{fmt(rec['start'])} → {fmt(rec['end'])}",
            fmt(rec["change"], "+.3f"),
            str(rec["margin"]),
            str(rec["steps"] or "–"),
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
        axes.plot(range(1, len(rec["series"]) + 1), rec["series"], linewidth=1)
        axes.set_title(f"{rec['cell']} ({'learns' if rec['learned'] else 'no'})", fontsize=8)
        axes.set_xlabel("step", fontsize=7)
        axes.set_ylabel(rec["measure"], fontsize=7)
        axes.tick_params(labelsize=6)
    figure.savefig(path, dpi=80)


def merged(records: list[dict], previous: Path, cells: list[Cell]) -> list[dict]:
    """``--update``: the rows of the last written matrix, those run now replaced (new ones last);
    the rows kept take their cell's current note."""
    if not previous.exists():
        return records
    fresh = {rec["cell"]: rec for rec in records}
    notes = {cell.name: cell.note for cell in cells}
    old = json.loads(previous.read_text())["rows"]
    for rec in old:
        if not rec["control"] and rec["cell"] in notes:
            rec["note"] = notes[rec["cell"]]
    kept = [fresh.pop(rec["cell"], rec) for rec in old]
    return kept + list(fresh.values())


def write_doc(records: list[dict], out: Path, args: argparse.Namespace, left_out: list[Cell], seconds: float) -> None:
    cells = [rec for rec in records if not rec["control"]]
    controls = [rec for rec in records if rec["control"]]
    learned = sum(1 for rec in cells if rec["learned"])
    today = datetime.date.today().isoformat()
    lines = [
        "# The learning matrix",
        "",
        "Written by `python benchmarks/bench_learning.py`: each cell of `tests/learning/*_cells.py` "
        "runs `trinity run` for its step budget"
        + (" (`--short`: its learning test's, or at most 40 steps)" if args.short else "")
        + " with fixed seeds (seed "
        f"{args.seed}) on a tiny model built locally (nothing is downloaded). A cell learns when its "
        "measure (the mean of its first steps against the mean of its last) moves the right way by at "
        "least its margin. The CI learning tests (`tests/learning`) run some of these cells on shorter "
        "budgets. Wall times include `trinity run`'s start-up; with `--jobs 2` two cells share the "
        "machine.",
        "",
        f"Last written {today} on {platform.machine()}, {_cores()} cores, {args.jobs} cell(s) at a time"
        + (f", {seconds / 60:.0f} minutes for the rows run then" if seconds else "")
        + f": **{learned} of {len(cells)} cells learn by their margin**.",
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
    lines += [f"![every cell's measure per step]({out.with_suffix('.png').name})", ""]
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
    parser.add_argument("--controls", action="store_true", help="also run each cell's controls")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once")
    parser.add_argument("--update", action="store_true", help="keep the other rows of the last written matrix")
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
            described = row.result.describe() if row.result else f"failed to run: {row.error}"
            print(f"[{len(rows)}/{len(plan)}] {row.label}: {described}", flush=True)

        runs = [
            (cell, workspace, root / "runs" / slug(cell, control), args.seed, control, args.short)
            for cell, control in plan
        ]
        if args.jobs == 1:  # in this thread: a runner that runs trinity in this process sets signal handlers
            for run in runs:
                finished(run_row(*run))
        else:
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                for future in concurrent.futures.as_completed([pool.submit(run_row, *run) for run in runs]):
                    finished(future.result())
        rows.sort(key=lambda row: plan.index((row.cell, row.control)))
        records = [record(row) for row in rows]
        if args.update:
            records = merged(records, args.out.with_suffix(".json"), cells)
        ends = {rec["cell"]: rec["end"] for rec in records if rec["end"] is not None and not rec["control"]}
        for row in rows:
            if row.cell.baseline is not None:
                row.baseline_end = ends.get(row.cell.baseline.name, math.nan)
        fresh = {row.label: record(row) for row in rows}  # again, with the baselines' ends
        records = [fresh.get(rec["cell"], rec) for rec in records]
        left_out = [cell for cell in left_out if cell.name not in {rec["cell"] for rec in records}]
        write_doc(records, args.out, args, left_out, time.monotonic() - started)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
