"""``trinity run``'s progress display: it tails the metrics files the roles' console monitors write."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest

from trinity.config.schema import Config
from trinity.monitor.console import ConsoleMonitor
from trinity.progress import PLANNED_STEPS_FILE, Interval, ProgressDisplay, RoleProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def job_config(tmp_path: Path, interval: int | str) -> Config:
    config = Config(checkpoint_root_dir=str(tmp_path), project="p", name="n")
    config.checkpoint_job_dir = str(tmp_path / "p" / "n")
    config.monitor.console_interval = interval
    return config


def monitor(config: Config, role: str) -> ConsoleMonitor:
    return ConsoleMonitor("p", "n", role, config.checkpoint_job_dir, {}, {})


def test_a_role_is_read_from_the_tail_of_its_file_a_partial_line_waiting(tmp_path: Path):
    path = tmp_path / "explorer.jsonl"
    progress = RoleProgress("explorer", path, total=4)
    assert not progress.poll()  # no file yet: nothing, no error
    record = json.dumps({"step": 1, "timestamp": time.time() - 2, "rollout/reward/mean": 0.25})
    path.write_text(record + "\n" + record[:10])  # the second line is still being written
    assert progress.poll() and progress.step == 1
    with path.open("a") as file:
        file.write(json.dumps({"step": 2, "timestamp": time.time(), "rollout/reward/mean": 0.5})[10:] + "\n")
    assert not progress.poll()  # the completed line was step 1's copy
    with path.open("a") as file:
        file.write(json.dumps({"step": 3, "timestamp": time.time(), "rollout/reward/mean": 0.75}) + "\n")
    assert progress.poll() and progress.step == 3
    line = progress.line()
    assert re.fullmatch(r"\[explorer\] step 3/4 \(75%\) [\d.]+ step/s ETA \d+s reward 0\.75", line), line


@pytest.mark.parametrize(
    ("value", "expected"), [(10, Interval(steps=10)), ("30s", Interval(seconds=30.0)), ("0.5s", Interval(seconds=0.5))]
)
def test_console_interval_is_steps_or_seconds(value, expected):
    assert Interval.parse(value) == expected


def test_off_a_terminal_a_plain_line_per_interval_and_a_last_one(tmp_path: Path):
    config = job_config(tmp_path, 2)
    trainer = monitor(config, "trainer")
    out = io.StringIO()
    display = ProgressDisplay(config, ["trainer"], out)
    display.set_total("trainer", 5)
    planned = Path(config.checkpoint_job_dir) / PLANNED_STEPS_FILE  # for the studio, which follows the job folder
    assert json.loads(planned.read_text()) == {"trainer": 5}
    for step in range(1, 6):
        trainer.log({"actor/pg_loss": 1.0 / step}, step)
        display.update()
    display.close()
    trainer.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["[trainer] step 2/5", "[trainer] step 4/5", "[trainer] step 5/5"]
    assert lines[-1].startswith("[trainer] step 5/5 (100%)") and "pg_loss 0.2" in lines[-1]


def test_a_resumed_run_counts_its_progress_from_where_it_resumed(tmp_path: Path):
    config = job_config(tmp_path, 1)
    explorer = monitor(config, "explorer")
    for step in (1, 2, 3):  # the run before the crash
        explorer.log({"rollout/reward/mean": 0.1}, step)
    out = io.StringIO()
    display = ProgressDisplay(config, ["explorer"], out)
    display.update()
    assert out.getvalue() == ""  # earlier steps are history
    explorer.log({"rollout/reward/mean": 0.2}, 4)
    display.update()
    explorer.close()
    assert out.getvalue().startswith("[explorer] step 4 reward 0.2")


def test_on_a_terminal_each_role_has_a_bar_with_its_total(tmp_path: Path):
    config = job_config(tmp_path, "3600s")
    roles = {role: monitor(config, role) for role in ("explorer", "trainer")}
    terminal = Terminal()
    display = ProgressDisplay(config, list(roles), terminal)
    display.set_total("explorer", 3)
    for step in (1, 2, 3):
        roles["explorer"].log({"rollout/reward/mean": 0.5}, step)
        roles["trainer"].log({"actor/pg_loss": 0.1}, step)
        display.update()
    bars = display._bars
    assert (bars["explorer"].n, bars["explorer"].total, bars["trainer"].n, bars["trainer"].total) == (3, 3, 3, None)
    display.close()
    shown = terminal.getvalue()
    assert "explorer: 100%" in shown and "reward=0.5" not in shown and "reward 0.5" in shown
    assert "[trainer] step 3 " in shown  # the last line of each role, above the bars
