"""The serve proxy's bounds, in process: a serve-mode explorer on the tiny model, the proxy's app
behind its guard, the official ``openai`` client through an ASGI transport (the end-to-end run
over HTTP, with the trainer: tests/e2e/test_serve.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import httpx
import openai
import pytest

from serve_helpers import serve_explorer
from trinity.engine.openai_api import guarded
from trinity.explorer import serve
from trinity.synchronizer.methods import TrainerFinished

KEY = "sesame"
MESSAGES = [{"role": "user", "content": "1+1="}]
T = TypeVar("T")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, tiny_model_dir: Path):
    explorer = serve_explorer(tmp_path_factory.mktemp("serve"), tiny_model_dir, KEY)
    yield serve.ServeProxy(explorer.serve_host)
    explorer.shutdown()


def _client(proxy: serve.ServeProxy) -> httpx.AsyncClient:
    """An HTTP client of the proxy's app behind its guard, carrying the key."""
    transport = httpx.ASGITransport(app=guarded(proxy.app, "127.0.0.1", proxy.key))
    return httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers={"Authorization": "Bearer sesame"}
    )


def _on_explorer_loop(proxy: serve.ServeProxy, work: Awaitable[T]) -> T:
    """``work`` on the explorer's loop, where ``ServeHost.serve`` runs the proxy."""
    return proxy.host.loop.run_until_complete(work)


def _chat_ids(proxy: serve.ServeProxy, count: int) -> list[str]:
    """``count`` chat completions through the proxy (its engine requires the key: the proxy sends it)."""
    agent = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="sesame", http_client=_client(proxy))

    async def chats() -> list[str]:
        return [(await agent.chat.completions.create(model="policy", messages=MESSAGES)).id for _ in range(count)]

    return _on_explorer_loop(proxy, chats())


def _call(proxy: serve.ServeProxy, method: str, path: str, **kwargs) -> httpx.Response:
    async def call() -> httpx.Response:
        async with _client(proxy) as http:
            return await http.request(method, path, **kwargs)

    return _on_explorer_loop(proxy, call())


def test_unscored_responses_beyond_the_limit_expire_oldest_first(proxy, monkeypatch):
    monkeypatch.setattr(serve, "MAX_RECORDED", 2)
    expired = _call(proxy, "GET", "/metrics").json()["expired_responses"]
    oldest, *newest = _chat_ids(proxy, 3)
    metrics = _call(proxy, "GET", "/metrics").json()
    assert (metrics["expired_responses"] - expired, metrics["waiting_responses"]) == (1, 2)
    gone = _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": [oldest]})
    assert gone.status_code == 404 and "expired" in gone.json()["error"]["message"]
    assert _call(proxy, "POST", "/feedback", json={"reward": 1.0, "msg_ids": newest}).status_code == 200


def test_unscored_responses_expire_after_their_time(proxy, monkeypatch):
    _chat_ids(proxy, 1)
    monkeypatch.setattr(serve, "RECORDED_TTL_SECONDS", 0.0)
    metrics = _call(proxy, "GET", "/metrics").json()
    assert metrics["waiting_responses"] == 0 and metrics["expired_responses"] >= 1


