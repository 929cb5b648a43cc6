"""The mlflow monitor, read back with MLflow's client from a local sqlite store."""

import json
import time

import pytest
from monitor_testdata import CONFIG, NAME, PROJECT, ROWS

from trinity.monitor.base import MonitorError

mlflow_monitor = pytest.importorskip("trinity_monitors.mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


def test_two_roles_log_two_runs_with_metrics_params_and_tables(tmp_path):
    for role in ("explorer", "trainer"):
        monitor = mlflow_monitor.MlflowMonitor(PROJECT, NAME, role, tmp_path, {}, CONFIG)
        assert monitor.tracking_uri == f"sqlite:///{tmp_path}/monitor/mlflow.db"
        monitor.log({"critic/score/mean": 0.5, "eval/gsm8k/accuracy/mean@4": 0.25}, step=1)
        monitor.log({"critic/score/mean": 0.75}, step=2)
        monitor.log_table("rollout_examples", ROWS, step=2)
        monitor.close()

    client = MlflowClient(f"sqlite:///{tmp_path}/monitor/mlflow.db")
    experiment = client.get_experiment_by_name(PROJECT)
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {f"{NAME}_explorer", f"{NAME}_trainer"}
    run = runs[f"{NAME}_trainer"]
    assert run.info.status == "FINISHED"
    assert run.data.params == {
        "project": PROJECT,
        "name": NAME,
        "algorithm.algorithm_type": "grpo",
        "algorithm.repeat_times": "4",
        "tags": "[1, 2]",
    }
    history = client.get_metric_history(run.info.run_id, "critic/score/mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.75)]
    assert run.data.metrics["eval/gsm8k/accuracy/mean_at_4"] == 0.25
    path = client.download_artifacts(run.info.run_id, "tables/rollout_examples/step_2.json", str(tmp_path))
    table = json.loads(open(path).read())
    assert [dict(zip(table["columns"], row, strict=True)) for row in table["data"]] == ROWS


def test_metric_and_param_names_are_made_valid_for_mlflow():
    assert mlflow_monitor.mlflow_key("eval/math/accuracy/best@16") == "eval/math/accuracy/best_at_16"
    assert mlflow_monitor.mlflow_key("a[0]=b") == "a_0__b"
    assert mlflow_monitor.flatten({"a": {"b": "x" * 7000, "c": {}}})["a.b"] == "x" * 6000


def test_an_unreachable_server_fails_at_construction_with_a_clear_message(tmp_path, closed_port):
    uri = f"http://127.0.0.1:{closed_port}"
    start = time.monotonic()
    with pytest.raises(MonitorError, match=rf"cannot reach the MLflow tracking server at {uri} .*monitor_args.uri"):
        mlflow_monitor.MlflowMonitor(PROJECT, NAME, "trainer", tmp_path, {"uri": uri})
    assert time.monotonic() - start < 5
