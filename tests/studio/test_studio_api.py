"""The studio's HTTP side without a browser: checking, YAML leaves, loading and saving files."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import yaml
from fastapi.testclient import TestClient

from helpers.ports import free_port
from trinity.studio.app import create_app

TOKEN = "api-test-token"


def client(config_path=None, root=None) -> TestClient:
    """A client that sends the token, of a studio saving in ``root`` (the file's folder by default)."""
    root = root or (config_path.parent if config_path else Path.cwd())
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return TestClient(create_app(config_path, root=root, token=TOKEN), base_url="http://127.0.0.1", headers=headers)


def test_check_reports_errors_by_dotted_key_as_config_check_does():
    result = client().post("/api/check", json={"config": {"buffer": {"batch_size": "abc"}, "monitr": {}}}).json()
    errors = {e["path"]: e["message"] for e in result["errors"]}
    assert errors["buffer.batch_size"] == "expected int, got str 'abc'"
    assert errors["monitr"] == "unknown key; did you mean 'monitor'?"


def test_a_yaml_leaf_is_parsed_and_a_broken_one_is_an_error_at_its_key():
    ok = {"algorithm": {"kl_loss_fn_args": {"__yaml__": "{kl_coef: 0.1}"}}}
    result = client().post("/api/check", json={"config": ok}).json()
    assert "kl_coef: 0.1" in result["yaml"]
    bad = {"algorithm": {"kl_loss_fn_args": {"__yaml__": "{kl_coef: [1"}}}
    errors = client().post("/api/check", json={"config": bad}).json()["errors"]
    assert [e["path"] for e in errors] == ["algorithm.kl_loss_fn_args"]
    assert errors[0]["message"].startswith("not valid YAML")


def test_gpu_split_follows_the_cluster_and_engines():
    tree = {
        "cluster": {"node_num": 2, "gpu_per_node": 8},
        "explorer": {"rollout_model": {"engine_num": 2, "tensor_parallel_size": 2}},
    }
    gpu = client().post("/api/check", json={"config": tree}).json()["gpu"]
    assert (gpu["total"], gpu["rollout"], gpu["trainer"]) == (16, 4, 12)


def test_load_keeps_interpolations_and_refuses_what_is_not_a_config():
    loaded = client().post("/api/load", json={"text": "checkpoint_root_dir: ${oc.env:ROOT,./c}\n"}).json()
    assert loaded["config"] == {"checkpoint_root_dir": "${oc.env:ROOT,./c}"}
    broken = client().post("/api/load", json={"text": "a: [1\n"})
    assert broken.status_code == 400 and broken.json()["detail"].startswith("not valid YAML")
    for text in ("- 1\n", "1\n", "false\n"):
        listed = client().post("/api/load", json={"text": text})
        assert listed.status_code == 400 and "mapping" in listed.json()["detail"]


def test_a_value_json_cannot_carry_loads_as_a_yaml_leaf_and_saves_as_written():
    loaded = client().post("/api/load", json={"text": "trainer: {grad_clip: .inf, x: [-.inf, .nan]}\n"})
    tree = {"trainer": {"grad_clip": {"__yaml__": ".inf"}, "x": [{"__yaml__": "-.inf"}, {"__yaml__": ".nan"}]}}
    assert loaded.status_code == 200 and loaded.json()["config"] == tree
    saved = yaml.safe_load(client().post("/api/check", json={"config": tree}).json()["yaml"])
    assert saved["trainer"]["grad_clip"] == float("inf") and saved["trainer"]["x"][0] == float("-inf")


def test_a_body_of_the_wrong_shape_is_a_422_naming_the_field(tmp_path):
    """FastAPI's own reply echoes the value, and failed (a 500) on a NaN."""
    for body, field in (('{"config": {}, "path": NaN}', "path"), ('{"config": 1}', "config"), ("[1", "body")):
        answer = client(root=tmp_path).post("/api/save", content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 422 and answer.json()["detail"].startswith(field), answer.text
    assert not list(tmp_path.iterdir())


def test_save_writes_the_users_keys_in_schema_order_and_gives_the_command(tmp_path):
    target = tmp_path / "sub" / "run.yaml"
    tree = {"buffer": {"batch_size": 8}, "project": "p", "name": "n"}
    body = {"config": tree, "path": str(target), "save_anyway": True}
    saved = client(root=tmp_path).post("/api/save", json=body).json()
    assert list(yaml.safe_load(target.read_text())) == ["project", "name", "buffer"]
    assert saved["command"] == f"trinity run --config {target}"
    folder = client(root=tmp_path).post("/api/save", json={"config": tree, "path": str(tmp_path / "sub")})
    assert folder.status_code == 400 and "not a folder" in folder.json()["detail"]


def test_the_studio_opens_the_file_it_was_given(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("project: p\nbuffer: {batch_size: 4}\n")
    initial = client(path).get("/api/initial").json()
    assert initial == {"config": {"project": "p", "buffer": {"batch_size": 4}}, "path": str(path)}
    page = client(path).get(f"/?token={TOKEN}")
    assert page.status_code == 200 and "studio.js" in page.text


def test_trinity_studio_prints_a_new_token_and_serves_the_file_on_the_given_port(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("project: p\n")
    tokens = []
    for _ in range(2):
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "trinity.cli", "studio", "run.yaml", "--port", str(port)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            url = urlparse(server.stdout.readline().strip().removeprefix("trinity studio on "))
            assert (url.netloc, url.path) == (f"127.0.0.1:{port}", "/")
            token = parse_qs(url.query)["token"][0]
            assert len(token) >= 40
            assert server.stdout.readline().strip() == f"Save writes inside {tmp_path} (Ctrl+C stops it)"
            initial = wait_for(f"http://127.0.0.1:{port}/api/initial", token)
            assert initial.json() == {"config": {"project": "p"}, "path": str(path)}
            assert httpx.get(f"http://127.0.0.1:{port}/api/initial").status_code == 401
            tokens.append(token)
        finally:
            server.terminate()
            server.wait(timeout=10)
    assert tokens[0] != tokens[1]  # one per launch


def test_trinity_studio_takes_a_token_and_a_root_and_refuses_a_file_outside_it(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    port = free_port()
    monkeypatch.setenv("TRINITY_STUDIO_TOKEN", "from the env&more")
    server = subprocess.Popen(
        [sys.executable, "-m", "trinity.cli", "studio", "--root", str(root), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert (
            server.stdout.readline().strip()
            == f"trinity studio on http://127.0.0.1:{port}/?token=from%20the%20env%26more"
        )
        initial = wait_for(f"http://127.0.0.1:{port}/api/initial", "from the env&more")
        assert initial.json() == {"config": {}, "path": str(root / "config.yaml")}
    finally:
        server.terminate()
        server.wait(timeout=10)
    outside = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "studio", str(tmp_path / "x.yaml"), "--root", str(root), "--token", "t"],
        capture_output=True,
        text=True,
    )
    assert outside.returncode == 2 and outside.stdout == ""
    assert outside.stderr.strip() == (
        f"error: {tmp_path / 'x.yaml'} is outside {root}, the folder the studio saves in: "
        "start it in the file's folder or pass --root"
    )
    empty = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "studio", "--token", ""], capture_output=True, text=True
    )
    assert empty.returncode == 2 and "non-empty" in empty.stderr


def wait_for(url: str, token: str) -> httpx.Response:
    """The studio's answer to a GET with the token, once it listens (60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the studio did not answer in 60 s"
            time.sleep(0.2)