def test_a_finished_trainer_is_no_error_while_the_proxy_follows_weights(proxy, monkeypatch, caplog):
    """After the trainer's last version the proxy keeps serving it, and logs no failure every poll."""
    sync = proxy.host.engines.sync.method  # the checkpoint sync itself
    sync.finish(proxy.host.engines.version)  # the trainer's end marker, as a finished trainer writes it
    try:
        with pytest.raises(TrainerFinished):  # what every poll now meets
            sync.fetch(proxy.host.engines.version + 1, 0)
        monkeypatch.setattr(proxy, "weights_poll_seconds", 0.01)
        with pytest.raises(TimeoutError):
            _on_explorer_loop(proxy, asyncio.wait_for(proxy._follow_weights(), timeout=0.2))
    finally:
        (sync.root / "finished.json").unlink()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_the_proxy_looks_for_newer_weights_every_half_check_interval(proxy, monkeypatch):
    """``explorer.service_status_check_interval``: Trinity-RFT's proxy checks versions every half of it."""
    monkeypatch.setattr(proxy.host.config.explorer, "service_status_check_interval", 7)
    slept = []
    real_sleep = asyncio.sleep  # the engine endpoint's uvicorn ticks with it on its own thread's loop

    async def sleep(seconds: float) -> None:
        if threading.current_thread() is not threading.main_thread():
            return await real_sleep(seconds)
        slept.append(seconds)
        if len(slept) == 2:
            raise asyncio.CancelledError

    monkeypatch.setattr(serve.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        _on_explorer_loop(proxy, serve.ServeProxy(proxy.host)._follow_weights())
    assert slept == [3.5, 3.5]


def test_engines_load_newer_weights_in_waves_leaving_min_running_model_num_serving(
    tmp_path, tiny_model_dir: Path, monkeypatch
):
    """Two engines, ``min_running_model_num: 1``: each loads while the other serves, once its own
    requests are done; the responses after it carry the new version."""
    from transformers import AutoModelForCausalLM

    from trinity.synchronizer.methods import WeightUpdate

    overrides = ("explorer.rollout_model.engine_num=2", "explorer.min_running_model_num=1")
    explorer = serve_explorer(tmp_path, tiny_model_dir, KEY, *overrides)
    try:
        proxy = serve.ServeProxy(explorer.serve_host)
        loads = []  # (engine loading, engines serving meanwhile)
        for i, engine in enumerate(explorer.engines.clients):

            def call(method, *args, i=i, original=engine.call):
                if method == "update_weights":
                    loads.append((i, list(proxy.serving)))
                return original(method, *args)

            monkeypatch.setattr(engine, "call", call)
        weights = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
        update = WeightUpdate(version=explorer.engines.version + 1, state_dict=weights)

        async def load_while_engine_0_is_busy():
            proxy.inflight[0] = 1  # a request in progress on engine 0
            loading = asyncio.ensure_future(proxy.load(update))
            await asyncio.sleep(0.3)
            waiting = (list(loads), list(proxy.serving))
            proxy.inflight[0] = 0
            await loading
            return waiting

        assert _on_explorer_loop(proxy, load_while_engine_0_is_busy()) == ([], [1])  # engine 0 waits, out of turn
        assert loads == [(0, [1]), (1, [0])] and proxy.serving == [0, 1]
        assert explorer.engines.version == update.version
        (chat_id,) = _chat_ids(proxy, 1)
        assert proxy.recorded[chat_id][1][0].model_version == update.version
    finally:
        explorer.shutdown()


def test_db_url_records_each_answer_and_its_reward_feedback(proxy, tmp_path, monkeypatch):
    """``explorer.db_url``: the proxy's history, read back with sqlite3 (another reader than the writer)."""
    db = tmp_path / "history.db"
    monkeypatch.setattr(proxy.host.config.explorer, "db_url", f"sqlite:///{db}")
    recording = serve.ServeProxy(proxy.host)
    first, second = _chat_ids(recording, 2)
    assert _call(recording, "POST", "/feedback", json={"reward": 0.5, "msg_ids": [first], "task_id": "t"}).is_success
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT msg_id, model_version, messages, responses, reward, task_id FROM proxy_history")
        rows = {row[0]: row[1:] for row in rows}
    assert set(rows) == {first, second}
    version, messages, responses, reward, task = rows[first]
    assert (version, json.loads(messages), reward, task) == (proxy.host.engines.version, MESSAGES, 0.5, "t")
    assert len(json.loads(responses)) == 1 and rows[second][3:] == (None, None)  # not scored yet


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_number_json_cannot_forward_is_a_bad_request(proxy, number):
    """Python's JSON parser reads these; the request to the engine cannot carry them (the fuzz test
    found a 502 for a 1e999 nested in a message)."""
    body = f'{{"model": "policy", "messages": [{{"role": "user", "content": "1+1=", "x": {number}}}]}}'
    response = _call(proxy, "POST", "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert "is not a finite JSON number" in response.json()["error"]["message"]
