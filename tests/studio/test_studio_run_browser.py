"""A run started, watched and stopped from the studio in a real browser (headless Chromium): the
quickstart's GRPO stage on the tiny model, a real ``trinity run`` with a local Ray (~60 s)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from e2e.e2e_helpers import QUICKSTART, write_experiment
from trinity.studio.runs import RUNS_DIR

PLANNED = 375
"""25 tasks x 60 epochs / 4 per step: the explorer's planned steps (the run is stopped long before)."""


def plotted_points(page, panel: str) -> int:
    """The points the page has drawn in a plot: its polylines' vertices."""
    return page.evaluate(
        f"[...document.querySelectorAll('#plot-{panel} polyline')].reduce((n, p) => n + p.points.numberOfItems, 0)"
    )


@pytest.mark.slow
def test_a_run_is_started_watched_live_stopped_and_listed_stopped_with_its_summary(
    studio, page, tmp_path, tiny_model_dir
):
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(QUICKSTART / "make_data.py"), str(data)], check=True, capture_output=True)
    config = write_experiment(
        tmp_path,
        tiny_model_dir,
        data,
        "buffer.batch_size=4",
        "algorithm.repeat_times=4",
        "buffer.total_epochs=60",
        "trainer.save_interval=1000",
    )
    page.goto(studio(config))
    page.wait_for_selector("#form fieldset")
    asked = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click("#start-run")  # saves the page's config over the file (confirmed), then starts it
    page.wait_for_selector('#run-status[data-status="running"]')
    assert asked == [f"{config} exists. Replace it?"]
    assert page.locator("#run-note").inner_text().startswith("started ")

    page.wait_for_function("document.querySelectorAll('#plot-reward polyline').length > 0", timeout=120_000)
    first = plotted_points(page, "reward")
    page.wait_for_function(
        f"[...document.querySelectorAll('#plot-reward polyline')].reduce((n, p) => n + p.points.numberOfItems, 0) > {first}",
        timeout=60_000,
    )
    assert plotted_points(page, "reward") > first >= 1  # the plot grows as the run logs steps
    assert plotted_points(page, "loss") >= 1
    progress = page.locator("#run-progress").inner_text()
    assert re.search(rf"arithmetic/explorer\] step \d+/{PLANNED} \(\d+%\)", progress), progress
    assert f"job folder: {tmp_path / 'ckpt'}" in page.locator("#run-log").inner_text()  # the log's tail

    page.click("#stop-run")  # Ctrl-C: the trainer saves at its step's end, the run writes its summary
    page.wait_for_selector('#run-status[data-status="stopped"]', timeout=90_000)
    summary = page.locator("#run-summary").inner_text()
    assert "stopped\tby SIGINT" in summary, summary
    steps = int(re.search(r"explorer steps\t(\d+)", summary)[1])
    assert 2 <= steps < PLANNED
    log = page.locator("#run-log").inner_text()
    assert "stopped (SIGINT)" in log and "Traceback" not in log, log
    assert re.search(r"\((Explorer|Trainer)Role pid=\d+\)", log) and "\x1b[" not in log  # without Ray's colours
    (run_id,) = [p.name for p in (tmp_path / RUNS_DIR).iterdir()]
    record = json.loads((tmp_path / RUNS_DIR / run_id / "run.json").read_text())
    assert record["returncode"] == 0 and record["stop_requested"]
    job = tmp_path / "ckpt" / "quickstart" / "arithmetic"
    assert json.loads((job / "meta" / "summary.json").read_text())["stopped"] == "SIGINT"

    page.goto(studio(config))  # a studio started again lists the run, stopped
    page.wait_for_selector(f'#runs li[data-run="{run_id}"][data-status="stopped"]')
