"""The studio's HTTP side without a browser: checking, YAML leaves, loading and saving files."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import yaml
from fastapi.testclient import TestClient

from ports import free_port
from trinity.studio.app import create_app


def client(config_path=None) -> TestClient:
    return TestClient(create_app(config_path), base_url="http://127.0.0.1")


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
    listed = client().post("/api/load", json={"text": "- 1\n"})
    assert listed.status_code == 400 and "mapping" in listed.json()["detail"]


def test_save_writes_the_users_keys_in_schema_order_and_gives_the_command(tmp_path):
    target = tmp_path / "sub" / "run.yaml"
    tree = {"buffer": {"batch_size": 8}, "project": "p", "name": "n"}
    saved = client().post("/api/save", json={"config": tree, "path": str(target)}).json()
    assert list(yaml.safe_load(target.read_text())) == ["project", "name", "buffer"]
    assert saved["command"] == f"trinity run --config {target}"
    folder = client().post("/api/save", json={"config": tree, "path": str(tmp_path)})
    assert folder.status_code == 400 and "not a folder" in folder.json()["detail"]


def test_the_studio_opens_the_file_it_was_given(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("project: p\nbuffer: {batch_size: 4}\n")
    initial = client(path).get("/api/initial").json()
    assert initial == {"config": {"project": "p", "buffer": {"batch_size": 4}}, "path": str(path)}
    page = client(path).get("/")
    assert page.status_code == 200 and "studio.js" in page.text


def test_trinity_studio_serves_the_file_on_the_given_port(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("project: p\n")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "trinity.cli", "studio", str(path), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == f"trinity studio on http://127.0.0.1:{port}/ (Ctrl+C stops it)"
        deadline = time.monotonic() + 60
        while True:
            try:
                initial = httpx.get(f"http://127.0.0.1:{port}/api/initial").json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the studio did not answer in 60 s"
                time.sleep(0.2)
        assert initial == {"config": {"project": "p"}, "path": str(path)}
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_another_sites_page_cannot_make_it_write(tmp_path):
    body = json.dumps({"config": {"project": "x"}, "path": str(tmp_path / "x.yaml")})
    simple = client().post("/api/save", content=body, headers={"Content-Type": "text/plain"})
    assert simple.status_code == 422  # the only cross-site POST a browser sends without asking
    rebound = TestClient(create_app(), base_url="http://attacker.example").post("/api/save", content=body)
    assert rebound.status_code == 400
    assert not (tmp_path / "x.yaml").exists()
