"""The learning matrix: cells of (task, config, measure, margin), run by the learning tests
(short budgets, in CI: tests/learning) and by benchmarks/bench_learning.py (every cell, its
full budget; it writes docs/learning.md).

A cell is the quickstart config (examples/quickstart/quickstart.yaml without its stages) with
dotlist overrides over the data and models of a :class:`Workspace`, run as ``trinity run``
runs it: :func:`run_cell` calls ``trinity.launcher.run`` in this process (the tests share one
Ray) or the CLI in a subprocess (the benchmark). Its measure is one metric of
``monitor/<role>.jsonl``: its first value, the policy before any update (the first explorer step
samples the weights the run started with; an evaluation's first is at step 0; a trainer's first
loss is taken before its first optimizer step; serve mode's first two steps, both sampled
before the first is committed), against the mean of its last ``window`` values;
the cell learns when that moves the right way by at least ``margin``.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import OmegaConf

from helpers.quickstart import QUICKSTART, quickstart_config

PLUGINS = Path(__file__).with_name("plugins")
"""The learning runs' own plugins (broken mechanisms for the controls, task rewards), loaded
by every learning run through ``TRINITY_PLUGIN_DIRS``: :func:`plugin_env`."""
PROJECT, NAME = "learning", "cell"
FORMAT = "{prompt_type: plaintext, prompt_key: question, response_key: answer, system_prompt: Answer with the sum.}"
"""The arithmetic rows' format (the quickstart's)."""


DIP_WINDOW = 10
"""Steps of the running mean whose fall below the start counts as a collapse (:attr:`CellResult.dip`)."""


@dataclass(frozen=True)
class Measure:
    """Which metric shows learning, and which way it should move; ``window``: the values whose
    mean is the end; ``start_steps``: the first values, all sampled before any update, whose mean
    is the start (more than one where the run guarantees it: serve mode)."""

    key: str = "rollout/reward/mean"
    role: str = "explorer"
    start_steps: int = 1
    window: int = 5
    higher_is_better: bool = True
    label: str = "reward"

    def points(self, job_dir: Path) -> list[tuple[int, float]]:
        """``(step, value)`` of the metric in step order (steps without it are skipped)."""
        from trinity.monitor.console import read_jsonl

        path = job_dir / "monitor" / f"{self.role}.jsonl"
        rows = read_jsonl(path) if path.exists() else []
        return [(int(row["step"]), float(row[self.key])) for row in rows if isinstance(row.get(self.key), int | float)]

    def series(self, job_dir: Path) -> list[float]:
        """The metric's values in step order."""
        return [value for _, value in self.points(job_dir)]

    def start_end(self, values: Sequence[float]) -> tuple[float, float]:
        """The mean of the first ``start_steps`` values (before any update) and of the last
        ``window`` after them."""
        first = self.start_steps
        if len(values) <= first:
            return math.nan, math.nan
        k = min(self.window, len(values) - first)
        return sum(values[:first]) / first, sum(values[-k:]) / k

    def dip(self, values: Sequence[float]) -> float:
        """How far the worst running mean of :data:`DIP_WINDOW` values (fewer in a shorter series)
        falls below the start, in the bad direction; 0 when none does."""
        start = self.start_end(values)[0]
        if math.isnan(start):
            return math.nan
        first = self.start_steps
        k = min(DIP_WINDOW, len(values) - first)
        means = [sum(values[i : i + k]) / k for i in range(first, len(values) - k + 1)]
        worst = min(means) if self.higher_is_better else max(means)
        return max(0.0, (start - worst) if self.higher_is_better else (worst - start))


RL_START = "warm_40"
"""The RL cells' start model. From the quickstart's warm model (0.70 right) one update at lr 1e-3
drops the reward to about 0.35 and GRPO needs 40 steps to pass its start again (a change of +0.19
over the step before any update, where the earlier 5-step start window read +0.35); at lr 3e-4,
or with a 10-step lr warm-up, there is no collapse but 40 steps gain +0.10 to +0.15, the model
being near its ceiling. From 40 SFT steps (0.17 at step 1) the reward rises from the first steps."""


