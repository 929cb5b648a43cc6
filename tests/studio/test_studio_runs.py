"""Runs from the studio, without a browser: what starting, reading and stopping one refuses, and a
run of our own CLI that fails at its start (in ~3 s: a dotted workflow path only the run imports)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil
import yaml
from fastapi.testclient import TestClient

from trinity.studio.app import create_app
from trinity.studio.runs import RUNS_DIR

TOKEN = "runs-test-token"
MODEL = {"model_path": "model", "max_prompt_tokens": 8, "max_response_tokens": 8}
FAILS_AT_START = {
    "project": "p",
    "name": "n",
    "model": MODEL,
    "buffer": {
        "batch_size": 4,
        "explorer_input": {"taskset": {"path": "tasks.jsonl", "default_workflow_type": "no_such_module.Workflow"}},
    },
}
"""Checks in the studio (a dotted path is left to the run), fails in ``trinity run``'s own check."""


def client(root: Path, token: str | None = TOKEN) -> TestClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(create_app(root=root, token=TOKEN), base_url="http://127.0.0.1", headers=headers)


def write(path: Path, tree: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(tree))
    return path


def test_a_run_is_refused_outside_the_folder_for_a_missing_file_and_for_a_config_with_errors(tmp_path):
    root = tmp_path / "root"
    outside = write(tmp_path / "outside.yaml", FAILS_AT_START)
    write(root / ".hidden" / "run.yaml", FAILS_AT_START)
    buffer = {**FAILS_AT_START["buffer"], "batch_size": "abc"}
    write(root / "broken.yaml", {**FAILS_AT_START, "buffer": buffer, "monitr": {}})
    studio = client(root)
    for path, status, says in (
        (str(outside), 403, "outside"),
        ("../outside.yaml", 403, "outside"),
        (".hidden/run.yaml", 403, "dot-folder"),
        ("run.txt", 400, ".yaml or .yml"),
        ("missing.yaml", 404, "save the config first"),
    ):
        answer = studio.post("/api/runs", json={"path": path})
        assert answer.status_code == status and says in answer.json()["detail"], (path, answer.text)
    broken = studio.post("/api/runs", json={"path": "broken.yaml"})
    assert broken.status_code == 422
    assert broken.json()["detail"].startswith(f"not started: {root / 'broken.yaml'} has 2 error(s) (")
    assert "buffer.batch_size: expected int, got str 'abc'" in broken.json()["detail"]
    assert {e["path"] for e in broken.json()["errors"]} == {"buffer.batch_size", "monitr"}
    assert not (root / RUNS_DIR).exists()  # nothing started
    assert studio.get("/api/runs").json() == {"runs": []}


def test_an_unknown_run_is_a_404(tmp_path):
    studio = client(tmp_path)
    answer = studio.get("/api/runs/20261203-000000-x")
    assert (
        answer.status_code == 404 and answer.json()["detail"] == f"no run '20261203-000000-x' in {tmp_path / RUNS_DIR}"
    )
    for run_id in ("20261203-000000-x", "..", "..%2F..%2Fetc", "%2E%2E"):  # looked up among the runs, never a path
        assert studio.get(f"/api/runs/{run_id}").status_code == 404
        assert studio.post(f"/api/runs/{run_id}/stop", json={}).status_code == 404


def wait_until_ended(studio: TestClient, run_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while (run := studio.get(f"/api/runs/{run_id}").json())["status"] == "running":
        assert time.monotonic() < deadline, f"the run did not end in {timeout} s: {run['log'][-2000:]}"
        time.sleep(0.2)
    return run


def test_a_second_start_while_it_runs_is_a_409_and_a_run_that_fails_is_listed_failed_with_its_log(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TRINITY_STUDIO_TOKEN", TOKEN)
    write(tmp_path / "run.yaml", FAILS_AT_START)
    studio = client(tmp_path)
    started = studio.post("/api/runs", json={"path": "run.yaml"})
    assert started.status_code == 201, started.text
    run = started.json()
    record = json.loads((tmp_path / RUNS_DIR / run["id"] / "run.json").read_text())
    child = psutil.Process(record["pid"])
    assert child.cmdline()[1:] == ["-m", "trinity.cli", "run", "--config", str(tmp_path / "run.yaml")]
    assert child.cwd() == str(tmp_path) and "TRINITY_STUDIO_TOKEN" not in child.environ()
    assert run["status"] == "running" and run["config"] == str(tmp_path / "run.yaml")
    assert re.fullmatch(r"\d{8}-\d{6}-run", run["id"])  # when, and the file's name
    again = studio.post("/api/runs", json={"path": str(tmp_path / "run.yaml")})
    assert again.status_code == 409 and f"running already (run {run['id']})" in again.json()["detail"]
    # a studio started again (not the run's parent) tells the run by its pid and start time
    assert client(tmp_path).get("/api/runs").json()["runs"][0]["status"] == "running"

    ended = wait_until_ended(studio, run["id"])
    assert ended["status"] == "failed" and ended["returncode"] == 2
    assert "unknown workflow 'no_such_module.Workflow'" in ended["log"]
    assert (tmp_path / RUNS_DIR / run["id"] / "run.log").read_text() == ended["log"]
    restarted = client(tmp_path).get("/api/runs").json()["runs"]
    assert [(r["id"], r["status"]) for r in restarted] == [(run["id"], "failed")]
    stop = studio.post(f"/api/runs/{run['id']}/stop", json={})
    assert stop.status_code == 409 and stop.json()["detail"] == f"run {run['id']} is not running: failed"
    (tmp_path / RUNS_DIR / "20261203-000000-x").mkdir()
    (tmp_path / RUNS_DIR / "20261203-000000-x" / "run.json").write_text('{"not": "a record"}')
    assert [r["id"] for r in client(tmp_path).get("/api/runs").json()["runs"]] == [run["id"]]  # skipped
