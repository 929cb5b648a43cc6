"""The studio's door (issue 32): a per-launch token, saves kept inside the root, and a check that
runs no code and reads no environment variable or file that the page did not send."""

from __future__ import annotations

import json
import sys
import time

import pytest
from fastapi.testclient import TestClient

from trinity.studio.app import StudioError, create_app
from trinity.studio.runs import RUNS_DIR

TOKEN = "door-test-token"
TASKSET = "buffer.explorer_input.taskset"


def client(root, config_path=None, token: str | None = TOKEN) -> TestClient:
    """A client of a studio saving in ``root``; it sends the token unless ``token`` is None."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(create_app(config_path, root=root, token=TOKEN), base_url="http://127.0.0.1", headers=headers)


def save(studio: TestClient, path, overwrite: bool | None = None, project: str = "p", anyway: bool = True):
    """Save ``{"project": project}`` (a config with errors: saved only ``anyway``) to ``path``."""
    body = {"config": {"project": project}, "path": str(path), "save_anyway": anyway}
    if overwrite is not None:
        body["overwrite"] = overwrite
    return studio.post("/api/save", json=body)


# --- the token -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, url",
    [
        ("GET", "/"),
        ("GET", "/api/schema"),
        ("GET", "/api/initial"),
        ("GET", "/static/studio.js"),
        ("POST", "/api/check"),
        ("POST", "/api/load"),
        ("POST", "/api/save"),
        ("GET", "/api/runs"),
        ("POST", "/api/runs"),
        ("GET", "/api/runs/x"),
        ("POST", "/api/runs/x/stop"),
    ],
)
def test_every_route_needs_the_token(tmp_path, method, url):
    (tmp_path / "run.yaml").write_text("project: x\n")
    body = {"config": {"project": "x"}, "path": "x.yaml", "text": "project: x\n"}
    if url == "/api/runs":
        body = {"path": "run.yaml"}
    for token in (None, "wrong-token"):
        answer = client(tmp_path, token=token).request(method, url, json=body if method == "POST" else None)
        assert answer.status_code == 401, (url, token, answer.text)
        assert "studio.js" not in answer.text
    assert not (tmp_path / "x.yaml").exists() and not (tmp_path / RUNS_DIR).exists()


def test_the_printed_url_sets_a_strict_http_only_cookie_that_opens_the_api(tmp_path):
    browser = client(tmp_path, token=None)
    page = browser.get(f"/?token={TOKEN}")
    assert page.status_code == 200 and "studio.js" in page.text
    cookie = page.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert TOKEN in cookie
    assert browser.get("/api/schema").status_code == 200  # the cookie alone
    assert browser.get("/").status_code == 200
    assert browser.post("/api/check", json={"config": {}}).status_code == 200
    assert client(tmp_path, token=None).get("/?token=nope").status_code == 401


def test_another_sites_page_cannot_post_to_it(tmp_path):
    """A page elsewhere can send ``text/plain`` (no preflight) and, at worst, the cookie: refused
    before any handler runs, on every FastAPI the project allows (not FastAPI's own check)."""
    body = json.dumps({"config": {"project": "x"}, "path": "x.yaml"})
    studio = client(tmp_path)
    plain = studio.post("/api/save", content=body, headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415
    form = studio.post("/api/save", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415
    cross = studio.post(
        "/api/save", content=body, headers={"Content-Type": "text/plain", "Origin": "http://evil.example"}
    )
    assert cross.status_code == 403
    rebound = TestClient(
        create_app(root=tmp_path, token=TOKEN),
        base_url="http://attacker.example",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ).post("/api/save", content=body, headers={"Content-Type": "application/json"})
    assert rebound.status_code == 403
    assert not (tmp_path / "x.yaml").exists()


# --- saving --------------------------------------------------------------------------------


def test_a_relative_path_saves_inside_the_root(tmp_path):
    saved = save(client(tmp_path), "runs/first.yaml")
    assert saved.status_code == 200, saved.text
    assert saved.json()["path"] == str(tmp_path / "runs" / "first.yaml")
    assert (tmp_path / "runs" / "first.yaml").read_text() == "project: p\n"


def test_a_save_outside_the_root_is_refused_naming_the_path_and_the_rule(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "escape.yaml").symlink_to(outside / "escape.yaml")
    studio = client(root)
    for given in (outside / "abs.yaml", "../traversal.yaml", "sub/../../up.yaml", "link/through.yaml", "escape.yaml"):
        answer = save(studio, given, overwrite=True)
        assert answer.status_code == 403, (given, answer.text)
        message = answer.json()["detail"]
        assert str(given) in message and "outside" in message and str(root) in message
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in root.iterdir()) == ["escape.yaml", "link"]


@pytest.mark.parametrize("name", ["evil.pth", "sitecustomize.py", "run.yaml.sh", ".bashrc", "noext"])
def test_only_yaml_files_are_written(tmp_path, name):
    answer = save(client(tmp_path), name)
    assert answer.status_code == 400
    assert name in answer.json()["detail"] and ".yaml" in answer.json()["detail"]
    assert not (tmp_path / name).exists()


def test_a_bad_path_is_a_4xx_not_a_crash(tmp_path):
    (tmp_path / "folder.yaml").mkdir()
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    studio = client(tmp_path)
    for given in ("", "   ", "nul\x00.yaml", "folder.yaml", "loop.yaml", "x" * 300 + ".yaml"):  # too long a name
        answer = save(studio, given, overwrite=True)
        assert 400 <= answer.status_code < 500, (given, answer.text)
        assert answer.json()["detail"]


def test_an_existing_file_is_replaced_only_when_the_request_says_overwrite(tmp_path):
    target = tmp_path / "run.yaml"
    target.write_text("project: mine\n")
    studio = client(tmp_path)
    refused = save(studio, "run.yaml", project="new")
    assert refused.status_code == 409
    assert str(target) in refused.json()["detail"] and "overwrite" in refused.json()["detail"]
    assert target.read_text() == "project: mine\n"
    assert save(studio, "run.yaml", overwrite=False, project="new").status_code == 409
    replaced = save(studio, "run.yaml", overwrite=True, project="new")
    assert replaced.status_code == 200, replaced.text
    assert target.read_text() == "project: new\n"


def test_the_file_it_opens_must_be_inside_the_root(tmp_path):
    (tmp_path / "root").mkdir()
    with pytest.raises(StudioError, match="outside"):
        create_app(tmp_path / "run.yaml", root=tmp_path / "root", token=TOKEN)


# --- what a check reads --------------------------------------------------------------------


@pytest.fixture
def marker_module(tmp_path, monkeypatch):
    """A package on ``sys.path`` whose import (of the package or its module) writes a marker file."""
    package = tmp_path / "importme"
    package.mkdir()
    marker = tmp_path / "imported"
    code = f"open({str(marker)!r}, 'w').close()\n"
    (package / "__init__.py").write_text(code)
    (package / "flow.py").write_text(code + "class Flow:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield marker
    for name in ("importme", "importme.flow"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("dotted", ["importme.flow.Flow", "importme.Flow"])
def test_check_imports_no_dotted_workflow(tmp_path, marker_module, dotted):
    tree = {
        "buffer": {
            "explorer_input": {
                "taskset": {"path": "t.jsonl", "default_workflow_type": dotted, "workflow_args": {"a": 1}}
            }
        },
        "data_processor": {"experience_pipeline": {"operators": [{"name": "importme.flow.Flow"}]}},
        "monitor": {"monitor_type": ["importme.flow.Flow"]},
    }
    result = client(tmp_path).post("/api/check", json={"config": tree}).json()
    assert not marker_module.exists(), "the check imported the dotted path"
    notes = {w["path"]: w["message"] for w in result["warnings"]}
    assert "dotted path" in notes[f"{TASKSET}.default_workflow_type"]
    assert "imported at run time" in notes[f"{TASKSET}.default_workflow_type"]
    assert "dotted path" in notes["data_processor.experience_pipeline.operators[0].name"]
    assert "dotted path" in notes["monitor.monitor_type[0]"]
    assert not [e for e in result["errors"] if "importme" in e["message"]]
    assert f"default_workflow_type: {dotted}" in result["yaml"]  # saved as written


def test_a_dotted_workflow_for_every_taskset_is_left_to_the_run_where_the_config_copies_it(tmp_path):
    """The beginner form's ``explorer_input.default_workflow_type`` is copied to each taskset: the
    copy is the run's to check too (a false error there kept the studio from starting the run)."""
    tree = {
        "model": {"model_path": "m", "max_prompt_tokens": 8, "max_response_tokens": 8},
        "buffer": {
            "batch_size": 4,
            "explorer_input": {"taskset": {"path": "t.jsonl"}, "default_workflow_type": "my_pkg.MyWorkflow"},
        },
    }
    result = client(tmp_path).post("/api/check", json={"config": tree}).json()
    assert result["errors"] == []
    notes = {w["path"]: w["message"] for w in result["warnings"]}
    assert "imported at run time" in notes["buffer.explorer_input.default_workflow_type"]
    tree["buffer"]["explorer_input"]["default_workflow_type"] = "no_such_workflow"  # a plain name is checked
    errors = client(tmp_path).post("/api/check", json={"config": tree}).json()["errors"]
    assert [e["path"] for e in errors] == [f"{TASKSET}.default_workflow_type"]


def test_check_resolves_no_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_SECRET", "s3cret-value")
    tree = {
        "model": {"model_path": "${oc.env:STUDIO_SECRET}", "critic_model_path": "${model.model_path}"},
        "buffer": {"batch_size": "${oc.env:STUDIO_SECRET}", "total_epochs": "${ oc.env:STUDIO_SECRET,3}"},
        "checkpoint_root_dir": "${oc.env:STUDIO_SECRET}/ckpt",
    }
    answer = client(tmp_path).post("/api/check", json={"config": tree})
    assert "s3cret-value" not in answer.text
    result = answer.json()
    notes = {w["path"]: w["message"] for w in result["warnings"]}
    for path in ("model.model_path", "buffer.batch_size", "buffer.total_epochs", "checkpoint_root_dir"):
        assert "resolved at run time" in notes[path], path
    assert not [e for e in result["errors"] if e["path"] in notes or "oc.env" in e["message"]]
    assert "batch_size: ${oc.env:STUDIO_SECRET}" in result["yaml"]


def test_check_reads_no_file_the_page_did_not_send(tmp_path):
    trainer_config = tmp_path / "verl.yaml"
    trainer_config.write_text("actor: {lr: 1}\nsecret: [SECRET-LINE-OF-THE-FILE\n")  # broken YAML
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "private-name.txt").write_text("x")  # no data file: a listing would say so
    tree = {
        "model": {"model_path": "m", "chat_template_path": str(tmp_path / "missing.jinja")},
        "trainer": {"trainer_config_path": str(trainer_config)},
        "buffer": {"explorer_input": {"taskset": {"task_dir": str(folder)}}},
    }
    answer = client(tmp_path).post("/api/check", json={"config": tree})
    assert "SECRET-LINE" not in answer.text and "private-name" not in answer.text
    result = answer.json()
    notes = {w["path"]: w["message"] for w in result["warnings"]}
    left = ("model.chat_template_path", "trainer.trainer_config_path", f"{TASKSET}.task_dir")
    for path in left:
        assert "read when the run starts" in notes[path], path
    assert [e for e in result["errors"] if e["path"] in (*left, f"{TASKSET}.path")] == []  # task_dir stands for path
    assert f"trainer_config_path: {trainer_config}" in result["yaml"]


def test_the_token_is_never_in_a_reply(tmp_path):
    studio = client(tmp_path)
    for answer in (studio.get("/api/schema"), studio.get("/api/initial"), save(studio, "t.yaml")):
        assert TOKEN not in answer.text


# --- the studio writes trinity configs only (issue 46) -------------------------------------

VALID = {
    "project": "p",
    "model": {"model_path": "m", "max_prompt_tokens": 8, "max_response_tokens": 8},
    "buffer": {"explorer_input": {"taskset": {"path": "tasks.jsonl"}}},
}


@pytest.mark.parametrize(
    "given",
    [".github/workflows/ci.yml", ".pre-commit-config.yaml", "sub/.hidden/run.yaml", ".run.yaml", "via_link.yaml"],
)
def test_no_dot_file_or_dot_folder_is_written_whatever_the_request_says(tmp_path, given):
    (tmp_path / ".github").mkdir()
    (tmp_path / "via_link.yaml").symlink_to(tmp_path / ".github" / "x.yaml")  # the resolved file counts
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    body = {"config": VALID, "path": given, "overwrite": True, "save_anyway": True}
    answer = client(tmp_path).post("/api/save", json=body)
    assert answer.status_code == 403, answer.text
    assert "dot" in answer.json()["detail"] and given in answer.json()["detail"]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "text",
    [
        "name: ci\non: [push]\njobs: {test: {runs-on: ubuntu-latest}}\n",  # one key (name) is trinity's
        "services: {db: {image: postgres}}\nvolumes: {}\n",
        "- hosts: all\n  tasks: []\n",
        "just text\n",
        "key: [unclosed\n",
    ],
)
def test_a_file_that_is_not_a_trinity_config_is_never_replaced(tmp_path, text):
    target = tmp_path / "other.yaml"
    target.write_text(text)
    body = {"config": VALID, "path": "other.yaml", "overwrite": True, "save_anyway": True}
    answer = client(tmp_path).post("/api/save", json=body)
    assert answer.status_code == 409 and "trinity configs only" in answer.json()["detail"], answer.text
    assert target.read_text() == text


def test_a_trinity_config_with_a_misspelt_key_or_an_empty_file_is_replaced(tmp_path):
    for name, text in (("mine.yaml", "project: p\nnme: typo\nmodel: {model_path: m}\n"), ("empty.yaml", "")):
        (tmp_path / name).write_text(text)
        body = {"config": VALID, "path": name, "overwrite": True}
        assert client(tmp_path).post("/api/save", json=body).status_code == 200
        assert yaml_of(tmp_path / name)["model"]["model_path"] == "m"


def test_a_config_with_errors_is_saved_only_when_asked_and_the_reply_says_so(tmp_path):
    studio = client(tmp_path)
    broken = {**VALID, "algorithm": {"repeat_times": -1}}
    refused = studio.post("/api/save", json={"config": broken, "path": "run.yaml"})
    assert refused.status_code == 422, refused.text
    assert "algorithm.repeat_times" in refused.json()["detail"] and "save_anyway" in refused.json()["detail"]
    assert [e["path"] for e in refused.json()["errors"]] == ["algorithm.repeat_times"]
    assert not (tmp_path / "run.yaml").exists()
    anyway = studio.post("/api/save", json={"config": broken, "path": "run.yaml", "save_anyway": True})
    assert anyway.status_code == 200 and anyway.json()["saved_with_errors"] is True
    assert "1 error" in anyway.json()["note"]
    assert yaml_of(tmp_path / "run.yaml")["algorithm"] == {"repeat_times": -1}
    valid = studio.post("/api/save", json={"config": VALID, "path": "ok.yaml"})
    assert valid.status_code == 200 and valid.json()["saved_with_errors"] is False and "note" not in valid.json()


def yaml_of(path):
    import yaml

    return yaml.safe_load(path.read_text())


# --- hostile YAML and JSON: a 400 naming the limit, in well under a second (issue 46) ------

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)
"""A "billion laughs": 81 aliases, 10**9 nodes once expanded (about 400 bytes)."""


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        (LAUGHS, "nodes"),
        ("a: &a x\nb: [" + ", ".join(["*a"] * 101) + "]\n", "aliases"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32"),
        ("a: " + "[" * 100_000 + "\n", "nested deeper than 32"),  # the composer would recurse out
        ("a: " + "{b: " * 50 + "1" + "}" * 50 + "\n", "nested deeper than 32"),
    ],
    ids=["billion-laughs", "101-aliases", "40-deep", "100000-deep-unclosed", "50-deep-mappings"],
)
def test_yaml_beyond_the_limits_is_a_400_naming_the_limit_in_load_and_check(tmp_path, text, limit):
    studio = client(tmp_path)
    started = time.monotonic()
    loaded = studio.post("/api/load", json={"text": text})
    checked = studio.post("/api/check", json={"config": {"trainer": {"x": {"__yaml__": text}}}})
    assert time.monotonic() - started < 5
    assert loaded.status_code == 400 and limit in loaded.json()["detail"], loaded.text
    assert checked.status_code == 400 and limit in checked.json()["detail"], checked.text
    assert checked.json()["detail"].startswith("trainer.x")


def test_yaml_within_the_limits_loads_aliases_and_all(tmp_path):
    text = "model: &m {model_path: m}\nexplorer: {auxiliary_models: [" + ", ".join(["*m"] * 50) + "]}\n"
    loaded = client(tmp_path).post("/api/load", json={"text": text})
    assert loaded.status_code == 200 and len(loaded.json()["config"]["explorer"]["auxiliary_models"]) == 50


def test_deep_json_is_a_400_naming_the_limit_not_a_500(tmp_path):
    studio = client(tmp_path)
    for path in ("/api/check", "/api/save", "/api/load"):
        body = '{"config": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + ', "path": "x.yaml", "text": ""}'
        answer = studio.post(path, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and "limit of 64 levels" in answer.json()["error"]["message"]
    assert not list(tmp_path.iterdir())


def test_a_yaml_field_that_is_not_text_is_an_error_at_its_key(tmp_path):
    """The fuzz test's find: ``{"__yaml__": [...]}`` was a 500."""
    checked = client(tmp_path).post("/api/check", json={"config": {"trainer": {"x": {"__yaml__": [[1]]}}}})
    assert checked.status_code == 200
    assert checked.json()["errors"] == [{"path": "trainer.x", "message": "a YAML field holds text, not list"}]
