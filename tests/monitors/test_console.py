"""The core's console monitor, the monitor group and create_monitors (no tracker needed)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import numpy as np
import pytest
from monitor_testdata import CONFIG, NAME, PROJECT, ROWS

from trinity.monitor.base import CONSOLE, Monitor, MonitorError, MonitorGroup, create_monitors, monitor_names
from trinity.monitor.console import ConsoleMonitor, read_jsonl
from trinity.plugins import UnknownPluginError


def without_timestamp(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "timestamp"}


def test_console_appends_each_logged_dict_with_its_step_and_prints_a_progress_line(tmp_path, caplog):
    started = time.time()
    monitor = ConsoleMonitor(PROJECT, NAME, "explorer", tmp_path)
    with caplog.at_level(logging.INFO, logger="trinity.console"):
        monitor.log({"critic/score/mean": 0.123456, "time/step": np.float32(1.5)}, step=1)
        monitor.log({"critic/score/mean": 0.5}, step=2)
    # flushed per line: readable before close, as after a crash
    records = read_jsonl(tmp_path / "monitor" / "explorer.jsonl")
    assert [without_timestamp(r) for r in records] == [
        {"step": 1, "critic/score/mean": 0.123456, "time/step": 1.5},
        {"step": 2, "critic/score/mean": 0.5},
    ]
    assert started <= records[0]["timestamp"] <= records[1]["timestamp"] <= time.time()
    assert "[explorer] step:1 - critic/score/mean:0.1235 - time/step:1.5" in caplog.text
    monitor.close()


def test_console_keeps_tables_in_their_own_file_and_reopening_appends(tmp_path):
    monitor = ConsoleMonitor(PROJECT, NAME, "trainer", tmp_path)
    monitor.log_table("rollout_examples", ROWS, step=3)
    monitor.close()
    again = ConsoleMonitor(PROJECT, NAME, "trainer", tmp_path)
    again.log({"actor/pg_loss": 0.1}, step=4)
    again.close()
    assert read_jsonl(tmp_path / "monitor" / "trainer_tables.jsonl") == [
        {"step": 3, "table": "rollout_examples", "rows": ROWS}
    ]
    assert [without_timestamp(r) for r in read_jsonl(tmp_path / "monitor" / "trainer.jsonl")] == [
        {"step": 4, "actor/pg_loss": 0.1}
    ]


def test_monitor_names_always_start_with_console_once():
    assert monitor_names("wandb") == [CONSOLE, "wandb"]
    assert monitor_names(["console", "wandb", "tensorboard", "wandb"]) == [CONSOLE, "wandb", "tensorboard"]
    assert monitor_names([]) == [CONSOLE]


class Flaky(Monitor):
    """A monitor whose tracker broke mid-run: every call raises."""

    calls = 0

    def _fail(self, *args):
        self.calls += 1
        raise ConnectionError("tracker went away")

    log = log_table = close = _fail


def test_a_monitor_failing_during_a_run_is_logged_once_and_the_others_keep_logging(tmp_path, caplog):
    flaky = Flaky(PROJECT, NAME, "trainer", tmp_path)
    group = MonitorGroup({"flaky": flaky, CONSOLE: ConsoleMonitor(PROJECT, NAME, "trainer", tmp_path)})
    with caplog.at_level(logging.DEBUG, logger="trinity.monitor.base"):
        for step in range(3):
            group.log({"actor/pg_loss": float(step)}, step)
        group.log_table("examples", ROWS, step=3)
        group.close()
    assert flaky.calls == 5
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "monitor flaky failed in log (training goes on; further ConnectionError errors of this monitor are not repeated)",
        "monitor flaky failed in log_table (training goes on; further ConnectionError errors of this monitor are not repeated)",
        "monitor flaky failed in close (training goes on; further ConnectionError errors of this monitor are not repeated)",
    ]
    assert [r["step"] for r in read_jsonl(tmp_path / "monitor" / "trainer.jsonl")] == [0, 1, 2]


def test_create_monitors_builds_console_from_the_plugin_registry(tmp_path):
    with create_monitors([], PROJECT, NAME, "explorer", tmp_path, {}, CONFIG) as group:
        assert list(group.monitors) == [CONSOLE]
        group.log({"rollout/accuracy/mean": 1.0}, step=1)
    assert [without_timestamp(r) for r in read_jsonl(tmp_path / "monitor" / "explorer.jsonl")] == [
        {"step": 1, "rollout/accuracy/mean": 1.0}
    ]


def test_an_unknown_monitor_name_fails_with_the_installed_names(tmp_path):
    with pytest.raises(
        UnknownPluginError,
        match=r"unknown monitor 'tensorbord'; did you mean 'tensorboard'.*installed monitors: console, ",
    ):
        create_monitors("tensorbord", PROJECT, NAME, "explorer", tmp_path)


def test_a_monitor_that_cannot_start_fails_the_run_at_its_start(tmp_path, closed_port):
    uri = f"http://127.0.0.1:{closed_port}"
    with pytest.raises(MonitorError, match=rf"monitor 'mlflow' failed to start for trainer: cannot reach .*{uri}"):
        create_monitors(["mlflow"], PROJECT, NAME, "trainer", tmp_path, {"uri": uri})


def test_importing_the_monitor_interface_loads_no_tracker_or_torch():
    heavy = ("torch", "wandb", "mlflow", "tensorboard", "ray")
    code = (
        "import sys, trinity.monitor.base, trinity.monitor.console, trinity.monitor.metrics, trinity.monitor.timeline;"
        f"print([m for m in sys.modules if m.split('.')[0] in {heavy!r}])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
