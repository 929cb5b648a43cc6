"""The mlflow monitor, read back with MLflow's client from a local sqlite store."""

import base64
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def test_explorer_and_trainer_starting_together_share_one_new_local_store(tmp_path):
    """Both roles of `mode: both` start at once; the first creates the sqlite schema, the other waits."""
    code = (
        "import sys; from trinity_monitors.mlflow import MlflowMonitor;"
        f"m = MlflowMonitor({PROJECT!r}, {NAME!r}, sys.argv[1], {str(tmp_path)!r});"
        "[m.log({'time/step': float(i)}, i) for i in range(50)]; m.close()"
    )
    roles = ("explorer", "trainer")
    processes = [subprocess.Popen([sys.executable, "-c", code, role], stderr=subprocess.PIPE) for role in roles]
    assert [p.wait(timeout=120) for p in processes] == [0, 0], [p.stderr.read().decode()[-2000:] for p in processes]

    client = MlflowClient(f"sqlite:///{tmp_path}/monitor/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name(PROJECT).experiment_id])
    assert sorted(run.info.run_name for run in runs) == [f"{NAME}_{role}" for role in roles]
    for run in runs:
        assert len(client.get_metric_history(run.info.run_id, "time/step")) == 50


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


@pytest.fixture
def refusing_server():
    """A local HTTP server that answers 401 to everything and records the credentials sent."""
    seen: list[str] = []

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b"You are not authenticated.")

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()
    server.server_close()


def test_refused_credentials_fail_at_construction_and_monitor_args_override_the_env(
    tmp_path, refusing_server, monkeypatch
):
    uri, seen = refusing_server
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "env-user")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "env-password")
    args = {"uri": uri, "username": "alice", "password": "wrong"}
    with pytest.raises(
        MonitorError, match=rf"mlflow could not start run 'exp_trainer' in experiment 'proj' at {uri}.*401"
    ):
        mlflow_monitor.MlflowMonitor(PROJECT, NAME, "trainer", tmp_path, args)
    assert f"Basic {base64.b64encode(b'alice:wrong').decode()}" in seen