class Workspace:
    """The models and data the cells share, built once under ``root`` (nothing is downloaded).

    ``tiny_model``: a random Qwen2-architecture model with a locally trained tokenizer;
    ``warm_model``: that model after the quickstart's SFT warm-up (60 full-batch steps on the 25
    sums), whose samples are right about 0.7 of the time (the quickstart's start); ``warmed(40)``:
    after 40 of those steps, right about a fifth of the time, the RL cells' start (:data:`RL_START`):
    room to rise, varied groups, and at the quickstart's lr 1e-3 no collapse below its start;
    ``data``: the quickstart's arithmetic tasks and SFT rows, and what the cells' makers add.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"

    def _built(self, name: str) -> Path:
        """``root/name``, written by ``trinity.testing.tiny_model.build_<name>`` the first time."""
        path = self.root / name
        if not (path / "config.json").exists():
            from trinity.testing import tiny_model

            getattr(tiny_model, f"build_{name}")(str(path))
        return path

    @property
    def tiny_model(self) -> Path:
        return self._built("tiny_model")

    @property
    def tiny_moe_model(self) -> Path:
        return self._built("tiny_moe_model")

    @property
    def arithmetic(self) -> Path:
        if not (self.data / "tasks.jsonl").exists():
            subprocess.run([sys.executable, str(QUICKSTART / "make_data.py"), str(self.data)], check=True)
        return self.data

    @property
    def warm_model(self) -> Path:
        return self.warmed(60)

    def start_model(self, name: str) -> Path:
        """A cell's start by name: "tiny", "warm", "warm_N" (:meth:`warmed` for N steps) or
        "warm_moe" (the tiny Qwen3-MoE model after the same 60 steps)."""
        if name == "tiny":
            return self.tiny_model
        if name == "warm_moe":
            return self.warmed(60, moe=True)
        return self.warmed(60 if name == "warm" else int(name.removeprefix("warm_")))

    def warmed(self, epochs: int, moe: bool = False) -> Path:
        """The tiny model (``moe``: the tiny MoE model) after ``epochs`` full-batch SFT steps on
        the 25 sums (built once)."""
        name = f"warm{'_moe' if moe else ''}_model"
        path = self.root / (name if epochs == 60 else f"{name}_{epochs}")
        if not (path / "config.json").exists():
            out = self.root / f"warmup{'_moe' if moe else ''}_{epochs}"
            config = base_config(out, self.tiny_moe_model if moe else self.tiny_model, self.arithmetic)
            config.merge_with_dotlist(
                [
                    "mode=train",
                    "algorithm.algorithm_type=sft",
                    "buffer.train_batch_size=25",
                    f"buffer.total_epochs={epochs}",
                    "trainer.save_interval=0",
                    "buffer.trainer_input.experience_buffer={name: sft, storage_type: file, "
                    f"path: {self.arithmetic / 'sft.jsonl'}, format: {FORMAT}}}",
                ]
            )
            (summary,) = _run_in_process(_save(config, out))
            os.replace(summary["model_path"], path)
        return path


def base_config(out_dir: Path, model: Path, data: Path):
    """The quickstart config (no stages, no lr warm-up: the cells' start models do not collapse,
    RL_START) writing under ``out_dir``, on ``model`` and ``data``."""
    return quickstart_config(out_dir, model, data, f"project={PROJECT}", f"name={NAME}", "trainer.save_interval=0")


@dataclass(frozen=True)
class Cell:
    """One row of the learning matrix.

    ``overrides(workspace)`` gives the dotlist over :func:`base_config` (data the cell needs is
    made there, through the workspace); ``steps`` is the benchmark's budget (``buffer.total_steps``)
    and ``test_steps`` the learning test's, where one exists; ``margin`` is the least change of the
    measure, in its direction, that counts as learning. ``runner(cell, workspace, config_path)``, where given, runs the
    cell instead of one ``trinity run`` (its own processes: two-process and serve modes) and
    leaves the metrics in the same job directory. ``baseline``: a cell whose final measure this
    one must reach within ``baseline_margin`` on the same budget (async sync styles against the
    fixed one).
    """

    name: str
    family: str
    overrides: Callable[[Workspace], list[str]]
    steps: int
    margin: float
    measure: Measure = field(default_factory=Measure)
    model: str = RL_START
    """The start: "warm" (60 SFT steps), "warm_N" (N SFT steps) or "tiny" (random weights)."""
    test_steps: int | None = None
    control_steps: int | None = None
    """The controls' budget in CI: a few steps by which the cell itself has moved by its margin
    (its learning test checks that on its own run's first ``control_steps``)."""
    runner: Callable[[Cell, Workspace, Path], None] | None = None
    note: str = ""
    controls: dict[str, Callable[[Workspace], list[str]]] = field(default_factory=dict)
    """The cell with its mechanism broken (label -> extra overrides, e.g. advantages negated):
    it must not learn by the margin, which shows that the cell's measure can fail."""
    baseline: Cell | None = None
    baseline_margin: float = math.nan
    drops_tasks: bool = False
    """over_rollout: the run must drop tasks (``rollout/dropped_tasks``), else it never acted."""

    def config_path(self, workspace: Workspace, out_dir: Path, steps: int, seed: int, extra: Sequence[str]) -> Path:
        config = base_config(out_dir, workspace.start_model(self.model), workspace.arithmetic)
        config.merge_with_dotlist(
            [
                f"buffer.total_steps={steps}",
                f"buffer.seed={seed}",
                f"explorer.rollout_model.seed={seed}",
                *self.overrides(workspace),
                *extra,
            ]
        )
        return _save(config, out_dir)


@dataclass
class CellResult:
    cell: Cell
    steps: int
    series: list[float]
    wall_s: float
    staleness: float = math.nan
    at: list[int] = field(default_factory=list)
    """The step of each value of ``series``."""
    dropped_tasks: int = 0
    """Tasks over_rollout cancelled over the run (``rollout/dropped_tasks``)."""

    @property
    def start(self) -> float:
        return self.cell.measure.start_end(self.series)[0]

    @property
    def end(self) -> float:
        return self.cell.measure.start_end(self.series)[1]

    @property
    def change(self) -> float:
        """The measure's change in its good direction (positive: it learned)."""
        delta = self.end - self.start
        return delta if self.cell.measure.higher_is_better else -delta

    @property
    def learned(self) -> bool:
        return math.isfinite(self.change) and self.change >= self.cell.margin

    @property
    def dip(self) -> float:
        return self.cell.measure.dip(self.series)

    def first(self, steps: int) -> CellResult:
        """This run cut to its values up to step ``steps``: what it had learned by then."""
        kept = sum(1 for step in self.at if step <= steps)
        return replace(self, steps=steps, series=self.series[:kept], at=self.at[:kept])

    def describe(self) -> str:
        m = self.cell.measure
        return (
            f"{self.cell.name}: {m.label} {self.start:.3f} -> {self.end:.3f} over {len(self.series)} steps "
            f"(change {self.change:+.3f}, margin {self.cell.margin}, dip {self.dip:.3f}), {self.wall_s:.0f} s"
        )


def job_dir(out_dir: Path) -> Path:
    return out_dir / "ckpt" / PROJECT / NAME


def run_cell(
    cell: Cell,
    workspace: Workspace,
    out_dir: Path,
    steps: int | None = None,
    seed: int = 0,
    extra: Sequence[str] = (),
    subprocess_run: bool = False,
) -> CellResult:
    """Run ``cell`` for ``steps`` (default: its benchmark budget) under ``out_dir``; its measure
    and wall time. In this process (with the caller's Ray, or one it starts) unless
    ``subprocess_run``; a cell with a ``runner`` always uses the runner."""
    steps = steps or cell.steps
    out_dir.mkdir(parents=True, exist_ok=True)
    config = cell.config_path(workspace, out_dir, steps, seed, extra)
    started = time.monotonic()
    if cell.runner is not None:
        cell.runner(cell, workspace, config)
    elif subprocess_run:
        result = subprocess.run(
            [sys.executable, "-m", "trinity.cli", "run", "--config", str(config)],
            capture_output=True,
            text=True,
            cwd=out_dir,
            env={**os.environ, **plugin_env()},
        )
        if result.returncode:
            raise RuntimeError(f"{cell.name}: trinity run failed\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    else:
        _run_in_process(config)
    wall = time.monotonic() - started
    job = job_dir(out_dir)
    staleness = Measure(key="rollout/staleness/mean").series(job)
    points = cell.measure.points(job)
    return CellResult(
        cell=cell,
        steps=steps,
        series=[value for _, value in points],
        wall_s=wall,
        staleness=sum(staleness) / len(staleness) if staleness else math.nan,
        at=[step for step, _ in points],
        dropped_tasks=int(sum(Measure(key="rollout/dropped_tasks").series(job))),
    )


def cases(*cells: Cell) -> list:
    """pytest parameters ``(cell, control)``: each cell, and each with its first control (the one
    its learning test runs in CI; the others run in the matrix, ``--controls``)."""
    import pytest

    params = []
    for cell in cells:
        short = re.sub(r"\W+", "_", cell.name.split(": ")[-1]).strip("_")
        params.append(pytest.param(cell, None, id=short))
        if cell.controls:
            control = next(iter(cell.controls))
            params.append(pytest.param(cell, control, id=f"{short}-control"))
    return params


def check_learns(cell: Cell, control: str | None, workspace: Workspace, out_dir: Path, **kwargs) -> CellResult:
    """A learning test: ``cell`` for its ``test_steps`` learns by its margin and had by its
    ``control_steps``; with ``control`` (a label of its ``controls``) the same run with that
    mechanism broken, for ``control_steps``, does not. A cell that ``drops_tasks`` must have
    dropped some either way. ``kwargs`` go to :func:`run_cell`."""
    extra = [*kwargs.pop("extra", ()), *(cell.controls[control](workspace) if control else ())]
    steps = cell.control_steps if control else cell.test_steps
    result = run_cell(cell, workspace, out_dir, steps=steps, extra=extra, **kwargs)
    # the measurement, in the test's captured output (pytest -rA shows it for a passing test too)
    print(
        result.describe(), f"[control: {control}]" if control else "", "series:", [round(v, 3) for v in result.series]
    )
    assert not cell.drops_tasks or result.dropped_tasks > 0, f"{cell.name}: over_rollout dropped no task"
    if control:
        assert not result.learned, f"{result.describe()} [control: {control}]: the measure cannot fail"
        return result
    assert result.learned, result.describe()
    if cell.control_steps:
        early = result.first(cell.control_steps)
        print(f"by step {cell.control_steps}:", early.describe())
        assert early.learned, f"{early.describe()}: not learned by the controls' budget"
    return result


def plugin_env() -> dict[str, str]:
    """The environment that loads :data:`PLUGINS` (for this process's Ray and subprocesses)."""
    dirs = [str(PLUGINS), *filter(None, os.environ.get("TRINITY_PLUGIN_DIRS", "").split(os.pathsep))]
    return {"TRINITY_PLUGIN_DIRS": os.pathsep.join(dict.fromkeys(dirs))}


def _save(config, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "config.yaml"
    OmegaConf.save(config, path)
    return path


def _run_in_process(config: Path) -> list[dict]:
    from trinity.launcher import run

    return run(str(config))
