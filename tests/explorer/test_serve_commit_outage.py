"""``/commit`` while the buffer's PostgreSQL connection is cut at its COMMIT (``tests/helpers/pg_cut.py``):
a cut the writer recovers from is a plain success; one with no server after it is a 503 that
keeps the scored experiences, and the next ``/commit`` writes them, each once, whether the cut
commit had landed or not. Never a 500, never a lost or doubled experience."""

from __future__ import annotations

import uuid

import pytest
from test_serve_proxy import KEY, _call, _chat_ids

from helpers.pg_cluster import missing_reason, throwaway_postgres
from helpers.pg_cut import CommitCutter
from helpers.serve_helpers import serve_explorer
from trinity.buffer import open_experience_reader
from trinity.explorer import serve

pytestmark = pytest.mark.skipif(bool(missing_reason()), reason=missing_reason() or "")


@pytest.fixture(scope="module")
def cutter():
    with throwaway_postgres(fsync="off") as cluster, CommitCutter(cluster.port) as cutter:
        yield cutter


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, tiny_model_dir, cutter):
    """A serve-mode explorer whose buffer is on the server behind ``cutter`` (no heartbeats
    during a test: each COMMIT through the cutter is a write of the test's)."""
    buffer = "buffer.trainer_input.experience_buffer"
    explorer = serve_explorer(
        tmp_path_factory.mktemp("serve_outage"),
        tiny_model_dir,
        KEY,
        f"{buffer}.name=serve_{uuid.uuid4().hex[:8]}",
        f"{buffer}.path={cutter.url}",
        f"{buffer}.max_retry_times=2",
        f"{buffer}.writer_timeout=3600",
    )
    yield serve.ServeProxy(explorer.serve_host)
    explorer.shutdown()


def _scored(proxy: serve.ServeProxy, count: int, reward: float = 1.0) -> list[str]:
    ids = _chat_ids(proxy, count)
    assert _call(proxy, "POST", "/feedback", json={"reward": reward, "msg_ids": ids}).status_code == 200
    return ids


def _stored(proxy: serve.ServeProxy) -> dict[str, list[str]]:
    """Every stored experience's response id, and the step it was committed in, in buffer order."""
    storage = proxy.host.config.buffer.trainer_input.experience_buffer
    rows = open_experience_reader(storage, f"audit-{uuid.uuid4().hex[:6]}", auto_commit=False).read(1000, timeout=0.5)
    steps: dict[str, list[str]] = {}
    for exp in rows:
        steps.setdefault(exp.eid.batch, []).append(exp.info["msg_id"])
    return steps


@pytest.mark.parametrize("how", ["lost", "landed"])
def test_a_commit_cut_in_flight_is_written_once_and_answered_200(proxy, cutter, how):
    ids = _scored(proxy, 2)
    cutter.cut_next(how)
    answer = _call(proxy, "POST", "/commit")
    assert answer.status_code == 200, answer.text
    assert cutter.cuts[-1] == how
    step = answer.json()["step"]
    assert answer.json() == {"status": "success", "committed": 2, "dropped": 0, "step": step}
    assert _stored(proxy)[str(step)] == ids


@pytest.mark.parametrize("how", ["lost", "landed"])
def test_a_commit_with_the_buffer_out_of_reach_is_a_503_and_the_next_writes_it_once(proxy, cutter, how):
    held = _scored(proxy, 2)
    cutter.cut_next(how, and_go_down=True)
    refused = _call(proxy, "POST", "/commit")
    assert refused.status_code == 503, refused.text
    message = refused.json()["error"]["message"]
    storage = proxy.host.config.buffer.trainer_input.experience_buffer
    assert f"buffer {storage.name!r}: database " in message and "may have landed" in message, message
    assert "The scored experiences are held: /commit again to write them" in message
    cutter.come_back()
    later = _scored(proxy, 1)
    answer = _call(proxy, "POST", "/commit")
    assert answer.status_code == 200, answer.text
    step = answer.json()["step"]
    assert answer.json() == {"status": "success", "committed": 3, "dropped": 0, "step": step}
    stored = _stored(proxy)
    assert stored[str(step - 1)] == held and stored[str(step)] == later
    assert proxy.host.writer.buffer.state()["step"] == proxy.host.writer.step == step
